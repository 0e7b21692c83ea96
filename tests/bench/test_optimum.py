"""Optimum's ORTModelForSeq2SeqLM as a ``transduce bench engines`` contender: the same ids as transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers is a bench extra")
pytestmark = [
    pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses", "ignore::torch.jit.TracerWarning"),
    pytest.mark.usefixtures("one_torch_thread"),
]

from tests.tiny import DE, EN  # noqa: E402
from transduce.bench.contenders import RUNNERS, Job, available, run_job  # noqa: E402
from transduce.bench.engines import ENGINES  # noqa: E402
from transduce.bench.optimum_site import MARKER, STACK, ensure_site, export_optimum, site_pool, site_versions  # noqa: E402
from transduce.interop.marian_export import export_marian  # noqa: E402
from transduce.model.checkpoint import load_checkpoint  # noqa: E402
from transduce.paths import user_cache_dir  # noqa: E402

SOURCES = [
    "Hello world.",
    "The cat sees the dog.",
    "A big red house.",
    "Good night, old world!",
    "The small blue dog runs to the green house and sees the water.",
]
LENGTH = 9  # also force every hypothesis to exactly this many tokens (as for random-weight models)


SITE = user_cache_dir() / "optimum-site"  # reused between runs, outside the work tree


def test_optimum_is_a_contender() -> None:
    assert "optimum-ort" in ENGINES and "optimum-ort" in RUNNERS and available("optimum-ort") is None


@pytest.fixture(scope="module")
def site() -> Path:
    """optimum-onnx and the transformers it pins, installed aside (downloaded from PyPI on the first run)."""
    try:
        return ensure_site(SITE)
    except RuntimeError as exc:  # offline: the bench itself reports the contender's row as an error then
        pytest.skip(f"cannot install the Optimum stack here: {exc}")


def test_the_side_packages_stay_out_of_this_process(site: Path) -> None:
    import transformers

    assert json.loads((site / MARKER).read_text()) == list(STACK)
    assert transformers.__version__ != "4.57.6"  # the environment's own transformers here
    with site_pool(site) as pool:  # and the pinned ones there
        assert pool.apply(site_versions) == {"transformers": "4.57.6", "optimum-onnx": "0.1.0"}


def train_briefly(tiny_checkpoint: Path, out: Path, steps: int = 150) -> Path:
    """The tiny random checkpoint after a few Adam steps on word-by-word en->de pairs: untrained, its decoder repeats
    one token whatever came before, which would not exercise the cached (decoder-with-past) path."""
    import random

    import torch
    import torch.nn.functional as F

    from transduce.model.checkpoint import save_checkpoint

    ckpt = load_checkpoint(tiny_checkpoint)
    model, cfg, tok = ckpt.model, ckpt.config, ckpt.tokenizer()
    rng = random.Random(0)
    idx = [[rng.randrange(len(EN)) for _ in range(rng.randint(1, 6))] for _ in range(400)]
    src = [tok.encode_source(" ".join(EN[i] for i in s), "de") for s in idx]
    tgt = [[cfg.decoder_start_id, *tok.encode(" ".join(DE[i] for i in s)), cfg.eos_id] for s in idx]

    def pad(seqs: list[list[int]]) -> torch.Tensor:
        return torch.tensor([s + [cfg.pad_id] * (max(map(len, seqs)) - len(s)) for s in seqs])

    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        batch = rng.sample(range(len(idx)), 32)
        ids, dec = pad([src[i] for i in batch]), pad([tgt[i] for i in batch])
        logits = model(ids, ids != cfg.pad_id, dec[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), dec[:, 1:].flatten(), ignore_index=cfg.pad_id)
        opt.zero_grad()
        loss.backward()
        opt.step()
    save_checkpoint(out, model.eval(), ckpt.tokenizer_model, meta={"name": "tiny-trained"})
    return out


@pytest.fixture(scope="module")
def paths(tiny_checkpoint: Path, site: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The briefly trained checkpoint, its Marian directory and Optimum's export of that (as ``prepare()`` does)."""
    work = tmp_path_factory.mktemp("bench")
    trained = train_briefly(tiny_checkpoint, work / "checkpoint.pt")
    export_marian(trained, work / "hf")
    with site_pool(site) as pool:
        pool.apply(export_optimum, (work / "hf", work / "optimum"))
    assert {p.name for p in (work / "optimum").iterdir()} >= {
        "encoder_model.onnx",
        "decoder_model.onnx",
        "decoder_with_past_model.onnx",
    }
    return {"checkpoint": str(trained), "transformers": str(work / "hf"), "optimum-ort": str(work / "optimum")}


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("fixed_length", [None, LENGTH])
def test_optimum_matches_transformers(paths: dict[str, str], site: Path, beam: int, fixed_length: int | None) -> None:
    tok = load_checkpoint(paths["checkpoint"]).tokenizer()
    sources = [tok.encode_source(s, "de") for s in SOURCES]
    jobs = {
        engine: Job(engine, paths[engine], sources, beam_size=beam, batch_size=2, threads=1, fixed_length=fixed_length)
        for engine in ("transformers", "optimum-ort")
    }
    ref = run_job(jobs["transformers"])  # transformers of this environment, in this process
    with site_pool(site) as pool:  # Optimum with its pinned transformers, in its own process
        opt = pool.apply(run_job, (jobs["optimum-ort"],))
    assert ref.error is None and opt.error is None, (ref.error, opt.error)
    assert len({tuple(h) for h in ref.hyps}) >= 3 and any(len(set(h)) > 2 for h in ref.hyps), ref.hyps  # not degenerate
    if fixed_length:
        assert all(len(h) == fixed_length for h in ref.hyps)
    assert opt.hyps == ref.hyps
    assert len(opt.batch_seconds) == 3 and opt.peak_rss_mb > 0
