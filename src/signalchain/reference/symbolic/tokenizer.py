"""The symbolic bed's tokenizer: a miditok `REMI`, built offline from the settings in the bed's config.

A window's notes become a symusic Score (`signalchain.symbolic.to_score`), REMI ids, and
`BOS + ids + EOS`; ids go back through `tokenizer.decode` and `signalchain.symbolic.from_score`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from signalchain.symbolic import NOTE_COLUMNS, from_score, notes_table, to_score

__all__ = ["TokenizerSettings", "build_remi", "vocab_list", "encode_notes", "decode_ids", "tokens_meta"]


@dataclass
class TokenizerSettings:
    """miditok `TokenizerConfig` arguments (JSON-able, hashed into the bed's config)."""

    beat_res: dict[str, int] = field(default_factory=lambda: {"0_4": 4, "4_8": 2})  # "start_end" beats: positions/beat
    num_velocities: int = 8
    use_tempos: bool = True
    num_tempos: int = 25
    tempo_range: tuple[int, int] = (60, 180)  # with 25 tempos: every 5 bpm
    use_time_signatures: bool = True
    time_signatures: dict[int, list[int]] = field(default_factory=lambda: {8: [6], 4: [2, 3, 4], 2: [2, 3]})
    use_programs: bool = True
    special_tokens: tuple[str, ...] = ("PAD", "BOS", "EOS")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def resolution(self) -> int:
        """Positions per beat: the finest beat resolution."""
        return max(self.beat_res.values())


def build_remi(s: TokenizerSettings) -> Any:
    from miditok import REMI, TokenizerConfig

    beat_res = {tuple(int(x) for x in k.split("_")): v for k, v in s.beat_res.items()}
    config = TokenizerConfig(beat_res=beat_res, num_velocities=s.num_velocities, use_tempos=s.use_tempos,
                             num_tempos=s.num_tempos, tempo_range=tuple(s.tempo_range),
                             use_time_signatures=s.use_time_signatures,
                             time_signature_range={int(k): list(v) for k, v in s.time_signatures.items()},
                             use_programs=s.use_programs, one_token_stream_for_programs=True,
                             special_tokens=list(s.special_tokens))
    return REMI(config)


def vocab_list(tokenizer: Any) -> list[str]:
    """The token string of each id, in id order."""
    vocab = [""] * len(tokenizer)
    for token, i in tokenizer.vocab.items():
        vocab[i] = token
    return vocab


def special_ids(tokenizer: Any) -> tuple[int, int, int]:
    """(pad, bos, eos)."""
    v = tokenizer.vocab
    return v["PAD_None"], v["BOS_None"], v["EOS_None"]


def encode_notes(tokenizer: Any, notes: np.ndarray, tempo: float, time_signature: Sequence[int]) -> list[int]:
    """One window's notes -> BOS + REMI ids + EOS."""
    _, bos, eos = special_ids(tokenizer)
    seq = tokenizer.encode(to_score(notes, tempo, time_signature))
    if isinstance(seq, list):  # one stream per track (not this config, but a config may ask for it)
        seq = seq[0]
    return [bos, *[int(i) for i in seq.ids], eos]


def decode_ids(tokenizer: Any, ids: Sequence[int],
               example: int = 0) -> tuple[np.ndarray, float | None, list[int] | None]:
    """REMI ids (specials anywhere are dropped; decoding stops at the first EOS) -> (notes, tempo, time signature)."""
    pad, bos, eos = special_ids(tokenizer)
    ids = [int(i) for i in ids]
    if eos in ids[1:]:
        ids = ids[: ids.index(eos, 1)]
    body = [i for i in ids if i not in (pad, bos, eos)]
    if not body:
        return np.zeros((0, len(NOTE_COLUMNS)), np.float32), None, None
    try:
        score = tokenizer.decode(body)
    except Exception:  # a malformed sequence (a generated one) decodes to no notes
        return np.zeros((0, len(NOTE_COLUMNS)), np.float32), None, None
    table = from_score(score, example)
    tempo = round(float(score.tempos[0].qpm), 2) if len(score.tempos) else None
    ts = [int(score.time_signatures[0].numerator), int(score.time_signatures[0].denominator)] \
        if len(score.time_signatures) else None
    return notes_table(table), tempo, ts


def tokens_meta(tokenizer: Any, resolution: int) -> dict[str, Any]:
    """The `tokens` stage's meta (the shared symbolic contract)."""
    vocab = vocab_list(tokenizer)
    pad, bos, eos = special_ids(tokenizer)
    return {"kind": "symbolic", "tokenizer": type(tokenizer).__name__, "vocab": vocab, "cardinality": len(vocab),
            "pad_id": pad, "bos_id": bos, "eos_id": eos, "resolution": resolution,
            "token_types": sorted({t.split("_")[0] for t in vocab})}
