"""The symbolic round trip: the notes given to the tokenizer against the notes decoded from its tokens.

Source (`notes.augmented` when tapped, else `midi.source`) and `notes.decoded` must agree within
the tokenizer's own resolution, read from the vocabulary the `tokens` tap names: pitch exact, onset
within one position (1/resolution of a beat), duration within the spacing of the Duration bins
(clipped to the largest), velocity within one bin, tempo within the Tempo bins' spacing, the time
signature exact, programs and drum flags kept. What a tokenizer drops by design is tolerated: notes
shorter than a position, duplicates at one pitch and onset. A token type is blamed only when more
than `MAJORITY` of the notes disagree on it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..findings import Finding
from ..symbolic.notes import COL
from ..symbolic.vocab import Vocab, quarters_per_beat
from ..trace import Trace
from ._symbolic import batch_size, meta_list, notes_of, source_stage, symbolic_tokens, time_signature
from .base import make
from .symbolic_info import judge_collapsed, judge_drums_transposed
from .symbolic_structure import judge_empty, judge_structure

__all__ = ["judge_round_trip", "SYMBOLIC_CHECKS", "MAJORITY"]

CHECK = "checks.symbolic"
MAJORITY = 0.02  # share of notes beyond tolerance before a token type is blamed
EPS = 1e-4
P, ON, DUR, VEL, PROG, DRUM = (COL[k] for k in ("pitch", "onset", "duration", "velocity", "program", "drum"))


class _Tally:
    """Disagreements by token type, with a few examples of each."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.detail: dict[str, Counter[Any]] = {}
        self.matched = 0
        self.truncated = 0  # source notes after the end of a token row that fills the sequence length

    def add(self, typ: str, example: int, what: dict[str, Any], key: Any = None) -> None:
        self.count[typ] += 1
        self.examples.setdefault(typ, [])
        if len(self.examples[typ]) < 5:
            self.examples[typ].append({"example": example, **what})
        if key is not None:
            self.detail.setdefault(typ, Counter())[key] += 1


def _duration_bins(vocab: Vocab, ts: tuple[int, int]) -> np.ndarray:
    return vocab.sorted_values("Duration") * quarters_per_beat(ts)


def _tolerance(bins: np.ndarray, x: float, floor: float) -> float:
    """The spacing of the bins around x (the widest neighbour gap), at least `floor`."""
    if bins.size < 2:
        return floor
    i = int(np.clip(np.searchsorted(bins, x), 1, bins.size - 1))
    gaps = np.diff(bins)[max(0, i - 2): i + 1]
    return max(float(gaps.max()), floor)


def _example(tally: _Tally, e: int, src: np.ndarray, dec: np.ndarray, vocab: Vocab, ts: tuple[int, int],
             ts_dec: tuple[int, int], vel_tol: float | None, cut: bool) -> int:
    """Match one example's notes (pitch and onset); tally what disagrees; return the notes judged.

    cut: the token row fills the sequence length (no padding after it), so the notes after the last
    decoded onset were cut by the length, as the pipeline chose, not lost by the tokenizer.
    """
    quantum = max(quarters_per_beat(ts), quarters_per_beat(ts_dec)) / vocab.resolution
    if cut:
        last = float(dec[:, ON].max()) if len(dec) else -np.inf
        tally.truncated += int((src[:, ON] > last + quantum + EPS).sum())
        src = src[src[:, ON] <= last + quantum + EPS]
    bins = _duration_bins(vocab, ts_dec)
    largest = float(bins[-1]) if bins.size else np.inf
    src = src[src[:, DUR] >= quantum - EPS]  # shorter than one position: the tokenizer may drop it
    # Duplicates at one pitch and onset come back as one note (MIDI cannot hold both apart).
    keys = np.round(src[:, [P, ON]] / [1.0, quantum]).astype(np.int64)
    _, first = np.unique(keys, axis=0, return_index=True)
    src = src[np.sort(first)]
    used = np.zeros(len(dec), bool)
    groups = {(0 if d else int(p), int(d)) for p, d, in dec[:, [PROG, DRUM]]}
    pitches = set(dec[:, P].astype(int).tolist())
    programs = {int(v) for v in vocab.numbers("Program").values()}
    for n in src:
        pitch, drum = int(n[P]), bool(n[DRUM])
        cand = np.flatnonzero(~used & (dec[:, P] == n[P]) & (np.abs(dec[:, ON] - n[ON]) <= quantum + EPS))
        if cand.size == 0:
            rng = vocab.pitch_range(drum)
            what = {"pitch": pitch, "onset": round(float(n[ON]), 4), "program": int(n[PROG]), "drum": int(drum)}
            near = np.flatnonzero(~used & (dec[:, P] == n[P]))
            if rng is not None and not rng[0] <= pitch <= rng[1]:
                tally.add("Pitch", e, {**what, "why": f"outside the vocabulary's range {rng[0]}-{rng[1]}"}, pitch)
            elif not drum and programs and int(n[PROG]) not in programs:
                tally.add("Program", e, {**what, "why": "its program is not in the vocabulary"},
                          (int(n[PROG]), int(n[DRUM])))
            elif dec.size and (0 if drum else int(n[PROG]), int(n[DRUM])) not in groups:
                tally.add("Program", e, {**what, "why": "its program/drum track is missing from the decoded notes"},
                          (int(n[PROG]), int(n[DRUM])))
            elif near.size:
                tally.add("Position", e, {**what, "why": "the same pitch comes back at another onset",
                                          "nearest_onset": round(float(dec[near, ON][np.argmin(
                                              np.abs(dec[near, ON] - n[ON]))]), 4)})
            elif len(dec) and n[ON] > dec[:, ON].max() + quantum:
                tally.add("Position", e, {**what, "why": "after the last decoded note: the sequence ends early"})
            elif pitch not in pitches and len(dec):
                tally.add("Pitch", e, {**what, "why": "this pitch never comes back"}, pitch)
            else:
                tally.add("Position", e, {**what, "why": "lost"})
            continue
        # Same track first (two tracks may play one pitch at one onset), then the nearest onset.
        other = (dec[cand, DRUM] != n[DRUM]) | ((n[DRUM] < 0.5) & (dec[cand, PROG] != n[PROG]))
        j = int(cand[np.lexsort((np.abs(dec[cand, ON] - n[ON]), other))[0]])
        used[j] = True
        tally.matched += 1
        d = dec[j]
        want = min(float(n[DUR]), largest)
        if abs(float(d[DUR]) - want) > _tolerance(bins, want, quantum) + EPS:
            tally.add("Duration", e, {"pitch": pitch, "duration": round(float(n[DUR]), 4),
                                      "decoded": round(float(d[DUR]), 4)})
        if vel_tol is not None and abs(float(d[VEL]) - float(n[VEL])) > vel_tol + EPS:
            tally.add("Velocity", e, {"pitch": pitch, "velocity": int(n[VEL]), "decoded": int(d[VEL])})
        if int(d[DRUM]) != int(n[DRUM]) or (not drum and int(d[PROG]) != int(n[PROG])):  # a drum's program is moot
            tally.add("Program", e, {"pitch": pitch, "program": int(n[PROG]), "drum": int(n[DRUM]),
                                     "decoded_program": int(d[PROG]), "decoded_drum": int(d[DRUM])},
                      (int(n[PROG]), int(n[DRUM])))
    return len(src)


def _velocity_tolerance(vocab: Vocab, source: np.ndarray) -> float | None:
    """One velocity bin; None (not judged) when the vocab has no Velocity tokens. A single bin keeps no
    velocity at all: then any change counts, when the source has more than one velocity."""
    vals = vocab.sorted_values("Velocity")
    if vals.size == 0:
        return None
    if vals.size == 1:
        return 0.0 if np.unique(source[:, VEL]).size > 1 else None
    return float(np.diff(np.concatenate([[0.0], vals])).max())


def _hint(typ: str, vocab: Vocab, tally: _Tally, mismatch: bool) -> str:
    tempos, vels = vocab.sorted_values("Tempo"), vocab.sorted_values("Velocity")
    hints = {
        "Pitch": f"notes at pitches {sorted(tally.detail.get('Pitch', {}))[:12]} do not come back: the tokenizer's "
                 f"pitch range is {vocab.pitch_range()} (drums {vocab.pitch_range(True)}); widen pitch_range or "
                 "check the Pitch ids",
        "Position": f"onsets move by more than one position (1/{vocab.resolution} of a beat): check beat_res and "
                    "that the tokens are decoded with the time signature and resolution they were encoded with",
        "Duration": f"durations differ beyond the Duration bins (largest {vocab.sorted_values('Duration')[-1:]} "
                    "beats): check beat_res and the Duration tokens",
        "Velocity": ("the tokenizer was built with one velocity bin (num_velocities=1): every note comes back at "
                     f"velocity {int(vels[0])}" if vels.size == 1 else
                     f"velocities differ beyond one of the {vels.size} bins: check num_velocities and the Velocity "
                     "ids"),
        "Tempo": ("the tokenizer was built without use_tempos: every piece decodes at its default tempo"
                  if tempos.size == 0 else f"tempos differ beyond the Tempo bins ({tempos[0]:g}-{tempos[-1]:g} bpm, "
                  f"{tempos.size} bins): check tempo_range and num_tempos"),
        "TimeSig": ("the tokenizer was built without use_time_signatures: every piece decodes as 4/4"
                    if not vocab.has("TimeSig") else "these time signatures are not in the vocabulary: widen "
                    "time_signature_range"),
        "Program": ("the tokenizer was built without use_programs: tracks beyond the first are lost or merged"
                    if not vocab.has("Program") else
                    f"programs {sorted(tally.detail.get('Program', {}))[:8]} (program, drum) are lost or changed: "
                    "check the tokenizer's programs list, the Program ids and one_token_stream_for_programs"),
    }
    head = ("most notes do not survive: the vocabulary at training differs from the one the cache was made with "
            "(or the tokens are decoded by another tokenizer): re-tokenize with the training tokenizer; then: "
            if mismatch else "")
    return head + hints[typ]


def _songs(tally: _Tally, src_meta: dict[str, Any], dec_meta: dict[str, Any], vocab: Vocab, n: int) -> int:
    """Tempos and time signatures per example; return how many examples had both sides."""
    tempos = vocab.sorted_values("Tempo")
    tol = vocab.max_gap("Tempo") if tempos.size >= 2 else None
    judged = 0
    # A decoded piece with no tempo (time signature) at all, from a vocabulary without that type: lost.
    said = {k: isinstance(dec_meta.get(k), (list, tuple)) for k in ("tempos", "time_signatures")}
    for e, (ts, tsd, t0, t1) in enumerate(zip(meta_list(src_meta, "time_signatures", n),
                                              meta_list(dec_meta, "time_signatures", n),
                                              meta_list(src_meta, "tempos", n), meta_list(dec_meta, "tempos", n))):
        if ts is not None and tsd is None and said["time_signatures"] and not vocab.has("TimeSig") \
                and time_signature(ts) != (4, 4):
            judged += 1
            tally.add("TimeSig", e, {"time_signature": list(time_signature(ts)), "decoded": None},
                      tuple(time_signature(ts)))
        if isinstance(t0, (int, float)) and t1 is None and said["tempos"] and not vocab.has("Tempo"):
            tally.add("Tempo", e, {"tempo": round(float(t0), 2), "decoded": None})
        if ts is not None and tsd is not None:
            judged += 1
            if time_signature(ts) != time_signature(tsd):
                tally.add("TimeSig", e, {"time_signature": list(time_signature(ts)),
                                         "decoded": list(time_signature(tsd))}, tuple(time_signature(ts)))
        if isinstance(t0, (int, float)) and isinstance(t1, (int, float)):
            want = float(np.clip(t0, tempos[0], tempos[-1])) if tempos.size else float(t0)
            if abs(float(t1) - want) > (tol if tol is not None else max(1.0, 0.01 * want)) + EPS:
                tally.add("Tempo", e, {"tempo": round(float(t0), 2), "decoded": round(float(t1), 2)})
    return judged


def judge_round_trip(trace: Trace) -> list[Finding]:
    """Source notes -> tokens -> decoded notes must agree within the tokenizer's resolution."""
    tok = symbolic_tokens(trace)
    name = source_stage(trace)
    got_src, got_dec = (notes_of(trace, name) if name else None), notes_of(trace, "notes.decoded")
    if tok is None or tok.vocab is None or got_src is None or got_dec is None:
        return []
    (src, src_meta), (dec, dec_meta), vocab = got_src, got_dec, tok.vocab
    n = batch_size(trace, src, dec)
    tally = _Tally()
    vel_tol = _velocity_tolerance(vocab, src)
    tss, tsd = meta_list(src_meta, "time_signatures", n), meta_list(dec_meta, "time_signatures", n)
    ids = tok.ids.reshape(tok.ids.shape[0], -1)
    full = [bool(e < len(ids) and (vocab.pad_id is None or ids[e, -1] != vocab.pad_id)
                 and (vocab.eos_id is None or vocab.eos_id not in ids[e])) for e in range(n)]
    notes = sum(_example(tally, e, src[src[:, 0] == e], dec[dec[:, 0] == e], vocab, time_signature(tss[e]),
                         time_signature(tsd[e] if tsd[e] is not None else tss[e]), vel_tol, full[e])
                for e in range(n))
    songs = _songs(tally, src_meta, dec_meta, vocab, n)
    note_types = ("Pitch", "Position", "Duration", "Velocity", "Program")
    blamed = [t for t, c in tally.count.most_common()
              if (c / max(notes, 1) > MAJORITY and c >= 2 if t in note_types else c / max(songs, 1) > MAJORITY)]
    if not blamed:
        return []
    # Most notes unmatched on several token types at once: the ids are read with another vocabulary.
    mismatch = notes > 0 and tally.matched / notes < 0.5 and len([t for t in blamed if t in note_types]) >= 2
    top = blamed[0]
    counts = {t: tally.count[t] for t in blamed}
    per = "; ".join(_said(t, c, notes if t in note_types else songs, tally.examples.get(t, []))
                    for t, c in counts.items())
    return [make("symbolic.round_trip", "error", "tokens",
                 f"{name} -> tokens -> notes.decoded disagrees beyond the tokenizer's resolution, token type "
                 f"responsible: {top} ({per})",
                 CHECK, hint=_hint(top, vocab, tally, mismatch), token_type=top, token_types=blamed, counts=counts,
                 notes=notes, pieces=songs, source=name, vocabulary_mismatch=mismatch, truncated=tally.truncated,
                 examples={t: tally.examples.get(t, []) for t in blamed}, resolution=vocab.resolution)]


def _said(typ: str, count: int, judged: int, examples: list[dict[str, Any]]) -> str:
    """'Tempo: 8 of 8 pieces, e.g. example 0 95.0 -> 120.0' (the first recorded disagreement)."""
    unit = "notes" if typ in ("Pitch", "Position", "Duration", "Velocity", "Program") else "pieces"
    said = f"{typ}: {count} of {judged} {unit}"
    if examples:
        first = {k: v for k, v in examples[0].items() if k not in ("example", "why")}
        why = f" ({examples[0]['why']})" if "why" in examples[0] else ""
        if "decoded" in first and len(first) == 2:
            key = next(k for k in first if k != "decoded")
            said += f", e.g. example {examples[0]['example']} {key} {first[key]} -> {first['decoded']}"
        else:
            said += f", e.g. example {examples[0]['example']} " + ", ".join(f"{k} {v}" for k, v in first.items()) + why
    return said


SYMBOLIC_CHECKS = (judge_round_trip, judge_structure, judge_collapsed, judge_drums_transposed, judge_empty)
