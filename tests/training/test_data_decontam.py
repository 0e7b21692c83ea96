"""Decontamination (offline): dev sets and reserved test material are matched up to case, punctuation and whitespace,
removed from every split and counted; train never shares a text with our own dev/test slices. Also the shared-data
lookup and reading repository copies (bare mirror, clone, folder)."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from transduce.training.data import shared
from transduce.training.data.clean import Pair, match_key
from transduce.training.data.gitrepo import Repo, parse_git_options
from transduce.training.data.reserved import collect, drop_overlaps, drop_reserved, read_dev_sets


def test_match_key_ignores_case_punctuation_and_whitespace() -> None:
    assert match_key("Hello, World!") == match_key("hello world") == match_key(" HELLO\u00a0-world… ")
    assert match_key("„Guten Tag“, sagte er.") == match_key("guten tag sagte er")
    assert match_key("Straße") == match_key("STRASSE")  # case folding
    assert match_key("ﬁne") == match_key("fine")  # NFKC
    assert match_key("Hello world") != match_key("Hello word")


def make_reserved_material(tmp_path: Path) -> tuple[Path, dict[str, Repo]]:
    root = tmp_path / "shared"
    (root / "dev").mkdir(parents=True)
    (root / "bible-split.json").write_text("{}")
    (root / "dev" / "news.en-de.tsv").write_text("The market fell.\tDer Markt fiel.\n", encoding="utf-8")
    (root / "dev" / "caps.de-en.tsv").write_text("Ein Hund.\tA dog.\n", encoding="utf-8")  # columns from the name
    (root / "dev" / "README.md").write_text("not a dev set")
    m30k = tmp_path / "multi30k" / "data/task1/raw"
    m30k.mkdir(parents=True)
    (m30k / "test_2017_mscoco.en.gz").write_bytes(gzip.compress(b"A cat sleeps on a sofa.\n"))
    opus = tmp_path / "opus" / "testsets/de-en"
    opus.mkdir(parents=True)
    (opus / "newstest2014-deen.en.gz").write_bytes(gzip.compress(b"Gutach: Increased safety for pedestrians\n"))
    (opus / "newstest2014-deen.de.gz").write_bytes(gzip.compress("Gutach: Mehr Sicherheit für Fußgänger\n".encode()))
    repos = {"multi30k": Repo("multi30k", tmp_path / "multi30k"), "opus-mt-train": Repo("o", tmp_path / "opus")}
    return root, repos


def test_reserved_texts_are_removed_and_counted_per_set(tmp_path: Path) -> None:
    root, repos = make_reserved_material(tmp_path)
    assert read_dev_sets(root / "dev") == {
        "caps": {"de": ["Ein Hund."], "en": ["A dog."]},
        "news": {"en": ["The market fell."], "de": ["Der Markt fiel."]},
    }
    reserved = collect(root, repos)
    assert set(reserved.keys) == {"dev:caps", "dev:news", "reserved:multi30k-test", "reserved:newstest2014"}
    assert (
        set(reserved.missing) == {"reserved:tatoeba-short"}
        and "git clone" in reserved.missing["reserved:tatoeba-short"]
    )
    pairs = [
        Pair("x", "the market  fell", "Die Börse brach ein."),  # English side of a dev pair, other case/punctuation
        Pair("x", "Prices dropped.", "DER MARKT FIEL!"),  # German side of a dev pair
        Pair("x", "A dog!", "Ein Hund!"),  # the de-en dev set, both sides
        Pair("x", "a cat sleeps on a sofa", "Eine Katze schläft."),  # Multi30k test caption
        Pair("x", "Safety for pedestrians", "Gutach - mehr Sicherheit für Fußgänger"),  # newstest2014
        Pair("x", "Der Markt fiel.", "The market fell."),  # sides swapped: English is compared with English only
        Pair("x", "A dog runs.", "Ein Hund rennt."),  # similar is not equal: kept
    ]
    removed: Counter[str] = Counter()
    kept = list(drop_reserved(pairs, reserved, removed))
    assert kept == pairs[5:]
    assert removed == {"dev:news": 2, "dev:caps": 1, "reserved:multi30k-test": 1, "reserved:newstest2014": 1}


def test_train_pairs_matching_own_dev_or_test_are_removed_per_source() -> None:
    by_source = {
        "a": {
            "train": [Pair("a", "good morning", "guten Morgen"), Pair("a", "Bye.", "Tschüss.")],
            "dev": [],
            "test": [],
        },
        "b": {
            "train": [Pair("b", "Good Morning!", "Morgen!")],
            "dev": [Pair("b", "Good morning.", "Guten Morgen.")],
            "test": [Pair("b", "See you.", "Tschüss!")],
        },
    }
    assert drop_overlaps(by_source) == {"a": 2, "b": 1}
    assert by_source["a"]["train"] == [] and by_source["b"]["train"] == []
    assert len(by_source["b"]["dev"]) == 1  # held-out pairs stay


def test_shared_data_is_configurable_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(shared.ENV, raising=False)
    assert shared.shared_dir() == shared.DEFAULT and shared.DEFAULT.parts[-2:] == ("shared", "data")
    monkeypatch.setenv(shared.ENV, str(tmp_path / "env"))
    assert shared.shared_dir() == tmp_path / "env" and shared.shared_dir(tmp_path / "x") == tmp_path / "x"
    with pytest.raises(ValueError) as info:
        shared.require()
    assert "\n" not in str(info.value) and "--shared-data" in str(info.value)
    root, _ = make_reserved_material(tmp_path)
    assert shared.require(root) == root


def test_git_options_are_checked(tmp_path: Path) -> None:
    assert parse_git_options([f"tatoeba={tmp_path}"]) == {"tatoeba": tmp_path}
    assert parse_git_options(None) == {}
    for bad, message in (("tatoeba", "NAME=PATH"), ("x=/", "unknown"), (f"wmt21={tmp_path}/no", "git clone")):
        with pytest.raises(ValueError, match=message):
            parse_git_options([bad])


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_repo_reads_bare_mirrors_clones_and_folders(tmp_path: Path) -> None:
    def git(*args: str, cwd: Path = tmp_path) -> None:
        env_args = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
        subprocess.run(["git", *env_args, *args], cwd=cwd, check=True, capture_output=True)

    clone = tmp_path / "clone"
    (clone / "data").mkdir(parents=True)
    (clone / "data" / "a.txt").write_text("committed\n")
    git("init", "-q", str(clone))
    git("add", ".", cwd=clone)
    git("commit", "-q", "-m", "x", cwd=clone)
    (clone / "data" / "a.txt").write_text("changed in the work tree\n")
    git("clone", "-q", "--bare", str(clone), str(tmp_path / "bare.git"))
    folder = tmp_path / "clone" / "data"  # a folder inside a repository is read as a plain folder
    for path, expected in ((clone, b"committed\n"), (tmp_path / "bare.git", b"committed\n")):
        repo = Repo("r", path)
        assert repo.is_git and repo.files("data/") == ["data/a.txt"] and repo.read("data/a.txt") == expected
        assert repo.read("data/missing.txt") is None and "@" in repo.describe()
    plain = Repo("r", folder)
    assert not plain.is_git and plain.files() == ["a.txt"] and plain.read("a.txt") == b"changed in the work tree\n"
