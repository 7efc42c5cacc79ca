"""Audio checks across every audio stage of a trace: the first stage where the sound goes wrong.

Levels are compared between consecutive audio stages of the same route, so a loss of level is
blamed on the stage where it happens, not on the source.
"""

from __future__ import annotations

from collections.abc import Set

import numpy as np

from ..audio.measure import FULL_SCALE_STEP, beyond_full_scale
from ..findings import Finding
from ..trace import StageRecord, Trace
from .base import Rule, make
from .output import overshoot

__all__ = ["judge_audio", "judge_overshoot", "AUDIO_RULES", "SILENT_DBFS", "SCALE_PEAK", "WRITTEN"]

CHECK = "checks.audio"
SILENT_DBFS = -60.0
LEVEL_JUMP_DB = 12.0
CANCEL_DB = -10.0
DC_LIMIT = 0.05
CLIP_SHARE = 1e-3
SCALE_PEAK = 1.5  # a float peak this far past full scale is a scale bug (integer samples as float), not clipping
OUTPUT_STAGES = ("audio.decoded", "audio.written")  # judged by the output checks, their own route
WRITTEN = "audio.written"  # the audio a writer is given (or that was read back): what a listener gets


def _examples(rec: StageRecord) -> list[dict]:
    return rec.summary.get("audio", {}).get("examples", [])


def _seconds(rec: StageRecord) -> list[float] | None:
    lengths, sr = rec.meta.get("lengths"), rec.sample_rate
    if lengths is None or not sr:
        return None
    return [int(n) / sr for n in lengths]


def _is_scaled_downmix(stereo: StageRecord, mono: StageRecord, examples: list[int]) -> bool:
    """True when the mono signal is the channel average times a gain (correlation ≈ 1), not a cancellation."""
    if stereo.value is None or mono.value is None:
        return False
    a, b = np.asarray(stereo.value), np.asarray(mono.value)
    for i in examples:
        n = min(a.shape[-1], b.shape[-1])
        x, y = a[i].mean(axis=0)[:n].astype(np.float64), b[i, 0, :n].astype(np.float64)
        x, y = x - x.mean(), y - y.mean()
        denom = np.sqrt((x @ x) * (y @ y))
        if denom == 0 or (x @ y) / denom < 0.9:
            return False
    return True


def _channels(rec: StageRecord) -> int:
    return rec.shape[1] if len(rec.shape) == 3 else 1


def _rms(rec: StageRecord) -> np.ndarray:
    return np.array([e["rms_dbfs"] for e in _examples(rec)])


def _level_change(prev: StageRecord, rec: StageRecord) -> tuple[int, np.ndarray, np.ndarray]:
    """(examples compared, level drop in dB from `prev` to `rec`, which were audible at `prev`)."""
    prev_rms, rms = _rms(prev), _rms(rec)
    n = min(len(prev_rms), len(rms))
    return n, prev_rms[:n] - rms[:n], prev_rms[:n] > SILENT_DBFS


def _nonfinite(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    ex, name = _examples(rec), rec.name
    nonfinite = [i for i, e in enumerate(ex) if e["nonfinite_fraction"] > 0]
    if not nonfinite:
        return None
    return make("audio.nonfinite", "error", name, f"examples {nonfinite} of {name} hold NaN or inf samples "
                f"(up to {100 * max(ex[i]['nonfinite_fraction'] for i in nonfinite):.2g}% of samples)", CHECK,
                hint="find the file or transform that produced them; one NaN sample poisons the loss",
                examples=nonfinite)


def _peak(rec: StageRecord) -> float:
    return max(e["peak"] for e in _examples(rec))


def _past_full_scale(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    peak, name = _peak(rec), rec.name
    if not peak > SCALE_PEAK:  # NaN peaks too: as before, only a peak past full scale
        return None
    return make("audio.scale", "error", name, f"{name} peaks at {peak:.4g}, far beyond full scale 1.0", CHECK,
                hint="integer samples were not divided by 32768 (or a gain was applied twice)", peak=peak)


def _clipped(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    ex, name = _examples(rec), rec.name
    clipped = [i for i, e in enumerate(ex) if e["clipping_fraction"] > CLIP_SHARE]
    if not (clipped and _peak(rec) <= SCALE_PEAK):
        return None
    return make("audio.clipped", "warning", name, f"examples {clipped} of {name} clip "
                f"({100 * max(ex[i]['clipping_fraction'] for i in clipped):.2g}% of samples at full scale)",
                CHECK, hint="lower the gain before this stage or normalise with headroom", examples=clipped)


def _dc_offset(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    ex, name = _examples(rec), rec.name
    dc = [i for i, e in enumerate(ex) if abs(e["dc"]) > DC_LIMIT]
    if not dc:
        return None
    return make("audio.dc_offset", "warning", name, f"examples {dc} of {name} carry a DC offset up to "
                f"{max(abs(ex[i]['dc']) for i in dc):.3f}", CHECK,
                hint="remove the mean; DC wastes codec capacity and headroom", examples=dc)


def _out_of_phase(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    """A multi-channel stage whose own mono downmix loses most of its energy."""
    ex, name = _examples(rec), rec.name
    if _channels(rec) <= 1:
        return None
    anti = [i for i, e in enumerate(ex) if e.get("mono_energy_db") is not None and e["mono_energy_db"] < CANCEL_DB]
    if not anti:
        return None
    return make("audio.channel_cancel", "warning", name, f"examples {anti} of {name} are out of phase "
                "between channels: their mono downmix loses "
                f"{-min(ex[i]['mono_energy_db'] for i in anti):.0f} dB", CHECK,
                hint="the source itself has inverted channels; fix the file or downmix one channel",
                examples=anti)


def _downmix_cancels(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    """A multi-channel stage turned mono loses level that a plain (scaled) average would not."""
    if prev is None or _channels(prev) <= 1 or _channels(rec) != 1:
        return None
    name = rec.name
    _, drop, audible = _level_change(prev, rec)
    lost = [int(i) for i in np.flatnonzero(audible & (drop > -CANCEL_DB))]
    if not lost or _is_scaled_downmix(prev, rec, lost):
        return None  # a downmix that is the channels' average, only quieter, is a scale problem (below)
    return make("audio.channel_cancel", "error", name,
                f"the downmix {prev.name} → {name} loses {float(drop[lost].max()):.0f} dB on examples {lost}: "
                "the channels cancel", CHECK,
                hint="one channel is inverted (or subtracted) in the channel conversion",
                examples=lost, drop_db=drop[lost].tolist())


def _level_jump(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    """The level of audible examples changes a lot between consecutive stages (silence is judged apart)."""
    if prev is None or "audio.channel_cancel" in reported:
        return None
    name = rec.name
    n, drop, audible = _level_change(prev, rec)
    now_silent = _rms(rec)[:n] < SILENT_DBFS  # reported as audio.silent
    jump = [int(i) for i in np.flatnonzero(audible & ~now_silent & (np.abs(drop) > LEVEL_JUMP_DB))]
    if not jump:
        return None
    return make("audio.scale", "error" if np.abs(drop[jump]).max() > 30 else "warning", name,
                f"level changes by {[round(float(-d), 1) for d in drop[jump]]} dB from {prev.name} to {name} "
                f"on examples {jump}", CHECK,
                hint="a gain, normalisation or integer conversion between these stages is wrong",
                examples=jump, change_db=(-drop[jump]).tolist())


def _sample_rate(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    """Clips that change duration between stages (a crop aside): the rate is declared wrongly."""
    if prev is None:
        return None
    name = rec.name
    a, b = _seconds(prev), _seconds(rec)
    if not a or not b or "crop" in name or name == "audio.cropped":
        return None
    ratio = [bb / aa for aa, bb in zip(a, b) if aa > 0]
    off = [r for r in ratio if abs(r - 1) > 0.01]
    if not off:
        return None
    return make("audio.sample_rate", "error", name,
                f"clips last {off[0]:.3f}× as long at {name} ({rec.sample_rate} Hz) as at {prev.name} "
                f"({prev.sample_rate} Hz): the rate is declared wrongly or resampling was skipped",
                CHECK, hint="pass the file's true rate to the resampler", ratio=off[0])


#: An example this many samples long or shorter (0.5 ms at 32 kHz) is no clip: its time axis holds
#: something else (the channels of a `[samples, channels]` array averaged over time).
TINY_SAMPLES = 16


def _too_short(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    """Examples a handful of samples long beside clips of seconds: the time axis lost its meaning."""
    lengths = rec.meta.get("lengths")
    if prev is not None or lengths is None:
        return None  # judged where the audio enters (a later stage inherits it)
    try:
        n = np.asarray(lengths, dtype=np.int64).ravel()
    except (TypeError, ValueError):
        return None
    tiny = [int(i) for i in np.flatnonzero(n <= TINY_SAMPLES)]
    rest = n[n > TINY_SAMPLES]
    if not tiny or rest.size == 0 or np.median(rest) < 100 * TINY_SAMPLES:
        return None
    channels = rec.meta.get("channels")
    per = [int(c) for c in channels] if isinstance(channels, (list, tuple)) and len(channels) == len(n) else None
    stereo = per is not None and all(per[i] == int(n[i]) for i in tiny)
    said = (f"examples {tiny} of {rec.name} are {sorted({int(n[i]) for i in tiny})} samples long, beside clips of "
            f"{np.median(rest) / (rec.sample_rate or 1):.1f} s (median)" if rec.sample_rate else
            f"examples {tiny} of {rec.name} are {sorted({int(n[i]) for i in tiny})} samples long, beside clips of "
            f"{int(np.median(rest))} samples (median)")
    if stereo:
        said += ": each is as long as its file has channels, the time axis averaged away"
    return make("audio.layout", "error", rec.name, said, CHECK,
                hint="soundfile (and scipy) return `[samples, channels]`: downmix with `mean(axis=1)` or transpose "
                     "to `[channels, samples]` first; `mean(axis=0)` on it averages over time (torchaudio returns "
                     "`[channels, samples]`)", examples=tiny, lengths=[int(n[i]) for i in tiny],
                median_length=int(np.median(rest)))


def _silent(rec: StageRecord, prev: StageRecord | None, reported: Set[str]) -> Finding | None:
    """Examples that fall silent at this stage (silent at the source, or audible at the stage before)."""
    rms, name = _rms(rec), rec.name
    silent = [int(i) for i in np.flatnonzero(rms < SILENT_DBFS)]
    if prev is None:
        new_silent = silent
    else:
        before = _examples(prev)
        new_silent = [i for i in silent if i < len(before) and before[i]["rms_dbfs"] >= SILENT_DBFS]
    if not new_silent:
        return None
    share = len(silent) / len(rms)
    return make(
        "audio.silent",
        "error" if share > 0.5 else "warning",
        name,
        f"examples {new_silent} of {name} are silent (RMS {[round(float(rms[i]), 1) for i in new_silent]} dBFS)",
        CHECK,
        hint="listen to this stage; "
        + (
            "the source files are silent or mis-scaled"
            if prev is None
            else f"the sound is lost between {prev.name} and {name}"
        ),
        examples=new_silent,
        rms_dbfs=[float(rms[i]) for i in new_silent],
    )


#: The rules, in the order they are tried at each stage. A rule sees the stage, the audio stage
#: before it (None at the first) and the ids already reported, and makes at most one finding.
AUDIO_RULES: tuple[Rule, ...] = (
    Rule(("audio.nonfinite",), _nonfinite),
    Rule(("audio.layout",), _too_short),
    Rule(("audio.scale",), _past_full_scale),
    Rule(("audio.clipped",), _clipped),
    Rule(("audio.dc_offset",), _dc_offset),
    Rule(("audio.channel_cancel",), _out_of_phase),
    Rule(("audio.channel_cancel",), _downmix_cancels),
    Rule(("audio.scale",), _level_jump),
    Rule(("audio.sample_rate",), _sample_rate),
    Rule(("audio.silent",), _silent),
)


def judge_audio(trace: Trace) -> list[Finding]:
    """Every audio stage of the data route in order, each rule against the stage before it; each
    finding id once, at the first stage that shows it."""
    stages = [r for r in trace if r.kind == "audio" and r.name.split("#")[0] not in OUTPUT_STAGES]
    out: list[Finding] = []
    reported: set[str] = set()
    prev: StageRecord | None = None
    for rec in stages:
        if not _examples(rec):
            continue
        for rule in AUDIO_RULES:
            (fid,) = rule.ids
            if fid in reported:
                continue
            finding = rule.fn(rec, prev, reported)
            if finding is not None:
                out.append(finding)
                reported.add(fid)
        prev = rec
    return out


def judge_overshoot(trace: Trace) -> list[Finding]:
    """`audio.overshoot` on the written stage(s) of a trace (what `inspect` adds to a golden's own problems).

    Only `audio.written`: it is what a writer or a player gets. Float values past ±1 elsewhere are not
    lost: resampling rings past full scale (the reference's clean `audio.resampled` peaks at 1.06) and
    an untrained decoder's `audio.decoded` peaks where it likes (the reference's at 2.4-3.3); nothing
    clips them until they are written. The page draws every stage on a scale that shows them."""
    out: list[Finding] = []
    for rec in trace:
        if rec.kind != "audio" or rec.name.split("#")[0] != WRITTEN or not _examples(rec):
            continue
        peak = _peak(rec)
        if not peak > 1.0 + FULL_SCALE_STEP:  # NaN peaks: audio.nonfinite's business
            continue
        count = total = None
        if rec.has_value:
            v = np.asarray(rec.value)
            count, total = beyond_full_scale(v), int(v.size)
        out.append(overshoot(rec.name, rec.name, CHECK, peak, count, total, rec.meta.get("subtype")))
    return out
