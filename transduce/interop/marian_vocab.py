"""SentencePiece model surgery for Marian: one model whose piece ids are exactly the Marian vocabulary ids.

OPUS-MT segments the source with ``source.spm``, maps pieces to ids through ``vocab.json`` (unknown pieces -> <unk>),
and turns generated ids back into pieces through ``vocab.json`` before SentencePiece detokenisation. transduce's
Tokenizer and engine expect ONE SentencePiece model whose ids are the model ids. ``build_marian_spm`` builds it:
pieces in ``vocab.json`` order; pieces of ``source.spm`` keep their type and score (so the unigram Viterbi segmentation
is source.spm's whenever that segmentation only uses in-vocabulary pieces, which is the case Marian itself handles
without <unk>); pieces that only the target side knows become UNUSED (SentencePiece never produces them when encoding
but decodes them normally), except single characters that source.spm cannot segment at all (source.spm emits
them as unknown pieces and Marian looks that surface up in vocab.json, so they stay NORMAL); </s>, <pad> and
>>lang<< codes are CONTROL; <unk> is UNKNOWN. The normaliser (and denormaliser) come from source.spm, which is also
what transformers' MarianTokenizer decodes with when the vocabulary is shared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

pb: Any = sentencepiece_model_pb2  # generated protobuf module (no type stubs)
Piece = pb.ModelProto.SentencePiece
LANG_CODE = re.compile(r"^>>.+<<$")  # multilingual OPUS-MT target-language codes, e.g. >>fra<<
KEEP_TYPES = (Piece.NORMAL, Piece.USER_DEFINED, Piece.BYTE, Piece.UNUSED)
EXPORT_PAD = "<pad>"  # the name CTranslate2's Marian converter expects for the last (dropped) vocabulary row


@dataclass(frozen=True)
class MarianSpm:
    """The combined SentencePiece model and what went into it."""

    model: bytes
    from_source: int  # vocabulary entries segmented with source.spm's scores
    target_only: int  # entries only target.spm knows: UNUSED (decodable, never produced when encoding)
    missing_from_vocab: list[str] = field(default_factory=list)  # source.spm pieces absent from vocab.json


def parse_spm(data: bytes, what: str) -> Any:
    """Parse a serialized SentencePiece ModelProto; ValueError naming ``what`` when it is not one."""
    proto = pb.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and friends
        raise ValueError(f"{what} is not a SentencePiece model ({exc})") from exc
    if not proto.pieces:
        raise ValueError(f"{what} is not a SentencePiece model (no pieces)")
    return proto


def _check_loads(proto: Any, what: str) -> bytes:
    data = proto.SerializeToString()
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except (RuntimeError, OSError) as exc:
        raise ValueError(f"cannot build {what}: SentencePiece rejects it ({exc})") from exc
    assert sp.GetPieceSize() == len(proto.pieces)
    return data


def ordered_vocab(vocab: dict[str, int]) -> list[str]:
    """vocab.json (piece -> id) as a list indexed by id; ValueError unless the ids are exactly 0..N-1."""
    by_id: dict[int, str] = {}
    for piece, idx in vocab.items():
        if not isinstance(idx, int) or idx < 0:
            raise ValueError(f"vocab.json maps {piece!r} to {idx!r}; ids must be non-negative integers")
        if idx in by_id:
            raise ValueError(f"vocab.json maps both {by_id[idx]!r} and {piece!r} to id {idx}")
        by_id[idx] = piece
    if sorted(by_id) != list(range(len(by_id))):
        raise ValueError(f"vocab.json ids are not contiguous 0..{len(by_id) - 1}")
    return [by_id[i] for i in range(len(by_id))]


def build_marian_spm(
    source_spm: bytes,
    target_spm: bytes,
    vocab: dict[str, int],
    *,
    unk: str = "<unk>",
    eos: str = "</s>",
    pad: str = "<pad>",
) -> MarianSpm:
    """One SentencePiece model over ``vocab`` ids that segments like source.spm and detokenises like Marian."""
    pieces = ordered_vocab(vocab)
    for name, piece in (("unk", unk), ("eos", eos), ("pad", pad)):
        if piece not in vocab:
            raise ValueError(f"vocab.json has no {name} token {piece!r}")
    src = parse_spm(source_spm, "source.spm")
    tgt = parse_spm(target_spm, "target.spm")
    src_pieces = {p.piece: p for p in src.pieces}
    tgt_pieces = {p.piece: p for p in tgt.pieces}
    out = pb.ModelProto()
    out.CopyFrom(src)
    del out.pieces[:]
    out.DiscardUnknownFields()  # e.g. self_test_data: its expected ids are source.spm's, not ours
    from_source = target_only = 0
    unknown_score = min((p.score for p in src.pieces if p.type == Piece.NORMAL), default=0.0) - 10.0
    for piece in pieces:
        new = out.pieces.add()
        new.piece, new.score = piece, 0.0
        if piece == unk:
            new.type = Piece.UNKNOWN
        elif piece in (eos, pad) or LANG_CODE.match(piece):
            new.type = Piece.CONTROL
        elif piece in src_pieces and src_pieces[piece].type in KEEP_TYPES:
            new.type, new.score = src_pieces[piece].type, src_pieces[piece].score
            from_source += 1
        elif piece in src_pieces or (piece in tgt_pieces and tgt_pieces[piece].type == Piece.CONTROL):
            new.type = Piece.CONTROL  # e.g. <s>
        elif len(piece) == 1 and piece != "\u2581":
            # a character source.spm does not know: source.spm emits it as an unknown piece and Marian then looks
            # it up in vocab.json, so it must stay reachable; no source piece covers it, so it never competes
            new.type, new.score = Piece.NORMAL, unknown_score
            target_only += 1
        else:
            new.type = Piece.UNUSED  # target-only (or unknown to both): decodable, never produced when encoding
            new.score = tgt_pieces[piece].score if piece in tgt_pieces else 0.0
            target_only += 1
    spec = out.trainer_spec
    spec.vocab_size = len(pieces)
    spec.unk_id, spec.eos_id, spec.pad_id = vocab[unk], vocab[eos], vocab[pad]
    spec.unk_piece, spec.eos_piece, spec.pad_piece = unk, eos, pad
    spec.bos_id = vocab.get(spec.bos_piece or "<s>", -1)
    missing = [p.piece for p in src.pieces if p.type in (Piece.NORMAL, Piece.USER_DEFINED) and p.piece not in vocab]
    return MarianSpm(_check_loads(out, "the combined Marian SentencePiece model"), from_source, target_only, missing)


def export_spm(spm_model: bytes, pad_id: int) -> tuple[bytes, dict[str, int]]:
    """Our model with an extra CONTROL "<pad>" piece appended (the exported Marian pad) and its vocab.json.

    A piece already called "<pad>" (our own pad, which keeps its id) is renamed "<pad#ID>" so names stay unique.
    """
    proto = parse_spm(spm_model, "the checkpoint's tokenizer model")
    if not 0 <= pad_id < len(proto.pieces):
        raise ValueError(f"pad id {pad_id} is outside the tokenizer's {len(proto.pieces)} pieces")
    names = {p.piece for p in proto.pieces}
    for p in proto.pieces:
        if p.piece == EXPORT_PAD:
            renamed = f"<pad#{pad_id}>"
            while renamed in names:
                renamed = "<" + renamed + ">"
            p.piece = renamed
    new = proto.pieces.add()
    new.piece, new.score, new.type = EXPORT_PAD, 0.0, Piece.CONTROL
    proto.trainer_spec.vocab_size = len(proto.pieces)
    proto.trainer_spec.pad_id, proto.trainer_spec.pad_piece = len(proto.pieces) - 1, EXPORT_PAD
    proto.DiscardUnknownFields()  # e.g. self_test_data
    data = _check_loads(proto, "the exported SentencePiece model")
    return data, {p.piece: i for i, p in enumerate(proto.pieces)}
