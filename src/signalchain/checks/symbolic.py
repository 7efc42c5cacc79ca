"""The symbolic round trip: the notes given to the tokenizer against the notes decoded from its tokens.

Source (`notes.augmented` when tapped, else `midi.source`) and `notes.decoded` must agree within
the tokenizer's own resolution, read from the vocabulary the `tokens` tap names: pitch exact, onset
within one position (1/resolution of a beat), duration within the spacing of the Duration bins
(clipped to the largest), velocity within one bin, tempo within the Tempo bins' spacing, the time
signature exact, programs and drum flags kept. What a tokenizer drops by design is tolerated: notes
shorter than a position, duplicates at one pitch and onset. A token type is blamed only when more
than `MAJORITY` of the notes disagree on it. Onsets are blamed on the type the vocabulary places notes
with (REMI's Position, TSD's TimeShift). Each lost note is also looked for in the token row itself
(walked with the vocabulary), so that the hint (`symbolic_hints.py`) can tell a note the vocabulary
cannot say from one dropped before the tokens or between the tokens and the decoded notes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from ..symbolic.notes import COL
from ..symbolic.vocab import SequenceEvents, Vocab, quarters_per_beat, walk
from ..trace import Trace
from ._symbolic import batch_size, meta_list, notes_of, source_stage, symbolic_tokens, time_signature
from .base import make
from .symbolic_hints import Tally, hint, onset_type, ts_text
from .symbolic_info import judge_collapsed, judge_drums_transposed
from .symbolic_structure import judge_empty, judge_eos_in_loss, judge_structure

__all__ = ["judge_round_trip", "SYMBOLIC_CHECKS", "MAJORITY"]

CHECK = "checks.symbolic"
MAJORITY = 0.02  # share of notes beyond tolerance before a token type is blamed
EPS = 1e-4
P, ON, DUR, VEL, PROG, DRUM = (COL[k] for k in ("pitch", "onset", "duration", "velocity", "program", "drum"))


def _duration_bins(vocab: Vocab, ts: tuple[int, int]) -> np.ndarray:
    return vocab.sorted_values("Duration") * quarters_per_beat(ts)


def _tolerance(bins: np.ndarray, x: float, floor: float) -> float:
    """The spacing of the bins around x (the widest neighbour gap), at least `floor`."""
    if bins.size < 2:
        return floor
    i = int(np.clip(np.searchsorted(bins, x), 1, bins.size - 1))
    gaps = np.diff(bins)[max(0, i - 2): i + 1]
    return max(float(gaps.max()), floor)


def _example(tally: Tally, e: int, src: np.ndarray, dec: np.ndarray, vocab: Vocab, ts: tuple[int, int],
             ts_dec: tuple[int, int], vel_tol: float | None, cut: bool, written: SequenceEvents) -> int:
    """Match one example's notes (pitch and onset); tally what disagrees; return the notes judged.

    cut: the token row fills the sequence length (no padding after it), so the notes after the last
    decoded onset were cut by the length, as the pipeline chose, not lost by the tokenizer.
    written: the example's token row walked, to tell a note lost before the tokens from one lost after.
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
    lost = _Lost(vocab, dec, written, quantum)
    for n in src:
        pitch, drum = int(n[P]), bool(n[DRUM])
        cand = np.flatnonzero(~used & (dec[:, P] == n[P]) & (np.abs(dec[:, ON] - n[ON]) <= quantum + EPS))
        if cand.size == 0:
            lost.tally(tally, e, n, used)
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


class _Lost:
    """Why a source note has no decoded note at its pitch and onset: what the vocabulary can say, what the
    tokens hold (`written`), and what came back decoded."""

    def __init__(self, vocab: Vocab, dec: np.ndarray, written: SequenceEvents, quantum: float):
        self.vocab, self.dec, self.quantum = vocab, dec, quantum
        self.onset = onset_type(vocab)
        self.groups = {(0 if d else int(p), int(d)) for p, d, in dec[:, [PROG, DRUM]]}
        self.pitches = {(int(p), int(d)) for p, d in dec[:, [P, DRUM]]}
        self.programs = {int(v) for v in vocab.numbers("Program").values()}
        self.written = {(int(x[0]), int(x[5])) for x in written.notes}
        self.tracks = {(0 if x[5] else int(x[4]), int(x[5])) for x in written.notes}

    def tally(self, tally: Tally, e: int, n: np.ndarray, used: np.ndarray) -> None:
        vocab, dec = self.vocab, self.dec
        pitch, drum, program = int(n[P]), bool(n[DRUM]), int(n[PROG])
        what = {"pitch": pitch, "onset": round(float(n[ON]), 4), "program": program, "drum": int(drum)}
        rng, melodic = vocab.pitch_range(drum), vocab.pitch_range(False)
        in_tokens = (pitch, int(drum)) in self.written
        in_decoded = (pitch, int(drum)) in self.pitches
        near = np.flatnonzero(~used & (dec[:, P] == n[P]))
        key = (pitch, int(drum))
        if rng is not None and not rng[0] <= pitch <= rng[1]:
            tally.add("Pitch", e, {**what, "why": f"outside the vocabulary's range {rng[0]}-{rng[1]}"}, key,
                      "outside_range")
        elif not drum and self.programs and program not in self.programs:
            tally.add("Program", e, {**what, "why": "its program is not in the vocabulary"}, (program, 0),
                      "not_in_vocab")
        elif drum and in_tokens and not in_decoded and vocab.has("PitchDrum") and melodic is not None \
                and not melodic[0] <= pitch <= melodic[1]:
            tally.add("PitchDrum", e, {**what, "why": f"in the tokens, dropped by decoding (outside pitch_range "
                                                      f"{melodic[0]}-{melodic[1]})"}, key, "decoder_range")
        elif dec.size and (0 if drum else program, int(drum)) not in self.groups:
            gone = "decoded_lost" if (0 if drum else program, int(drum)) in self.tracks else "not_encoded"
            tally.add("Program", e, {**what, "why": "its program/drum track is missing from the decoded notes"
                                     + (" (the tokens hold it)" if gone == "decoded_lost" else "")},
                      (0 if drum else program, int(drum)), gone)
        elif near.size:
            nearest = float(dec[near, ON][np.argmin(np.abs(dec[near, ON] - n[ON]))])
            tally.add(self.onset, e, {**what, "why": "the same pitch comes back at another onset",
                                      "nearest_onset": round(nearest, 4)}, round(nearest - float(n[ON]), 4), "moved")
        elif len(dec) and n[ON] > dec[:, ON].max() + self.quantum:
            tally.add(self.onset, e, {**what, "why": "after the last decoded note: the sequence ends early"},
                      reason="ends_early")
        elif not in_decoded and len(dec):
            gone = "decoded_lost" if in_tokens else "not_encoded"
            tally.add("Pitch", e, {**what, "why": "this pitch never comes back"
                                   + (" (the tokens hold it)" if in_tokens else " (nor is it in the tokens)")},
                      key, gone)
        else:
            tally.add(self.onset, e, {**what, "why": "lost"}, reason="lost")


def _velocity_tolerance(vocab: Vocab, source: np.ndarray) -> float | None:
    """One velocity bin; None (not judged) when the vocab has no Velocity tokens. A single bin keeps no
    velocity at all: then any change counts, when the source has more than one velocity."""
    vals = vocab.sorted_values("Velocity")
    if vals.size == 0:
        return None
    if vals.size == 1:
        return 0.0 if np.unique(source[:, VEL]).size > 1 else None
    return float(np.diff(np.concatenate([[0.0], vals])).max())


def _songs(tally: Tally, src_meta: dict[str, Any], dec_meta: dict[str, Any], vocab: Vocab, n: int,
           written: list[SequenceEvents]) -> int:
    """Tempos and time signatures per example; return how many examples had both sides."""
    tempos = vocab.sorted_values("Tempo")
    tol = vocab.max_gap("Tempo") if tempos.size >= 2 else None
    meters = set(vocab.time_signatures().values())
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
                      time_signature(ts), "no_time_signatures")
        if isinstance(t0, (int, float)) and t1 is None and said["tempos"] and not vocab.has("Tempo"):
            tally.add("Tempo", e, {"tempo": round(float(t0), 2), "decoded": None})
        if ts is not None and tsd is not None:
            judged += 1
            want, got = time_signature(ts), time_signature(tsd)
            if want != got:
                # Where the meter was lost: outside the vocabulary, never written, written as another, misread.
                tokens = written[e].time_signatures if e < len(written) else []
                if vocab.has("TimeSig") and want not in meters:
                    why, key = "not_in_vocab", want
                elif vocab.has("TimeSig") and not tokens:
                    why, key = "not_in_tokens", want
                elif vocab.has("TimeSig") and tokens[0] != want:
                    why, key = "tokens_other", (want, tokens[0])
                elif vocab.has("TimeSig"):
                    why, key = "decoded_other", (want, got)
                else:
                    why, key = "no_time_signatures", want
                tally.add("TimeSig", e, {"time_signature": list(want), "decoded": list(got)}, key, why)
        if isinstance(t0, (int, float)) and isinstance(t1, (int, float)):
            want_t = float(np.clip(t0, tempos[0], tempos[-1])) if tempos.size else float(t0)
            if abs(float(t1) - want_t) > (tol if tol is not None else max(1.0, 0.01 * want_t)) + EPS:
                tally.add("Tempo", e, {"tempo": round(float(t0), 2), "decoded": round(float(t1), 2)})
    return judged


#: Reasons the vocabulary itself explains (a range, a list): a loss for these is no sign of a vocabulary swap.
EXPLAINED = ("outside_range", "not_in_vocab", "decoder_range")


def judge_round_trip(trace: Trace) -> list[Finding]:
    """Source notes -> tokens -> decoded notes must agree within the tokenizer's resolution."""
    tok = symbolic_tokens(trace)
    name = source_stage(trace)
    got_src, got_dec = (notes_of(trace, name) if name else None), notes_of(trace, "notes.decoded")
    if tok is None or tok.vocab is None or got_src is None or got_dec is None:
        return []
    (src, src_meta), (dec, dec_meta), vocab = got_src, got_dec, tok.vocab
    n = batch_size(trace, src, dec)
    tally = Tally()
    vel_tol = _velocity_tolerance(vocab, src)
    tss, tsd = meta_list(src_meta, "time_signatures", n), meta_list(dec_meta, "time_signatures", n)
    ids = tok.ids.reshape(tok.ids.shape[0], -1)
    full = [bool(e < len(ids) and (vocab.pad_id is None or ids[e, -1] != vocab.pad_id)
                 and (vocab.eos_id is None or vocab.eos_id not in ids[e])) for e in range(n)]
    written = [walk(ids[e], vocab, time_signature(tss[e])) if e < len(ids) else SequenceEvents() for e in range(n)]
    notes = sum(_example(tally, e, src[src[:, 0] == e], dec[dec[:, 0] == e], vocab, time_signature(tss[e]),
                         time_signature(tsd[e] if tsd[e] is not None else tss[e]), vel_tol, full[e], written[e])
                for e in range(n))
    songs = _songs(tally, src_meta, dec_meta, vocab, n, written)
    note_types = ("Pitch", "PitchDrum", onset_type(vocab), "Duration", "Velocity", "Program")
    blamed = [t for t, c in tally.count.most_common()
              if (c / max(notes, 1) > MAJORITY and c >= 2 if t in note_types else c / max(songs, 1) > MAJORITY)]
    if not blamed:
        return []
    # Most notes unmatched on several token types at once, for reasons the vocabulary does not explain
    # (a range, a programs list): the ids are read with another vocabulary.
    explained = sum(c for t in note_types for r, c in tally.reasons.get(t, {}).items() if r in EXPLAINED)
    unexplained = [t for t in blamed if t in note_types
                   and sum(c for r, c in tally.reasons[t].items() if r not in EXPLAINED) / max(notes, 1) > MAJORITY]
    judged = notes - explained
    mismatch = judged > 0 and tally.matched / judged < 0.5 and len(unexplained) >= 2
    top = blamed[0]
    counts = {t: tally.count[t] for t in blamed}
    per = "; ".join(_said(t, c, notes if t in note_types else songs, tally.examples.get(t, []), note_types)
                    for t, c in counts.items())
    said_hint, bpe = hint(blamed, vocab, tally, mismatch), tok.meta.get("bpe")
    lost = max((tally.reasons.get(t, {}).get("lost", 0) for t in note_types), default=0)
    if bpe and bpe["merged_ids"] and lost > MAJORITY * notes:
        # Notes lost where the tokens hold BPE merges: the decode read the model's ids as base ids.
        per += (f"; the tokens hold {bpe['merged_ids']} BPE-merged ids of {bpe['ids']} (ids from "
                f"{bpe['base_size']} up, past the base vocabulary) and {lost} of {notes} notes are lost")
        said_hint = ("decode the model's ids with `tokenizer.decode(ids)`, which undoes the BPE merges: "
                     "`tokenizer.vocab` is the base vocabulary (ids past its size are merges, unknown there), "
                     "`tokenizer.vocab_model` the trained one")
    return [make("symbolic.round_trip", "error", "tokens",
                 f"{name} -> tokens -> notes.decoded disagrees beyond the tokenizer's resolution, token type "
                 f"responsible: {top} ({per})",
                 CHECK, hint=said_hint, bpe=bpe, token_type=top, token_types=blamed, counts=counts,
                 reasons={t: dict(tally.reasons.get(t, {})) for t in blamed},
                 notes=notes, pieces=songs, source=name, vocabulary_mismatch=mismatch, truncated=tally.truncated,
                 examples={t: tally.examples.get(t, []) for t in blamed}, resolution=vocab.resolution,
                 pitch_range=vocab.pitch_range(False), drum_pitch_range=vocab.pitch_range(True),
                 vocabulary_time_signatures=[ts_text(t) for t in sorted(set(vocab.time_signatures().values()))])]


def _said(typ: str, count: int, judged: int, examples: list[dict[str, Any]], note_types: tuple[str, ...]) -> str:
    """'Tempo: 8 of 8 pieces, e.g. example 0 95.0 -> 120.0' (the first recorded disagreement)."""
    unit = "notes" if typ in note_types else "pieces"
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


SYMBOLIC_CHECKS = (judge_round_trip, judge_structure, judge_collapsed, judge_drums_transposed, judge_empty,
                   judge_eos_in_loss)
