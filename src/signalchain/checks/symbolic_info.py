"""What the symbolic tokens keep of the music's information: velocities, durations, tempos and
programs not collapsed to one value. (Drums transposed by an augmentation: `symbolic_drums.py`.)"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from ..symbolic.notes import COL
from ..symbolic.vocab import quarters_per_beat
from ..trace import Trace
from ._symbolic import meta_list, notes_of, symbolic_tokens, time_signature
from .base import make
from .symbolic_drums import CORE_KIT, judge_drums_transposed

__all__ = ["judge_collapsed", "judge_drums_transposed", "CORE_KIT"]

CHECK = "checks.symbolic"
MIN_PIECES_FOR_TEMPO = 4


def _nearest_bins(x: np.ndarray, bins: np.ndarray) -> np.ndarray:
    return np.argmin(np.abs(x[:, None] - bins[None, :]), axis=1) if bins.size and x.size else np.zeros(0, int)


def _used(ids: np.ndarray, type_ids: np.ndarray) -> np.ndarray:
    return np.unique(ids[np.isin(ids, type_ids)])


def _source_bins(typ: str, rows: np.ndarray, bins: np.ndarray, ts: Any) -> np.ndarray:
    """The bins the source notes of one example fall in (durations in beats of its time signature)."""
    if typ == "Velocity":
        return _nearest_bins(rows[:, COL["velocity"]], bins)
    return _nearest_bins(rows[:, COL["duration"]] / quarters_per_beat(time_signature(ts)), bins)


def _collapsed_attribute(typ: str, ids: np.ndarray, vocab: Any, source: np.ndarray, src_meta: dict[str, Any],
                         n: int) -> Finding | None:
    """Every example whose source spans several bins of `typ` has one `typ` token only."""
    type_ids, bins = vocab.ids(typ), vocab.sorted_values(typ)
    if bins.size < 2:
        return None
    judged, collapsed, distinct = [], [], []
    for b, ts in enumerate(meta_list(src_meta, "time_signatures", n)):
        want = np.unique(_source_bins(typ, source[source[:, 0] == b], bins, ts))
        if want.size < 2:
            continue
        judged.append(b)
        used = _used(ids[b], type_ids)
        if used.size == 1:
            collapsed.append(b)
            distinct.append(int(want.size))
    if not judged or len(collapsed) < len(judged):
        return None
    tokens = sorted({vocab.tokens[int(i)] for b in collapsed for i in _used(ids[b], type_ids)})
    knob = "num_velocities" if typ == "Velocity" else "beat_res"
    return make("symbolic.collapsed", "error", "tokens",
                f"each of the {len(judged)} examples uses a single {typ} token ({', '.join(tokens[:4])}) while the "
                f"vocabulary has {bins.size} {typ} bins and their source notes fall in {min(distinct)}-"
                f"{max(distinct)} of them", CHECK,
                hint=f"the {typ.lower()} is overwritten or quantised to one value between reading and tokenizing "
                     f"(a default {typ.lower()} on every note, a {knob} of 1 in the tokenizer that cached the data)",
                token_type=typ, tokens=tokens, vocab_bins=int(bins.size), source_bins=int(min(distinct)),
                examples=collapsed)


def _collapsed_programs(trace: Trace, ids: np.ndarray, vocab: Any, source: np.ndarray) -> Finding | None:
    """Several melodic programs in the source, one left in the tokens (or the decoded notes). Drums
    (their own flag, miditok's Program_-1) are counted apart."""
    melodic = source[source[:, COL["drum"]] < 0.5]
    programs = sorted({int(p) for p in melodic[:, COL["program"]]})
    if len(programs) < 2:
        return None
    seen: set[int] = set()
    if vocab.has("Program"):
        nums = vocab.numbers("Program")
        seen = {int(nums[int(i)]) for i in _used(ids, vocab.ids("Program")) if int(i) in nums} - {-1}
    dec = notes_of(trace, "notes.decoded")
    if not seen and dec is not None and len(dec[0]):
        kept = dec[0][dec[0][:, COL["drum"]] < 0.5]
        seen = {int(p) for p in kept[:, COL["program"]]}
    if len(seen) != 1:
        return None
    return make("symbolic.collapsed", "error", "tokens",
                f"the source holds {len(programs)} programs {programs[:8]} but the tokens keep one: {sorted(seen)}",
                CHECK, hint="tracks are merged or every note is given one program before tokenizing: keep each "
                            "track's program (use_programs) and its drum flag",
                token_type="Program", source_programs=programs, kept=sorted(seen))


def judge_collapsed(trace: Trace) -> list[Finding]:
    """Velocity/duration tokens all one bin, every piece at one tempo, programs lost: information collapsed."""
    tok = symbolic_tokens(trace)
    got = notes_of(trace, "midi.source")
    if tok is None or tok.vocab is None or got is None:
        return []
    source, meta = got
    n = int(tok.ids.shape[0])
    out: list[Finding] = []
    for typ in ("Velocity", "Duration"):
        f = _collapsed_attribute(typ, tok.ids, tok.vocab, source, meta, n)
        if f is not None:
            out.append(f)
    f = _collapsed_programs(trace, tok.ids, tok.vocab, source)
    if f is not None:
        out.append(f)
    tempos = [t for t in meta_list(meta, "tempos", n) if isinstance(t, (int, float))]
    if len(tempos) >= MIN_PIECES_FOR_TEMPO and np.ptp(tempos) < 1e-3:
        out.append(make("symbolic.collapsed", "warning", "midi.source",
                        f"all {len(tempos)} pieces of the batch are at {tempos[0]:g} bpm", CHECK,
                        hint="the tempo is not read from the files (a default of the reader, a tempo map dropped "
                             "by a conversion): tempo captions and Tempo tokens then carry nothing",
                        token_type="Tempo", tempo=float(tempos[0]), pieces=len(tempos)))
    return out
