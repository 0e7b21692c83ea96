"""The beam search's top-k on onnxruntime's kernel: the graph written by hand, and the same selection as numpy's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from transduce.engine.beam import BeamSearch
from transduce.engine.options import DecodeOptions
from transduce.engine.search import top_k
from transduce.engine.topk import SessionTopK, topk_graph
from transduce.engine.translator import Translator


@pytest.fixture(scope="module")
def session_top_k() -> SessionTopK:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2  # rows split between threads must come back in order
    return SessionTopK(options)


def test_the_hand_written_graph_is_one_valid_topk_node() -> None:
    model = onnx.load_from_string(topk_graph())
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8 and [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    (node,) = model.graph.node
    assert node.op_type == "TopK" and list(node.input) == ["log_probs", "k"] and list(node.output) == ["values", "ids"]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute} == {
        "axis": 1,
        "largest": 1,
        "sorted": 1,
    }
    assert [d.dim_value for d in model.graph.input[1].type.tensor_type.shape.dim] == [1]  # k: one value
    types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}
    float32, int64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    assert types == {"log_probs": float32, "k": int64, "values": float32, "ids": int64}


def test_same_ids_and_values_as_numpy_with_ties_and_masked_entries(session_top_k: SessionTopK) -> None:
    rng = np.random.default_rng(7)
    for trial in range(120):
        R, V = int(rng.integers(1, 140)), int(rng.integers(1, 3000))
        k = int(rng.integers(1, min(V, 16) + 1))
        x = np.round(rng.standard_normal((R, V)) * rng.choice([0.5, 2.0, 10.0])).astype(np.float32)  # many ties
        if trial % 3 == 0:
            x[rng.random((R, V)) < rng.random()] = -np.inf  # a row may have fewer than k real entries
        if trial % 7 == 0:
            x[0] = -np.inf
        ids, vals = session_top_k(x, k)
        ref_ids, ref_vals = top_k(x, k)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_array_equal(vals, ref_vals)
        assert ids.dtype == np.int64 and vals.dtype == np.float32 and ids.shape == (R, k)


def test_float16_float64_and_bad_k(session_top_k: SessionTopK) -> None:
    x = (np.random.default_rng(3).integers(-30, 0, size=(5, 300)) / 4).astype(np.float16)
    np.testing.assert_array_equal(session_top_k(x, 6)[0], np.argsort(-x, axis=1, kind="stable")[:, :6])
    wide = x.astype(np.float64)  # the reference handles it
    np.testing.assert_array_equal(session_top_k(wide, 6)[0], top_k(wide, 6)[0])
    assert session_top_k(np.zeros((0, 300), np.float32), 6)[0].shape == (0, 6)
    for k in (0, 301):
        with pytest.raises(ValueError, match=r"k must be between 1 and the row length \(300\)"):
            session_top_k(x.astype(np.float32), k)


def test_beam_search_selects_with_the_top_k_it_is_given(session_top_k: SessionTopK) -> None:
    calls: list[tuple[int, int]] = []

    def counting(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        calls.append((x.shape[0], k))
        return session_top_k(x, k)

    rng = np.random.default_rng(11)
    steps = [np.log(rng.dirichlet(np.ones(50), size=r)).astype(np.float32) for r in (3, 12, 12, 12)]
    results = []
    for select in (counting, top_k):
        search = BeamSearch(3, beam_size=4, eos_id=0, max_lengths=[4, 4, 4], select_top_k=select)
        for log_probs in steps:
            if search.is_done():
                break
            search.advance(log_probs[: len(search.row_sentence)])
        results.append(search.finalize())
    assert calls and calls[0] == (3, 8)
    assert results[0] == results[1]


def test_engines_select_on_onnxruntime_with_the_same_translations(tiny_model_dir: Path) -> None:
    engine = Translator(tiny_model_dir, device="cpu", intra_threads=1)
    runner = engine.runner
    assert isinstance(runner.sessions.top_k, SessionTopK)
    source = [[5, 9, 14, 2], [7, 7, 30, 41, 12, 2], [22, 2]]
    options = DecodeOptions(beam_size=4, num_hypotheses=2, return_scores=True)
    fast = engine.translate_batch(source, options=options)
    runner.sessions.top_k = top_k  # numpy's, the reference
    assert engine.translate_batch(source, options=options) == fast
