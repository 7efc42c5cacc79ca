"""Symbolic traces for check tests, made the way a symbolic pipeline taps them: handmade pieces
(symusic Scores via the notes table) through a real miditok REMI tokenizer and back.

`symbolic_trace(pieces, tokenizer=..., ...)` taps `midi.source`, optionally `notes.augmented`,
`tokens` (right-padded [B, T] with the tokenizer's pad id) and `notes.decoded`; its keyword hooks
inject a fault where a real pipeline would make it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from signalchain import record, tap
from signalchain.symbolic.notes import NOTE_COLUMNS, from_score, notes_table, to_score

miditok = pytest.importorskip("miditok")

CORE_KIT = (35, 36, 38, 40, 42, 44, 46, 49, 51)
Piece = tuple[np.ndarray, float, tuple[int, int]]  # (rows of one example, tempo bpm, time signature)


def tokenizer(tempos: bool = True, time_signatures: bool = True, programs: bool = True, num_velocities: int = 8,
              **kw: Any) -> Any:
    cfg = miditok.TokenizerConfig(use_tempos=tempos, use_time_signatures=time_signatures, use_programs=programs,
                                  num_velocities=num_velocities, special_tokens=["PAD", "BOS", "EOS"], **kw)
    return miditok.REMI(cfg)


def vocab_list(tok: Any) -> list[str]:
    return [k for k, _ in sorted(tok.vocab.items(), key=lambda kv: kv[1])]


def token_meta(tok: Any) -> dict[str, Any]:
    """The `tokens` meta keys of the contract, read from a miditok tokenizer."""
    vocab = vocab_list(tok)
    return {"kind": "symbolic", "tokenizer": type(tok).__name__, "vocab": vocab, "cardinality": len(vocab),
            "pad_id": vocab.index("PAD_None"), "bos_id": vocab.index("BOS_None"), "eos_id": vocab.index("EOS_None"),
            "resolution": max(tok.config.beat_res.values()),
            "token_types": sorted({v.split("_", 1)[0] for v in vocab})}


def random_piece(rng: np.random.Generator, ts: tuple[int, int] = (4, 4), tempo: float = 110.0,
                 programs: Sequence[int] = (0,), drums: bool = False, bars: int = 4, notes_per_bar: int = 6) -> Piece:
    """A piece of random notes on a 1/4-beat grid (well within any tokenizer's resolution)."""
    bar_q = ts[0] * 4.0 / ts[1]
    rows = []
    for b in range(bars):
        for _ in range(notes_per_bar):
            onset = b * bar_q + rng.integers(0, int(bar_q * 4)) / 4
            dur = float(rng.choice([0.25, 0.5, 1.0, 1.5, 2.0]))
            rows.append((0, rng.integers(40, 90), onset, dur, rng.integers(30, 120), rng.choice(programs), 0))
        if drums:
            for beat in range(int(bar_q)):
                rows.append((0, CORE_KIT[(b + beat) % len(CORE_KIT)], b * bar_q + beat, 0.25, 100, 0, 1))
    return _dedupe(notes_table(rows)), float(tempo), ts


def _dedupe(rows: np.ndarray) -> np.ndarray:
    """One note per (pitch, onset, program, drum), as a MIDI file holds them."""
    _, keep = np.unique(rows[:, [1, 2, 5, 6]], axis=0, return_index=True)
    return notes_table(rows[np.sort(keep)])


def encode(tok: Any, piece: Piece) -> list[int]:
    rows, tempo, ts = piece
    seq = tok.encode(to_score(rows, tempo, ts))
    if isinstance(seq, list):  # one stream per track (no programs): a naive pipeline keeps the first
        seq = seq[0] if seq else None
    return list(seq.ids) if seq is not None else []


def decode(tok: Any, ids: Sequence[int], example: int) -> tuple[np.ndarray, float, list[int]]:
    ids = [int(i) for i in ids if i != tok.pad_token_id]
    score = tok.decode([ids] if not tok.config.one_token_stream_for_programs else ids)
    tempo = float(score.tempos[0].qpm) if len(score.tempos) else 120.0
    ts = [int(score.time_signatures[0].numerator), int(score.time_signatures[0].denominator)] \
        if len(score.time_signatures) else [4, 4]
    return from_score(score, example), tempo, ts


def _notes_meta(tempos: Sequence[float], tss: Sequence[Sequence[int]]) -> dict[str, Any]:
    return {"columns": list(NOTE_COLUMNS), "unit": "beat", "tempos": [float(t) for t in tempos],
            "time_signatures": [list(map(int, ts)) for ts in tss],
            "files": [f"piece{i}.mid" for i in range(len(tempos))]}


def stack(tables: Sequence[np.ndarray]) -> np.ndarray:
    rows = []
    for i, t in enumerate(tables):
        t = np.array(t, np.float32).reshape(-1, len(NOTE_COLUMNS))
        t[:, 0] = i
        rows.append(t)
    return notes_table(np.concatenate(rows)) if rows else notes_table([])


def symbolic_trace(pieces: Sequence[Piece], tok: Any = None, decoder: Any = None,
                   augment: Callable[[np.ndarray], np.ndarray] | None = None,
                   edit_ids: Callable[[list[list[int]]], list[list[int]]] | None = None,
                   meta_tok: Any = None, bos_eos: bool = False, decoded: bool = True,
                   hidden: Callable[[np.ndarray], np.ndarray] | None = None):
    """A recorded step of a symbolic pipeline on `pieces`.

    tok: the tokenizer that encodes; decoder: the one that decodes (default tok); meta_tok: the one
    whose vocabulary the tap names (default decoder); augment: the notes after augmentation (a table
    of the batch -> a table); edit_ids: the id lists before padding -> edited lists; hidden: a change
    to the notes after the last notes tap, before encoding (a bug no notes tap shows).
    """
    tok = tok or tokenizer()
    decoder = decoder or tok
    meta_tok = meta_tok or decoder
    source = stack([p[0] for p in pieces])
    tempos, tss = [p[1] for p in pieces], [list(p[2]) for p in pieces]
    augmented = augment(source.copy()) if augment is not None else None
    used = augmented if augmented is not None else source
    used = hidden(used.copy()) if hidden is not None else used
    by_ex = [used[used[:, 0] == i] for i in range(len(pieces))]
    ids = [encode(tok, (rows, p[1], p[2])) for rows, p in zip(by_ex, pieces)]
    if bos_eos:
        ids = [[tok["BOS_None"], *x, tok["EOS_None"]] for x in ids]
    if edit_ids is not None:
        ids = edit_ids(ids)
    pad = token_meta(meta_tok)["pad_id"]
    width = max(1, max(len(x) for x in ids))
    tokens = np.full((len(ids), width), pad, np.int64)
    for i, x in enumerate(ids):
        tokens[i, :len(x)] = x
    with record(values=True) as t:
        tap("midi.source", source, **_notes_meta(tempos, tss))
        if augmented is not None:
            tap("notes.augmented", augmented, **_notes_meta(tempos, tss))
        tap("tokens", tokens, **token_meta(meta_tok))
        if decoded:
            out = [decode(decoder, [i for i in x if 0 <= i < len(decoder.vocab)], e) for e, x in enumerate(ids)]
            tap("notes.decoded", stack([o[0] for o in out]), **_notes_meta([o[1] for o in out], [o[2] for o in out]))
    return t


def clean_pieces(seed: int = 0, n: int = 4) -> list[Piece]:
    """Pieces in 3/4, 6/8 and 4/4, several programs, one with drums, at different tempos."""
    rng = np.random.default_rng(seed)
    shapes = [((4, 4), 96.0, (0, 40), True), ((3, 4), 132.0, (0,), False), ((6, 8), 72.0, (24, 0), False),
              ((4, 4), 150.0, (33, 0, 56), True)]
    return [random_piece(rng, ts, tempo, programs, drums) for ts, tempo, programs, drums in
            (shapes[i % len(shapes)] for i in range(n))]


def make_trace_tokens(tokens: np.ndarray, meta: dict[str, Any]):
    """A trace holding only `tokens` with this meta."""
    with record(values=True) as t:
        tap("tokens", tokens, **meta)
    return t
