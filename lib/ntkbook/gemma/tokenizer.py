r"""Gemma-3 tokenizer rebuilt from the GGUF vocabulary (a sentencepiece BPE model), with character offsets.

The GGUF carries the 262,144 pieces, their scores and their types (sentencepiece's own type codes:
1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).  :func:`build_sentencepiece_model`
writes them into a sentencepiece ``ModelProto``: BPE, byte fallback on, identity normaliser, no
dummy prefix, whitespace kept.  Pitfalls handled:

- ``<unk>`` (id 3) is marked as a control token in the GGUF; sentencepiece refuses a model without
  an UNKNOWN piece, so its type is set to UNKNOWN;
- the special pieces are named in the trainer spec (``<bos>`` ...), else BOS comes out as -1;
- the pieces made of runs of spaces are stored with literal spaces; sentencepiece's whitespace
  symbol is ``▁`` (U+2581), so spaces are mapped to it;
- sentencepiece 0.2.3's own character offsets are wrong on runs of whitespace, so
  :meth:`GemmaTokenizer.encode_with_offsets` rebuilds them from each piece's length in bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ntkbook.errors import InputError

__all__ = ["build_sentencepiece_model", "GemmaTokenizer"]

WS = "\u2581"


def build_sentencepiece_model(vocab: Mapping[str, Any]) -> bytes:
    """Serialised sentencepiece model from a GGUF vocabulary dict (tokens, scores, types, special ids)."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("the Gemma tokenizer needs sentencepiece: pip install sentencepiece==0.2.3") from exc
    m = pb.ModelProto()
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(vocab["tokens"])
    ts.byte_fallback = True
    ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = vocab["unk"], vocab["bos"], vocab["eos"], vocab["pad"]
    tokens = vocab["tokens"]
    ts.unk_piece, ts.bos_piece = tokens[vocab["unk"]], tokens[vocab["bos"]]
    ts.eos_piece, ts.pad_piece = tokens[vocab["eos"]], tokens[vocab["pad"]]
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    for i, (tok, score, typ) in enumerate(zip(tokens, vocab["scores"], vocab["types"])):
        p = m.pieces.add()
        p.piece = tok.replace(" ", WS)
        p.score = float(score)
        p.type = 2 if i == vocab["unk"] else int(typ)
    return m.SerializeToString()


class GemmaTokenizer:
    """Sentencepiece tokenizer of Gemma-3 with exact character offsets.

    >>> tok = GemmaTokenizer(path)                                 # doctest: +SKIP
    >>> tok.encode("Once upon a time", bos=True)                   # doctest: +SKIP
    [2, 14946, 3324, 496, 990]
    """

    def __init__(self, model_file: str | Path):
        import sentencepiece as spm  # noqa: PLC0415

        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.bos_id = self.sp.bos_id()
        self.eos_id = self.sp.eos_id()
        self.vocab_size = self.sp.get_piece_size()
        if self.bos_id < 0:
            raise InputError(f"tokenizer model {model_file} has no BOS piece; rebuild the cache")
        self._nbytes = None

    def encode(self, text: str, *, bos: bool = False) -> list[int]:
        """Token ids of ``text`` (BOS prepended when ``bos``)."""
        if not isinstance(text, str):
            raise InputError(f"text must be a str, got {type(text).__name__}")
        ids = self.sp.encode(text)
        return [self.bos_id, *ids] if bos else list(ids)

    def decode(self, ids) -> str:
        return self.sp.decode([int(i) for i in ids])

    def piece_bytes(self, i: int) -> int:
        """Length in bytes of the text piece ``i`` stands for (1 for byte pieces, 0 for control)."""
        sp = self.sp
        if sp.is_byte(i):
            return 1
        if sp.is_control(i) or sp.is_unknown(i):
            return 0
        return len(sp.id_to_piece(i).replace(WS, " ").encode("utf-8"))

    def encode_with_offsets(self, text: str) -> tuple[list[int], np.ndarray]:
        """Ids (no BOS) and character offsets ``(T, 2)`` [start, end) of each token in ``text``.

        A token that covers only part of a multi-byte character (byte fallback) gets the span of
        that character.
        """
        ids = self.encode(text)
        raw = text.encode("utf-8")
        # byte position -> character index
        char_of_byte = np.empty(len(raw) + 1, np.int64)
        pos = 0
        for ci, ch in enumerate(text):
            n = len(ch.encode("utf-8"))
            char_of_byte[pos:pos + n] = ci
            pos += n
        char_of_byte[len(raw)] = len(text)
        offs = np.zeros((len(ids), 2), np.int64)
        b = 0
        for t, i in enumerate(ids):
            n = self.piece_bytes(i)
            offs[t, 0] = char_of_byte[b]
            end = b + n
            offs[t, 1] = char_of_byte[end] if end >= len(raw) or char_of_byte[end] != char_of_byte[end - 1] \
                else char_of_byte[end] + 1
            b = end
        if b != len(raw):
            raise InputError(f"token byte lengths sum to {b}, text has {len(raw)} bytes: offsets unreliable "
                             "(the text does not round-trip through the tokenizer)")
        return ids, offs
