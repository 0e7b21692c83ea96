"""POST /translate_file with .docx paragraphs whose runs sit inside other elements (content controls, smart tags,
custom XML, tracked insertions and moves) or around kept ones (tracked deletions, simple fields): each text in its
place, through the real app over a translator that upper-cases each sentence (its words kept in order, so where each
one lands shows)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import docx
import pytest
from docx.oxml.parser import parse_xml

from tests.service.harness import FakeTranslator, serve
from tests.service.test_files import fetch, upload
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions
from transduce.engine.results import TranslationResult

pytestmark = pytest.mark.anyio
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_NAMESPACES = (
    'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" '
    'xmlns:w14="http://schemas.microsoft.com/office/word/2010/wordml"'
)


class Upper(FakeTranslator):
    """The fake, recording what it is sent, but answering each sentence upper-cased, its words in order."""

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        results = super().translate(texts, source_lang=source_lang, target_lang=target_lang, options=options)
        return [
            TranslationResult(hypotheses=[text.upper()] * len(r.hypotheses), tokens=r.tokens)
            for text, r in zip(texts, results, strict=True)
        ]


def run(text: str, tag: str = "t") -> str:
    """A run of ``text`` (``tag`` "delText": a deleted run's)."""
    return f'<w:r><w:{tag} xml:space="preserve">{text}</w:{tag}></w:r>'


def run_in(text: str, properties: str) -> str:
    """A run of ``text`` with ``properties`` (its w:rPr)."""
    return f'<w:r>{properties}<w:t xml:space="preserve">{text}</w:t></w:r>'


def control(inner: str, *properties: str) -> str:
    """An inline content control holding ``inner``, with ``properties`` in its w:sdtPr."""
    return f"<w:sdt><w:sdtPr>{''.join(properties)}</w:sdtPr><w:sdtContent>{inner}</w:sdtContent></w:sdt>"


def docx_of(*paragraphs: str) -> bytes:
    """A .docx of one paragraph for each of ``paragraphs`` (the XML inside its w:p)."""
    document = docx.Document()
    for inner in paragraphs:
        document.add_paragraph()._p.extend(list(parse_xml(f"<w:p {_NAMESPACES}>{inner}</w:p>")))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


async def translated(data: bytes) -> tuple[list[str], list[Any]]:
    """``data`` uploaded and translated by ``Upper``: the sentences it was sent, and the translation's paragraphs
    (w:p elements)."""
    fake = Upper()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "changes.docx", data))
    return fake.translated[1:], [p._p for p in docx.Document(io.BytesIO(got.content)).paragraphs]


def shown(element: Any) -> str:
    """The text ``element`` shows (its w:t, deleted text not)."""
    return "".join(t.text or "" for t in element.iter(f"{W}t"))


def children(paragraph: Any) -> list[tuple[str, str]]:
    """A paragraph's children that hold text, as (tag without namespace, text shown or deleted)."""
    return [
        (child.tag.removeprefix(W), "".join(t.text or "" for t in child.iter(f"{W}t", f"{W}delText")))
        for child in paragraph
        if child.tag != f"{W}pPr"
    ]


async def test_inline_content_controls_smart_tags_and_custom_xml_are_translated_in_place() -> None:
    """Their text was moved to the end of the paragraph, untranslated ("Dear , welcome ... glad.John Smith"); a
    control Word fills (bound to data, a check box) keeps its text, in its place."""
    sent, (named, tagged, custom, bound, box) = await translated(
        docx_of(
            run("Dear ") + control(run("John Smith"), '<w:alias w:val="Name"/>') + run(", welcome. We are glad."),
            run("Call ") + f'<w:smartTag w:element="place"><w:smartTagPr/>{run("Paris")}</w:smartTag>' + run(" now."),
            run("Order ") + f'<w:customXml w:element="id">{run("number 42")}</w:customXml>' + run(" is ready."),
            run("Dear ") + control(run("Jane"), '<w:dataBinding w:xpath="/a"/>') + run(", welcome."),
            control(run("\u2610"), "<w14:checkbox/>") + run(" I agree."),
        )
    )
    assert [shown(p) for p in (named, tagged, custom, bound, box)] == [
        "DEAR JOHN SMITH, WELCOME. WE ARE GLAD.",
        "CALL PARIS NOW.",
        "ORDER NUMBER 42 IS READY.",
        "DEAR Jane, WELCOME.",
        "\u2610 I AGREE.",
    ]
    assert children(named) == [("r", "DEAR "), ("sdt", "JOHN SMITH"), ("r", ", WELCOME. WE ARE GLAD.")]
    assert named.find(f"{W}sdt/{W}sdtPr/{W}alias").get(f"{W}val") == "Name"  # the control itself kept
    assert children(tagged)[1] == ("smartTag", "PARIS") and children(custom)[1] == ("customXml", "NUMBER 42")
    assert "Dear [1] , welcome." in sent and not any("Jane" in s or "\u2610" in s for s in sent)


async def test_a_tracked_insertion_or_move_is_translated_with_its_sentence_inside_its_mark() -> None:
    """An insertion's text had moved to the end of its paragraph, untranslated ("The brown fox jumps.quick "), and a
    paragraph all inserted was not translated at all."""
    mark = 'w:id="1" w:author="A" w:date="2024-01-01T00:00:00Z"'
    sent, (inserted, moved, whole) = await translated(
        docx_of(
            run("The ") + f"<w:ins {mark}>{run('quick ')}</w:ins>" + run("brown fox jumps."),
            run("Read ") + f"<w:moveTo {mark}>{run('this part')}</w:moveTo>" + run(" first."),
            f"<w:ins {mark}>{run('A new paragraph.')}</w:ins>",
        )
    )
    assert children(inserted) == [("r", "THE "), ("ins", "QUICK "), ("r", "BROWN FOX JUMPS.")]
    assert children(moved) == [("r", "READ "), ("moveTo", "THIS PART"), ("r", " FIRST.")]
    assert children(whole) == [("ins", "A NEW PARAGRAPH.")]
    assert inserted.find(f"{W}ins").get(f"{W}author") == "A"
    assert sent == ["The [1] quick [2] brown fox jumps.", "Read [1] this part [2] first.", "A new paragraph."]


async def test_a_tracked_deletion_is_never_translated_and_stays_where_it_was() -> None:
    """Deleted text is not sent and stays between the words it was between; a change inside a word ("rec<del>ie</del>
    <ins>ei</ins>ve") leaves the word whole for the model (the insertion's text in place, unmarked; the deletion after
    the text around it, which keeps its order with a hyperlink after it)."""
    change = 'w:id="2" w:author="A"'
    sent, (replaced, moved, typo) = await translated(
        docx_of(
            run("The ")
            + f"<w:del {change}>{run('slow ', 'delText')}</w:del><w:ins {change}>{run('quick ')}</w:ins>"
            + run("fox jumps."),
            run("First. ") + f"<w:moveFrom {change}>{run('Moved away. ', 'delText')}</w:moveFrom>" + run("Last."),
            run("We rec")
            + f"<w:del {change}>{run('ie', 'delText')}</w:del><w:ins {change}>{run('ei')}</w:ins>"
            + run("ve the ")
            + f'<w:hyperlink w:anchor="parcel">{run("parcel")}</w:hyperlink>'
            + run(". Thanks."),
        )
    )
    assert children(replaced) == [("r", "THE "), ("del", "slow "), ("ins", "QUICK "), ("r", "FOX JUMPS.")]
    assert children(moved) == [("r", "FIRST. "), ("moveFrom", "Moved away. "), ("r", "LAST.")]
    assert children(typo) == [
        ("r", "WE RECEIVE THE "),
        ("del", "ie"),
        ("ins", ""),
        ("r", ""),
        ("hyperlink", "PARCEL"),
        ("r", ". THANKS."),
    ]
    assert sent == ["The [1] [2] quick [3] fox jumps.", "First.", "Last.", "We receive the [1] parcel [2] .", "Thanks."]


async def test_a_simple_field_keeps_its_result_in_its_place() -> None:
    """Word fills a simple field's result (a page count): it is kept as it is where it was, not moved to the end of
    its paragraph ("Total: pages in this file.3")."""
    field = f'<w:fldSimple w:instr=" NUMPAGES ">{run("3")}</w:fldSimple>'
    sent, (total,) = await translated(docx_of(run("Total: ") + field + run(" pages in this file.")))
    assert children(total) == [("r", "TOTAL: "), ("fldSimple", "3"), ("r", " PAGES IN THIS FILE.")]
    assert sent == ["Total: [1] pages in this file."]


def looks(element: Any) -> list[tuple[str, list[str]]]:
    """Each run with text inside ``element``, as (its text, its formatting's tags without namespace)."""
    return [
        (shown(r), [p.tag.removeprefix(W) for p in r.iterfind(f"{W}rPr/*")]) for r in element.iter(f"{W}r") if shown(r)
    ]


async def test_runs_inside_one_insertion_or_control_keep_their_formatting_and_hidden_text() -> None:
    """A paragraph typed with Track Changes on has all its runs inside one insertion: they had been read whole, so
    the hidden note came back shown in the first run and the bold "Warning." plain. Inside an insertion or a control,
    hidden text is translated apart and stays hidden, a look that changes between sentences and a label keep theirs,
    as outside."""
    mark = 'w:id="1" w:author="A" w:date="2024-01-01T00:00:00Z"'
    bold, hidden = "<w:rPr><w:b/></w:rPr>", "<w:rPr><w:vanish/></w:rPr>"
    body = run_in("Warning.", bold) + run(" Do not open the case. ") + run_in("Internal note.", hidden)
    sent, (inserted, controlled, labelled) = await translated(
        docx_of(
            f"<w:ins {mark}>{body}</w:ins>",
            run("Read this: ") + control(body, '<w:alias w:val="Text"/>'),
            f"<w:ins {mark}>{run_in('Note:', bold)}{run(' Keep it dry.')}</w:ins>",
        )
    )
    expected = [("WARNING.", ["b"]), (" DO NOT OPEN THE CASE. ", []), ("INTERNAL NOTE.", ["vanish"])]
    assert looks(inserted.find(f"{W}ins")) == expected
    assert looks(controlled.find(f"{W}sdt")) == expected
    assert looks(labelled.find(f"{W}ins")) == [("NOTE:", ["b"]), (" KEEP IT DRY.", [])]
    assert sent.count("Internal note.") == 2 and "Note:" in sent


async def test_an_insertion_with_a_space_keeps_its_mark_even_with_an_end_inside_a_word() -> None:
    """An insertion with an end inside a word had lost its mark whatever it held, its text made original text
    (rejecting the changes no longer removed it); only one that is a piece of a word (no space in it) does."""
    mark = 'w:id="1" w:author="A" w:date="2024-01-01T00:00:00Z"'
    link = f'<w:hyperlink w:anchor="x">{run(" website")}</w:hyperlink>'
    sent, (spanning, linked, piece) = await translated(
        docx_of(
            run("First one. Sec") + f"<w:ins {mark}>{run('ond one. Thi')}</w:ins>" + run("rd one."),
            run("Visit our") + f"<w:ins {mark}>{run('s')}{link}</w:ins>" + run(" today."),
            run("Colo") + f"<w:ins {mark}>{run('u')}</w:ins>" + run("r matters."),
        )
    )
    assert children(spanning) == [("r", "FIRST ONE. SEC"), ("ins", "OND ONE. THI"), ("r", "RD ONE.")]
    assert children(linked) == [("r", "VISIT OUR"), ("ins", "S WEBSITE"), ("r", " TODAY.")]
    assert linked.find(f"{W}ins/{W}hyperlink") is not None
    assert children(piece) == [("r", "COLOUR MATTERS."), ("ins", ""), ("r", "")]  # (the word whole for the model)
    assert "Colour matters." in sent


async def test_a_cut_inside_a_link_that_changes_the_sentences_costs_only_the_cuts_inside_elements() -> None:
    """An italic "Dr." in a link is a look change after punctuation: cut there, the sentences change, and every cut of
    the paragraph was dropped, so the bold "Warning." before it came back plain."""
    link = f'<w:hyperlink w:anchor="x">{run_in("Dr.", "<w:rPr><w:i/></w:rPr>")}{run(" Smith")}</w:hyperlink>'
    body = run_in("Warning.", "<w:rPr><w:b/></w:rPr>") + run(" Do not open the case. Ask ") + link + run(" for help.")
    sent, (paragraph,) = await translated(docx_of(body))
    assert sent == ["Warning.", "Do not open the case.", "Ask [1] Dr. Smith [2] for help."]
    assert looks(paragraph)[0] == ("WARNING.", ["b"])


async def test_a_stretch_that_starts_with_a_blank_or_hidden_space_takes_the_look_of_its_text() -> None:
    """The text went into the first run with any text, a space or a break included, whose look was not read: an
    insertion starting with a space showed its hidden note; a hidden space before visible text hid it."""
    mark = 'w:id="1" w:author="A" w:date="2024-01-01T00:00:00Z"'
    hidden = "<w:rPr><w:vanish/></w:rPr>"
    inserted = f"<w:ins {mark}>{run(' ')}{run_in('Internal note.', hidden)}{run(' Do not open.')}</w:ins>"
    _, (first, second) = await translated(docx_of(inserted, run_in(" ", hidden) + run("Visible text.")))
    assert [(t.strip(), f) for t, f in looks(first)] == [("INTERNAL NOTE.", ["vanish"]), ("DO NOT OPEN.", [])]
    assert [f for t, f in looks(second) if "VISIBLE" in t] == [[]]


async def test_a_sentence_after_a_field_result_is_written_outside_the_field() -> None:
    """A stretch's text went into its first run with visible text: a field's result ("Table 2" of a REF), which Word
    fills again, losing the translation, once a tab before it no longer counted as text."""
    field = (
        '<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> REF x </w:instrText>'
        '</w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r>'
        + run("Table 2")
        + '<w:r><w:fldChar w:fldCharType="end"/></w:r>'
    )
    _, (paragraph,) = await translated(docx_of("<w:r><w:tab/></w:r>" + field + run(" lists the values.")))
    runs = list(paragraph.iter(f"{W}r"))
    end = next(i for i, r in enumerate(runs) if r.find(f"{W}fldChar[@{W}fldCharType='end']") is not None)
    assert "LISTS THE VALUES." in "".join(shown(r) for r in runs[end:])  # after the field's end, not inside it
