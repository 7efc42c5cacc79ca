"""Audio checks across every audio stage of a trace: the first stage where the sound goes wrong.

Levels are compared between consecutive audio stages of the same route, so a loss of level is
blamed on the stage where it happens, not on the source.
"""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..trace import StageRecord, Trace
from .base import make

__all__ = ["check_audio", "SILENT_DBFS", "SCALE_PEAK"]

CHECK = "checks.audio"
SILENT_DBFS = -60.0
LEVEL_JUMP_DB = 12.0
CANCEL_DB = -10.0
DC_LIMIT = 0.05
CLIP_SHARE = 1e-3
SCALE_PEAK = 1.5  # a float peak this far past full scale is a scale bug (integer samples as float), not clipping
OUTPUT_STAGES = ("audio.decoded", "audio.written")  # judged by the output checks, their own route


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


def check_audio(trace: Trace) -> list[Finding]:
    stages = [r for r in trace if r.kind == "audio" and r.name.split("#")[0] not in OUTPUT_STAGES]
    out: list[Finding] = []
    reported: set[str] = set()

    def once(fid: str) -> bool:
        if fid in reported:
            return False
        reported.add(fid)
        return True

    prev: StageRecord | None = None
    for rec in stages:
        ex = _examples(rec)
        if not ex:
            continue
        rms = np.array([e["rms_dbfs"] for e in ex])
        name = rec.name
        nonfinite = [i for i, e in enumerate(ex) if e["nonfinite_fraction"] > 0]
        if nonfinite and once("audio.nonfinite"):
            out.append(make("audio.nonfinite", "error", name, f"examples {nonfinite} of {name} hold NaN or inf samples "
                            f"(up to {100 * max(ex[i]['nonfinite_fraction'] for i in nonfinite):.2g}% of samples)", CHECK,
                            hint="find the file or transform that produced them; one NaN sample poisons the loss",
                            examples=nonfinite))
        peak = max(e["peak"] for e in ex)
        if peak > SCALE_PEAK and once("audio.scale"):
            out.append(make("audio.scale", "error", name, f"{name} peaks at {peak:.4g}, far beyond full scale 1.0", CHECK,
                            hint="integer samples were not divided by 32768 (or a gain was applied twice)", peak=peak))
        clipped = [i for i, e in enumerate(ex) if e["clipping_fraction"] > CLIP_SHARE]
        if clipped and peak <= SCALE_PEAK and once("audio.clipped"):
            out.append(make("audio.clipped", "warning", name, f"examples {clipped} of {name} clip "
                            f"({100 * max(ex[i]['clipping_fraction'] for i in clipped):.2g}% of samples at full scale)",
                            CHECK, hint="lower the gain before this stage or normalise with headroom", examples=clipped))
        dc = [i for i, e in enumerate(ex) if abs(e["dc"]) > DC_LIMIT]
        if dc and once("audio.dc_offset"):
            out.append(make("audio.dc_offset", "warning", name, f"examples {dc} of {name} carry a DC offset up to "
                            f"{max(abs(ex[i]['dc']) for i in dc):.3f}", CHECK,
                            hint="remove the mean; DC wastes codec capacity and headroom", examples=dc))
        channels = rec.shape[1] if len(rec.shape) == 3 else 1
        if channels > 1:
            anti = [i for i, e in enumerate(ex) if e.get("mono_energy_db") is not None and e["mono_energy_db"] < CANCEL_DB]
            if anti and once("audio.channel_cancel"):
                out.append(make("audio.channel_cancel", "warning", name, f"examples {anti} of {name} are out of phase "
                                "between channels: their mono downmix loses "
                                f"{-min(ex[i]['mono_energy_db'] for i in anti):.0f} dB", CHECK,
                                hint="the source itself has inverted channels; fix the file or downmix one channel",
                                examples=anti))
        if prev is not None:
            prev_rms = np.array([e["rms_dbfs"] for e in _examples(prev)])
            n = min(len(prev_rms), len(rms))
            drop = prev_rms[:n] - rms[:n]
            prev_ch = prev.shape[1] if len(prev.shape) == 3 else 1
            audible = prev_rms[:n] > SILENT_DBFS
            lost = [int(i) for i in np.flatnonzero(audible & (drop > -CANCEL_DB))]
            if prev_ch > 1 and channels == 1 and lost and _is_scaled_downmix(prev, rec, lost):
                lost = []  # the downmix is the channels' average, only quieter: a scale problem (below)
            if prev_ch > 1 and channels == 1 and lost and once("audio.channel_cancel"):
                out.append(make("audio.channel_cancel", "error", name,
                                f"the downmix {prev.name} → {name} loses {float(drop[lost].max()):.0f} dB on examples {lost}: "
                                "the channels cancel", CHECK,
                                hint="one channel is inverted (or subtracted) in the channel conversion",
                                examples=lost, drop_db=drop[lost].tolist()))
            now_silent = rms[:n] < SILENT_DBFS  # reported as audio.silent below
            jump = [int(i) for i in np.flatnonzero(audible & ~now_silent & (np.abs(drop) > LEVEL_JUMP_DB))]
            if jump and "audio.channel_cancel" not in reported and once("audio.scale"):
                out.append(make("audio.scale", "error" if np.abs(drop[jump]).max() > 30 else "warning", name,
                                f"level changes by {[round(float(-d), 1) for d in drop[jump]]} dB from {prev.name} to {name} "
                                f"on examples {jump}", CHECK,
                                hint="a gain, normalisation or integer conversion between these stages is wrong",
                                examples=jump, change_db=(-drop[jump]).tolist()))
            a, b = _seconds(prev), _seconds(rec)
            if a and b and "crop" not in name and name != "audio.cropped":
                ratio = [bb / aa for aa, bb in zip(a, b) if aa > 0]
                off = [r for r in ratio if abs(r - 1) > 0.01]
                if off and once("audio.sample_rate"):
                    out.append(make("audio.sample_rate", "error", name,
                                    f"clips last {off[0]:.3f}× as long at {name} ({rec.sample_rate} Hz) as at {prev.name} "
                                    f"({prev.sample_rate} Hz): the rate is declared wrongly or resampling was skipped",
                                    CHECK, hint="pass the file's true rate to the resampler", ratio=off[0]))
        silent = [int(i) for i in np.flatnonzero(rms < SILENT_DBFS)]
        new_silent = silent if prev is None else [i for i in silent if i < len(_examples(prev)) and _examples(prev)[i]["rms_dbfs"] >= SILENT_DBFS]
        if new_silent and once("audio.silent"):
            share = len(silent) / len(rms)
            out.append(make("audio.silent", "error" if share > 0.5 else "warning", name,
                            f"examples {new_silent} of {name} are silent (RMS {[round(float(rms[i]), 1) for i in new_silent]} dBFS)",
                            CHECK, hint="listen to this stage; " + ("the source files are silent or mis-scaled" if prev is None
                                                                    else f"the sound is lost between {prev.name} and {name}"),
                            examples=new_silent, rms_dbfs=[float(rms[i]) for i in new_silent]))
        prev = rec
    return out
