"""The one sentence splitter (segment) and re-joiner (Segmented.rejoin) that the service and the CLI share."""

from __future__ import annotations

import random

import pytest

from transduce.engine.text import EDGE_MARKS, Segmented, segment, segment_around, split_long


@pytest.mark.parametrize(
    ("text", "sentences", "separators"),
    [
        ("Hello world. How are you?", ["Hello world.", "How are you?"], [" ", ""]),
        ("Stop!  Go…\tNow.", ["Stop!", "Go…", "Now."], ["  ", "\t", ""]),
        ("It works, e.g. this stays whole.", ["It works, e.g. this stays whole."], [""]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."], [" ", ""]),
        ("(Ende.) Weiter geht's!", ["(Ende.)", "Weiter geht's!"], [" ", ""]),
        ("line one\nline two\n\n  line three", ["line one", "line two", "line three"], ["\n", "\n\n  ", ""]),
        ("Trailing space. ", ["Trailing space."], [" "]),
        ("  Leading space.", ["Leading space."], [""]),
        ("no end mark  ", ["no end mark"], ["  "]),  # trailing whitespace is never part of a sentence
        ("spaces before  \na break", ["spaces before", "a break"], ["  \n", ""]),
        ("e.g.  this stays whole", ["e.g.  this stays whole"], [""]),  # however many spaces follow "e.g."
        # titles, initials and number prefixes do not end a sentence (Moses' non-breaking prefixes)
        ("Dr. Smith came. Mr. Li left.", ["Dr. Smith came.", "Mr. Li left."], [" ", ""]),
        (
            "J. R. R. Tolkien wrote it. (Prof. X) read it.",
            ["J. R. R. Tolkien wrote it.", "(Prof. X) read it."],
            [" ", ""],
        ),
        ("Siehe Nr. 3. Dann Abs. 2 lesen.", ["Siehe Nr. 3.", "Dann Abs. 2 lesen."], [" ", ""]),
        ("The answer is No. Then we left.", ["The answer is No.", "Then we left."], [" ", ""]),  # no digit after it
        ("So did I. Then we left.", ["So did I.", "Then we left."], [" ", ""]),  # "I" is no initial
        (
            "Option A.\nOption B.\r\nDr.\n\nSmith",
            ["Option A.", "Option B.", "Dr.", "Smith"],
            ["\n", "\r\n", "\n\n", ""],
        ),
        # every line break str.splitlines() knows ends a sentence, not only \n: a lone \r (old Mac files), \r\n,
        # NEL, U+2028, form feed, vertical tab
        ("Good night\rSee you\r", ["Good night", "See you"], ["\r", "\r"]),
        ("a\r\nb\x85c\u2028d\u2029e\ff\vg", list("abcdefg"), ["\r\n", "\x85", "\u2028", "\u2029", "\f", "\v", ""]),
        ("", [], []),
        (" \n\t ", [], []),
    ],
)
def test_segment(text: str, sentences: list[str], separators: list[str]) -> None:
    item = segment(text)
    assert (list(item.sentences), list(item.separators)) == (sentences, separators)


@pytest.mark.parametrize(
    "text",
    [
        "A. B. C.",
        "Eins! Zwei?  Drei…\nVier",
        "x",
        'Wait... what? "Yes." No.\n\n',
        "Mr. X. Ms. Y.",
        "  \t Indented.  Two spaces after. \n",
        "\u00a0No-break space first.",
        "",
        " \n\t ",
        "\u200f Hello. \u200f",
        "Hello.\n\u200f\nWorld.\ufeff",
        "A.\n\u200f B.",  # marks that begin a later sentence
        "Hello. \u200fWorld.",
    ],
)
def test_segments_put_back_together_give_the_text_exactly(text: str) -> None:
    item = segment(text)
    assert item.rejoin(item.sentences) == text
    edges = [c.isspace() or c in EDGE_MARKS for s in item.sentences for c in (s[0], s[-1])]
    assert all(item.sentences) and not any(edges)


def test_rejoin_keeps_the_source_whitespace_around_translations() -> None:
    item = segment("Guten Morgen.\n\nWie geht es?  Gut.")
    assert item.rejoin(["Good morning.", "How are you?", "Fine."]) == "Good morning.\n\nHow are you?  Fine."


def test_leading_and_trailing_whitespace_of_the_text_is_kept() -> None:
    item = segment("\n  Guten Morgen. Wie geht es?\t ")
    assert (item.leading, item.sentences, item.separators[-1]) == ("\n  ", ("Guten Morgen.", "Wie geht es?"), "\t ")
    assert item.rejoin(["Good morning.", "How are you?"]) == "\n  Good morning. How are you?\t "
    assert segment("   ").rejoin([]) == "   "  # a blank text is all leading whitespace: it comes back as it was


def test_invisible_marks_at_the_edges_are_kept_with_the_whitespace() -> None:
    """Right-to-left marks, isolates, a byte order mark or a zero-width space around a text are not the sentence's:
    the tokenizer would drop them, so they come back where they were, as whitespace does."""
    item = segment("\u200f Hallo Welt. \u2069\ufeff")
    assert (item.leading, item.sentences, item.separators) == ("\u200f ", ("Hallo Welt.",), (" \u2069\ufeff",))
    assert item.rejoin(["Hello world."]) == "\u200f Hello world. \u2069\ufeff"
    assert segment("Eins.\n\u200e\nZwei.").sentences == ("Eins.", "Zwei.")  # marks alone on a line: no sentence


def test_rejoin_refuses_a_wrong_number_of_translations() -> None:
    with pytest.raises(ValueError, match="2 translations for 3 sentences"):
        segment("One. Two. Three.").rejoin(["a", "b"])
    with pytest.raises(ValueError, match="1 translations for 0 sentences"):
        Segmented((), ()).rejoin(["a"])


def test_split_long_cuts_at_clause_marks_then_spaces() -> None:
    words = "one two three four, five six seven eight nine ten eleven twelve thirteen fourteen"
    parts = split_long(words, lambda t: len(t.split()) <= 5)
    assert "".join(parts) == words and all(len(p.split()) <= 5 for p in parts)
    assert parts[0] == "one two three four, "  # the comma, not the fifth word
    assert split_long("x" * 25, lambda t: len(t) <= 10) == ["x" * 10, "x" * 10, "x" * 5]  # one long word: by length
    assert split_long("fits", lambda t: True) == ["fits"] and split_long("", lambda t: False) == []


def test_split_long_probes_short_prefixes_first() -> None:
    """Each probe of ``fits`` costs its prefix's length (a tokenizer runs over it): bisecting from the whole rest
    probed half of a 40,000-character line for every part cut off it, quadratic in the line."""
    text = " ".join(f"w{i % 10}" for i in range(10_000))
    probed: list[int] = []

    def fits(prefix: str) -> bool:
        probed.append(len(prefix))
        return len(prefix.split()) <= 10

    parts = split_long(text, fits)
    assert "".join(parts) == text and all(len(p.split()) <= 10 for p in parts)
    assert sum(probed) < 20 * len(text)  # about 8 times here; probing the rest, then half of it: 564 times


def test_split_long_probes_a_sentence_that_fits_once() -> None:
    """Most sentences fit: one probe of the whole, not a climb to it (which also cut a sentence whose start alone
    counted more tokens than the whole, as a prefix cut inside a word can)."""
    probed: list[int] = []

    def fits(text: str) -> bool:
        probed.append(len(text))
        return len(text) > 100 or len(text) < 64  # not monotone: a 64- to 100-character prefix "does not fit"

    sentence = "word " * 40
    assert split_long(sentence, fits) == [sentence] and probed == [200]


def test_split_long_never_cuts_inside_a_span_kept_whole() -> None:
    """A glossary term is masked as one placeholder of two tokens only whole: a prefix that ends inside it counts its
    words, so the longest prefix that fits could end inside it, and a cut there lost the term and made a part that
    did not fit once the term was masked (validation refused the file)."""
    term = "alpha beta gamma delta epsilon"

    def count(text: str) -> int:  # the term, whole, counts 2; every other word 1
        return len(text.replace(term, "T T").split())

    rng = random.Random(1)
    for _ in range(500):
        words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 9))) for _ in range(rng.randint(3, 25))]
        words.insert(rng.randint(0, len(words)), term)
        sentence = " ".join(words) + "."
        at = sentence.index(term)
        parts = split_long(sentence, lambda t: count(t) <= 6, [(at, at + len(term))])
        assert "".join(parts) == sentence
        assert all(count(p) <= 6 for p in parts), parts  # each part fits as the term is counted
        assert any(term in p for p in parts), parts  # the term never cut in two


def test_segment_around_ends_no_sentence_inside_a_span() -> None:
    text = "  We work for Acme Inc. The firm makes tools. Call us! "
    at = text.index("Acme Inc.")
    kept = segment_around(text, [(at, at + len("Acme Inc."))])
    assert kept.sentences == ("We work for Acme Inc. The firm makes tools.", "Call us!")
    assert kept.rejoin(list(kept.sentences)) == text and kept.leading == "  " and kept.separators == (" ", " ")
    assert segment_around(text, []) == segment(text) and len(segment(text).sentences) == 3
