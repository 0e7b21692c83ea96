"""File names of a model directory and the ONNX input/output names of its graphs (Optimum's seq2seq convention),
defined once for the export and the engine."""

from __future__ import annotations

# files of a model directory (the manifest names them; these are what `transduce export` writes)
MANIFEST_FILE = "manifest.json"
ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder.onnx"
# the same step written for onnxruntime's CPU provider with its fused self-attention (float32 exports; the CPU's
# full-vocabulary decoder, the base of the shortlist decoder and of int8 quantisation)
CPU_DECODER_FILE = "decoder_cpu.onnx"
GATHER_FILE = "gather.onnx"  # device-side cache reorder, used by the IO-binding (CUDA) runner
TOKENIZER_FILE = "tokenizer.model"


WEIGHTS_SUFFIX = ".data"


def weights_file(graph: str) -> str:
    """The file beside an ONNX graph file that holds its weights (``encoder.onnx`` -> ``encoder.onnx.data``; exports
    before revision 6 kept them inside the graph file)."""
    return graph + WEIGHTS_SUFFIX


# encoder.onnx
ENC_INPUT_IDS = "input_ids"  # (batch, src_len) int64
ENC_ATTENTION_MASK = "attention_mask"  # (batch, src_len) int64, 1 = token, 0 = padding
ENC_HIDDEN = "last_hidden_state"  # (batch, src_len, d_model) float

# decoder.onnx (one incremental step)
DEC_INPUT_IDS = "input_ids"  # (batch, 1) int64: the last target token of every row (hypothesis)
DEC_ENCODER_MASK = "encoder_attention_mask"  # (sentences, src_len) int64
DEC_POSITIONS = "position_ids"  # (batch,) int64: the position of each row's new token (its own decoding step)
DEC_SELF_MASK = "decoder_attention_mask"  # (batch, past_len + 1) int64: 1 = attend; 0 hides a row's cache padding
# Rows that joined a running batch later have shorter histories: their caches are padded at the start to the
# batch's common past length, and the mask hides the padding.
# The decoder's cross K/V inputs and encoder mask hold one row per *sentence*; its other inputs one row per
# hypothesis: batch = sentences * k, and the k consecutive rows of a sentence (its beams) share its cross K/V.
DEC_LOG_PROBS = "log_probs"  # (batch, vocab) float: log-softmax of the LAST new position

BATCH_AXIS = "batch_size"
SENTENCE_AXIS = "encoder_batch_size"  # the decoder's per-sentence inputs (cross K/V, encoder mask)
SRC_AXIS = "encoder_sequence_length"
PAST_AXIS = "past_decoder_sequence_length"
TOTAL_AXIS = "total_decoder_sequence_length"


def past_self(layer: int, kind: str) -> str:
    """Decoder input: self-attention cache of ``layer`` (``kind`` key|value), (batch, heads, past, d_k)."""
    return f"past_key_values.{layer}.decoder.{kind}"


def present_self(layer: int, kind: str) -> str:
    """Decoder output: self-attention cache extended by the new positions, (batch, heads, past+new, d_k)."""
    return f"present.{layer}.decoder.{kind}"


def cross(layer: int, kind: str) -> str:
    """Cross-attention keys/values of ``layer``: an encoder output and a decoder input, (batch, heads, src_len, d_k)."""
    return f"past_key_values.{layer}.encoder.{kind}"


def past_names(n_layers: int) -> list[str]:
    """Self-attention cache input names, layer-major: [0.key, 0.value, 1.key, ...]."""
    return [past_self(i, kind) for i in range(n_layers) for kind in ("key", "value")]


def present_names(n_layers: int) -> list[str]:
    """Self-attention cache output names in the same order as ``past_names``."""
    return [present_self(i, kind) for i in range(n_layers) for kind in ("key", "value")]


def cross_names(n_layers: int) -> list[str]:
    """Cross-attention key/value names, layer-major."""
    return [cross(i, kind) for i in range(n_layers) for kind in ("key", "value")]


def decoder_input_names(n_layers: int) -> list[str]:
    """The decoder step's inputs in graph order: ids, encoder mask, positions, self mask, past K/V, cross K/V."""
    steps = [DEC_INPUT_IDS, DEC_ENCODER_MASK, DEC_POSITIONS, DEC_SELF_MASK]
    return [*steps, *past_names(n_layers), *cross_names(n_layers)]


# gather.onnx: rows (R',) int64 + 2L cache tensors -> the tensors gathered along axis 0
GATHER_ROWS = "rows"


def gather_input(i: int) -> str:
    """Input ``i`` of gather.onnx: one cache tensor (rows, heads, length, d_k)."""
    return f"t.{i}"


def gather_output(i: int) -> str:
    """Output ``i`` of gather.onnx: input ``i`` gathered by ``rows``."""
    return f"g.{i}"


# decoder_shortlist.onnx: the CPU decoder (decoder.onnx in float16 exports) with the output projection as an input
# (see transduce.engine.shortlist)
SHORTLIST_DECODER_FILE = "decoder_shortlist.onnx"
SHORTLIST_FILE = "shortlist.npz"  # the candidate table and the projection rows (V, d_model)
# the target embedding table (V, d_model) float32 that the graphs named in the manifest's "embedding" gather from (the
# encoder's too when the model ties them), mapped once by the engine and given to each (transduce.engine.embedding)
EMBEDDING_FILE = "embedding.npy"
DEC_VOCAB_PROJECTION = "vocab_projection"  # (candidates, d_model) float: projection rows of the batch's candidates
# an int8 export's shortlist decoder takes those rows quantised, one scale per row, and transposed:
DEC_VOCAB_PROJECTION_INT8 = "vocab_projection_int8"  # (d_model, candidates) int8
DEC_VOCAB_PROJECTION_SCALE = "vocab_projection_scale"  # (candidates,) float32: row c = int8 column c x scale c
CANDIDATE_AXIS = "candidates"  # log_probs of the shortlist decoder are (batch, candidates)
# (batch, candidates) bool: the candidates of each row's own sentence; the others get no probability, so a sentence's
# output does not depend on the sentences batched with it (exports before EXPORT_REVISION 3 have no such input)
DEC_VOCAB_MASK = "vocab_mask"
