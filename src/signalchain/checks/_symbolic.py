"""What the symbolic judges share: the symbolic `tokens` tap with its vocabulary, and the notes stages."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..symbolic.notes import NOTE_COLUMNS
from ..symbolic.vocab import Vocab
from ..trace import Trace
from ._util import value

__all__ = ["NOTES_STAGES", "SymbolicTokens", "symbolic_tokens", "notes_of", "source_stage", "meta_list",
           "time_signature", "is_symbolic", "speaks_symbolic", "in_words"]

#: The notes stages in pipeline order: before tokenization, then decoded back from the tokens.
NOTES_STAGES = ("midi.source", "notes.augmented", "notes.decoded")


class SymbolicTokens(NamedTuple):
    ids: np.ndarray  # [B, T]
    meta: dict[str, Any]
    vocab: Vocab | None  # None: the meta holds no flat vocabulary (Octuple) — nothing per id is judged


def is_symbolic(trace: Trace, stage: str = "tokens") -> bool:
    rec = trace.get(stage)
    return rec is not None and rec.meta.get("kind") == "symbolic"


def speaks_symbolic(trace: Trace) -> bool:
    """The trace is a symbolic pipeline's: a token tap marked `kind="symbolic"`, or a notes stage. Its
    findings then speak of tokens, positions, notes and bars, never of frames, codebooks or silence."""
    return any(is_symbolic(trace, s) for s in ("tokens", "tokens.input", "tokens.pattern")) or \
        any(s in trace for s in NOTES_STAGES)


def in_words(trace: Trace, codec: str, symbolic: str) -> str:
    """One finding, two vocabularies: `symbolic` on a symbolic pipeline's trace, else `codec`."""
    return symbolic if speaks_symbolic(trace) else codec


def symbolic_tokens(trace: Trace, stage: str = "tokens") -> SymbolicTokens | None:
    """The symbolic token ids of a trace (`kind="symbolic"` on the tap), or None."""
    if not is_symbolic(trace, stage):
        return None
    ids = value(trace, stage)
    if ids is None or ids.ndim < 1 or ids.dtype.kind not in "iu":
        return None
    ids = ids.reshape(1, -1) if ids.ndim == 1 else ids
    meta = dict(trace[stage].meta)
    ids, vocab = ids.astype(np.int64), Vocab.from_meta(meta)
    if vocab is not None and vocab.merged:
        # BPE: the checks read the base tokens each merged id stands for (indices then count base tokens)
        used = np.isin(ids, np.fromiter(vocab.merged, dtype=np.int64))
        meta["bpe"] = {"merged_ids": int(used.sum()), "ids": int(ids.size), "merges": len(vocab.merged),
                       "base_size": min(vocab.merged)}
        ids = vocab.expand(ids)
    return SymbolicTokens(ids, meta, vocab)


def notes_of(trace: Trace, stage: str) -> tuple[np.ndarray, dict[str, Any]] | None:
    """A notes table stage `[N, 7]` and its meta, or None when absent, without values, or not a table."""
    v = value(trace, stage)
    if v is None or v.ndim != 2 or v.shape[1] != len(NOTE_COLUMNS):
        return None
    return v.astype(np.float64), dict(trace[stage].meta)


def source_stage(trace: Trace) -> str | None:
    """The notes the tokenizer was given: `notes.augmented` when tapped, else `midi.source`."""
    for name in ("notes.augmented", "midi.source"):
        if notes_of(trace, name) is not None:
            return name
    return None


def meta_list(meta: dict[str, Any], key: str, n: int) -> list[Any]:
    """A per-example meta list (`tempos`, `time_signatures`), padded with None to n."""
    got = meta.get(key)
    got = list(got) if isinstance(got, (list, tuple)) else []
    return (got + [None] * n)[:n]


def time_signature(x: Any) -> tuple[int, int]:
    """A `[num, den]` meta entry as a tuple; 4/4 when absent or malformed."""
    try:
        num, den = int(x[0]), int(x[1])
        return (num, den) if num > 0 and den > 0 else (4, 4)
    except (TypeError, ValueError, IndexError):
        return (4, 4)


def batch_size(trace: Trace, *tables: np.ndarray | None) -> int:
    tok = symbolic_tokens(trace)
    sizes = [int(tok.ids.shape[0])] if tok is not None else []
    sizes += [int(t[:, 0].max()) + 1 for t in tables if t is not None and len(t)]
    return max(sizes) if sizes else 0
