"""The process's shared CPU arena: made once, opt-in, CPU sessions only, and the same outputs."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from transduce.engine.arena import USE_ENV_ALLOCATORS, SharedArena
from transduce.engine.session import session_options


def _uses_arena(options: object) -> bool:
    try:
        return options.get_session_config_entry(USE_ENV_ALLOCATORS) == "1"  # type: ignore[attr-defined]
    except RuntimeError:  # onnxruntime raises for a key never set
        return False


def test_the_arena_is_registered_once_and_then_applied(caplog: pytest.LogCaptureFixture) -> None:
    registered: list[int] = []
    arena = SharedArena(lambda: registered.append(1))
    assert not _uses_arena(session_options(1, 1, arena=arena))  # not made yet: the session's own arena
    assert arena.make() and arena.make()
    assert registered == [1]  # onnxruntime's environment gets one allocator per process
    assert _uses_arena(session_options(1, 1, arena=arena))
    assert not _uses_arena(session_options(1, 1))  # a session that does not ask keeps its own

    def broken() -> None:
        raise RuntimeError("no allocator today")

    failed = SharedArena(broken)
    with caplog.at_level(logging.WARNING, logger="transduce.engine"):
        assert not failed.make() and not failed.make()
    assert [r.getMessage() for r in caplog.records] == [
        "onnxruntime's shared CPU arena could not be made (sessions keep their own): no allocator today"
    ]
    assert not _uses_arena(session_options(1, 1, arena=failed))
    never = SharedArena(None)  # the test suite's in-process engines
    assert not never.make() and not _uses_arena(session_options(1, 1, arena=never))


def test_engines_that_ask_share_one_arena_and_translate_the_same(tiny_model_dir: Path) -> None:
    """In a fresh process, as the service and the command line open engines: every CPU session of an engine opened
    with ``shared_pool`` (replicas with sessions of their own included) allocates from the shared arena, an engine
    that does not ask keeps arenas of its own, and all translate the same, greedy and beam."""
    script = f"""
import json
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
model, key = {str(tiny_model_dir)!r}, {USE_ENV_ALLOCATORS!r}
engines = [Translator(model, device="cpu", intra_threads=1)]
engines.append(Translator(model, device="cpu", intra_threads=2, replicas=2, shared_pool=True))  # sessions each
engines.append(Translator(model, device="cpu", intra_threads=1, shared_pool=True))
engines.append(Translator(model, device="cpu", intra_threads=1))
def uses(options):
    try:
        return options.get_session_config_entry(key) == "1"
    except RuntimeError:
        return False
out = []
for t in engines:
    sessions = [s for r in t.runners for s in (r.sessions.encoder, r.sessions.decoder)]
    flags = [uses(s.get_session_options()) for s in sessions]
    sources = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    tokens = [[r.tokens for r in t.translate_batch(sources, options=DecodeOptions(beam_size=b))] for b in (1, 3)]
    out.append([flags, tokens])
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert [row[0] for row in out] == [[False, False], [True, True] * 2, [True, True], [False, False]]
    assert out[0][1] == out[1][1] == out[2][1] == out[3][1]


def test_release_memory_gives_back_what_an_unloaded_engine_left_in_the_arena(tiny_model_dir: Path) -> None:
    """In a fresh process: an engine on the shared arena translates a large batch at beam 4 (the arena grows), is
    dropped, and glibc's freed memory is handed back: the arena keeps what the engine freed until
    ``release_memory`` shrinks it."""
    script = f"""
import json, re
from pathlib import Path
from transduce.engine.heap import give_memory_back
from transduce.engine.options import DecodeOptions
from transduce.engine.session import release_memory
from transduce.engine.translator import Translator
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) // 1024
t = Translator({str(tiny_model_dir)!r}, device="cpu", intra_threads=1, shared_pool=True)
opened = rss()
sources = [[5 + (i + j) % 40 for j in range(120)] for i in range(64)]
t.translate_batch(sources, options=DecodeOptions(beam_size=4, chunk_size=64, max_decoding_length=120,
                                                  min_decoding_length=120))
used = rss()
del t
give_memory_back()
dropped = rss()
release_memory()
print(json.dumps([opened, used, dropped, rss()]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    opened, used, dropped, released = json.loads(done.stdout.strip().splitlines()[-1])
    assert used - opened > 40, (opened, used)  # the arena grew
    assert dropped - released > 30, (dropped, released)  # kept until it is shrunk, then given back
    assert released < opened + 10


def test_a_failed_shrink_is_logged_and_glibc_still_gives_memory_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``release_memory`` is a clean-up after an unload and before a load: a shrink that fails must not fail them."""
    from transduce.engine import session

    arena = SharedArena(lambda: None)
    assert arena.make()

    def broken(options: object) -> None:
        raise RuntimeError("cannot open the shrink session")

    given: list[int] = []
    monkeypatch.setattr(arena, "shrink", broken)
    monkeypatch.setattr(session, "PROCESS_ARENA", arena)
    monkeypatch.setattr(session, "give_memory_back", lambda: given.append(1))
    with caplog.at_level(logging.WARNING, logger="transduce.engine"):
        session.release_memory()
    assert given == [1]
    assert [r.getMessage() for r in caplog.records] == [
        "onnxruntime's shared CPU arena could not be shrunk: cannot open the shrink session"
    ]
