"""Judge the output route: generated tokens → decoder → amplitude scaling → file → player.

Each finding is blamed on the first hop where the sound goes wrong: `generation` (invalid tokens,
tokens that spell silence), `audio.decoded` (a decoder fed the wrong layout, silence out of sound
tokens), `audio.written` (scale, clipping, rate, subtype, a header a player misreads). The
file-level judge also serves `signalchain listen` on any audio file.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from ..findings import Finding, Severity
from ..records.output import DecoderProbe, FileMeasurement, RouteMeasurement
from ..stats import SILENCE_DBFS
from .base import Rule, make

__all__ = ["judge_file", "judge_route", "judge_decoder", "judge_coverage", "overshoot", "FILE_RULES", "FileExpectation",
           "LOW_BIT_SUBTYPES", "FLOAT_SUBTYPES"]

CHECK = "checks.output"
LOW_BIT_SUBTYPES = {"PCM_U8": 8, "PCM_S8": 8, "ULAW": 8, "ALAW": 8, "IMA_ADPCM": 4, "MS_ADPCM": 4, "DWVW_12": 12,
                    "DWVW_16": 16, "DPCM_8": 8, "G721_32": 4, "G723_24": 3}
SCALED_DB = 30.0  # written this much quieter than decoded: a wrong conversion, not a normalisation
CLIP_SHARE = 0.01
FAR_SHARE = 0.5  # share of a one-frame change that the decoder puts far from that frame
FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")  # the file subtypes that can hold samples beyond full scale
HEADROOM_DB = 1.0  # the hint's second gain leaves this much below full scale


class FileExpectation(NamedTuple):
    """What the file is judged against: the rate and subtype it should have, the stage it stands
    for, and the level of the decoded audio it was written from (None: a file on its own)."""

    rate: int | None
    subtype: str | None
    stage: str
    decoded_dbfs: float | None


def _ev(f: FileMeasurement) -> dict[str, object]:
    return {"path": f.path, "sample_rate": f.sample_rate, "subtype": f.subtype}


def _unreadable(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    if f.error is None:
        return []
    return [make("file.unreadable", "error", x.stage, f"{f.path}: {f.error}", CHECK,
                 hint="the file is damaged or not audio; rewrite it", path=f.path)]


def _garbage_header(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    """Samples that are no audio as read (NaN/inf, absurd peaks, denormals): the header lies."""
    s = f.stats
    if not (s.get("nonfinite_fraction", 0) > 0 or s.get("peak", 0) > 100 or f.denormal_share > 0.1):
        return []
    alt = f.reread or {}
    return [make("output.header", "error", x.stage,
                 f"{f.path}: read as {f.subtype} the samples are garbage ({100 * s.get('nonfinite_fraction', 0):.0f}% "
                 f"NaN/inf, peak {s.get('peak', 0):.3g}, {100 * f.denormal_share:.0f}% denormal)"
                 + (f"; the same bytes read as {alt['as']} are plausible audio at {alt['rms_dbfs']:.1f} dBFS"
                    if alt.get("plausible") else ""), CHECK,
                 hint="the header's format/bit depth does not describe the data chunk: write files with "
                      "soundfile (sf.write(..., subtype=...)) instead of a hand-built header", reread=alt, **_ev(f))]


def _silent(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    s, d = f.stats, x.decoded_dbfs
    rms = s.get("rms_dbfs", -120.0)
    upstream_silent = d is not None and d < SILENCE_DBFS  # lost before the file
    if not (rms < SILENCE_DBFS and not upstream_silent):
        return []
    lost = f" (the audio before writing was at {d:.1f} dBFS)" if d is not None else ""
    return [make("output.silent", "error", x.stage, f"{f.path} is silent: RMS {rms:.1f} dBFS, peak "
                 f"{s.get('peak_dbfs', -120):.1f} dBFS{lost}", CHECK,
                 hint="listen to the stages before the file; if they are audible, the scale before writing "
                      "is wrong (a float divided by 32768, or int16 values written as float)", rms_dbfs=rms, **_ev(f))]


def _scaled(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    """Far quieter than the decoded audio it came from; on its own, a file that peaks barely audible."""
    s, d = f.stats, x.decoded_dbfs
    rms = s.get("rms_dbfs", -120.0)
    if d is not None and d > SILENCE_DBFS and d - rms > SCALED_DB:
        return [make("output.scaled", "error", x.stage,
                     f"{f.path} is {d - rms:.0f} dB quieter than the decoded audio it was written from "
                     f"({rms:.1f} vs {d:.1f} dBFS RMS)", CHECK,
                     hint="float audio goes to the writer in [-1, 1]; it converts to the file's integer format "
                          "itself, so do not divide (or multiply) by 32768 first", drop_db=d - rms, **_ev(f))]
    if d is None and rms >= SILENCE_DBFS and s.get("peak_dbfs", 0.0) < -SCALED_DB:
        return [make("output.scaled", "warning", x.stage,
                     f"{f.path} peaks at {s['peak_dbfs']:.1f} dBFS: barely audible at normal playback volume", CHECK,
                     hint="check the gain before writing (a division by 32768 too many, or a missing "
                          "normalisation)", peak_dbfs=s["peak_dbfs"], **_ev(f))]
    return []


def _share_over(f: FileMeasurement) -> float:
    total = f.channels * f.frames
    return f.over_samples / total if total else 0.0


def overshoot(where: str, stage: str, check: str, peak: float, count: int | None, total: int | None,
              subtype: str | None, **evidence: object) -> Finding:
    """`audio.overshoot`: float samples of `where` beyond full scale, and what happens to them next.

    A warning; an error when more than `CLIP_SHARE` of the samples are past full scale (as many as
    `output.clipped` needs: that much of the sound is lost to whoever clips it). `count`/`total`
    None: only the peak is known."""
    peak_db = 20 * math.log10(peak)
    share = count / total if count is not None and total else None
    how_many = (f"; {100 * share:.2g}% of samples ({count:,} of {total:,}) lie beyond full scale"
                if share is not None else "")
    pcm = subtype is not None and subtype not in FLOAT_SUBTYPES
    fate = (f"the {subtype} writer clips them to ±1" if pcm else
            "a 16-bit writer (soundfile/libsndfile's FLOAT→PCM_16 conversion) clips them to ±1, a hand cast "
            "(x * 32767).astype(int16) wraps them round to the opposite sign, and players clip them on playback")
    gain, room = -peak_db, -peak_db - HEADROOM_DB
    return make("audio.overshoot", "error" if share is not None and share > CLIP_SHARE else "warning", stage,
                f"{where}: float samples peak at {peak_db:+.1f} dBFS ({peak:.3g}){how_many}: {fate}", check,
                hint=f"scale by the peak before writing: multiply by {1 / peak:.3g} (gain {gain:.1f} dB), or by "
                     f"{10 ** (room / 20):.3g} ({room:.1f} dB) to keep {HEADROOM_DB:g} dB of headroom",
                peak=peak, peak_dbfs=peak_db, beyond_full_scale=count, samples=total, fraction=share,
                gain_db=gain, subtype=subtype, **evidence)


def _overshoot(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    """A float file holding samples beyond ±1: stored as they are, clipped by whatever reads them next."""
    if f.subtype not in FLOAT_SUBTYPES or f.over_samples == 0:
        return []
    return [overshoot(f.path, x.stage, CHECK, float(f.stats.get("peak", 0.0)), f.over_samples,
                      f.channels * f.frames, f.subtype, path=f.path, sample_rate=f.sample_rate)]


def _clipped(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    """Samples stuck at full scale (clipped before or by the writer); a float file's samples beyond
    full scale are not clipped yet: `audio.overshoot` says what will clip them."""
    clip = f.stats.get("clipping_fraction", 0.0) - _share_over(f)
    if not clip > CLIP_SHARE:
        return []
    return [make("output.clipped", "error", x.stage, f"{f.path}: {100 * clip:.1f}% of samples sit at full scale",
                 CHECK, hint="values beyond ±1 were clipped by the writer: scale to [-1, 1] (with headroom) "
                             "before writing, or cast to int16 yourself if you scale to the int16 range",
                 clipping_fraction=clip, **_ev(f))]


def _dc_offset(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    dc = f.stats.get("dc", 0.0)
    if not abs(dc) > 0.05:
        return []
    return [make("audio.dc_offset", "warning", x.stage, f"{f.path} carries a DC offset of {dc:.3f}", CHECK,
                 hint="remove the mean before writing; DC wastes headroom and thumps on playback", dc=dc, **_ev(f))]


def _out_of_phase(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    s = f.stats
    mono = s.get("mono_energy_db")
    if not (f.channels > 1 and mono is not None and mono < -10.0):
        return []
    return [make("audio.channel_cancel", "warning", x.stage,
                 f"{f.path}: the channels are out of phase (correlation {s.get('channel_correlation') or 0:.2f}); "
                 + (f"played in mono the file loses {-mono:.0f} dB" if mono > -100.0 else
                    "played in mono the channels cancel to silence"), CHECK,
                 hint="one channel is inverted: flip its sign (or write mono)", mono_energy_db=mono, **_ev(f))]


def _sample_rate(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    if x.rate is None or f.sample_rate is None or f.sample_rate == x.rate:
        return []
    return [make("output.sample_rate", "error", x.stage,
                 f"{f.path} says {f.sample_rate} Hz where the audio is at {x.rate} Hz: players run it "
                 f"{f.sample_rate / x.rate:.2f}× too fast", CHECK,
                 hint="pass the model's (decoder's) sample rate to the writer, not the dataset's",
                 expected_rate=x.rate, **_ev(f))]


def _subtype(f: FileMeasurement, x: FileExpectation) -> list[Finding]:
    """Not the subtype asked for; unasked, a low-bit one that quantises quiet passages."""
    if x.subtype is not None and f.subtype is not None and f.subtype != x.subtype:
        return [make("output.subtype", "error", x.stage, f"{f.path} is {f.subtype}, expected {x.subtype}",
                     CHECK, hint=f"write with subtype={x.subtype!r}", expected_subtype=x.subtype, **_ev(f))]
    if f.subtype in LOW_BIT_SUBTYPES:
        bits = LOW_BIT_SUBTYPES[f.subtype]
        return [make("output.subtype", "warning", x.stage,
                     f"{f.path} is {f.subtype} ({bits} bits, about {6 * bits} dB of dynamic range): quiet passages "
                     "quantise to a few levels or to silence", CHECK,
                     hint="write PCM_16 (or FLOAT) for listening and evaluation", bits=bits, **_ev(f))]
    return []


#: The rules in the order the judge runs them; a final rule that fires ends the judging (an
#: unreadable file, or samples that are garbage as read: their levels say nothing more).
FILE_RULES: tuple[Rule, ...] = (
    Rule(("file.unreadable",), _unreadable, final=True),
    Rule(("output.header",), _garbage_header, final=True),
    Rule(("output.silent",), _silent),
    Rule(("output.scaled",), _scaled),
    Rule(("audio.overshoot",), _overshoot),
    Rule(("output.clipped",), _clipped),
    Rule(("audio.dc_offset",), _dc_offset),
    Rule(("audio.channel_cancel",), _out_of_phase),
    Rule(("output.sample_rate",), _sample_rate),
    Rule(("output.subtype",), _subtype),
)


def judge_file(f: FileMeasurement, expect_rate: int | None = None, expect_subtype: str | None = None,
               stage: str = "audio.written", decoded_dbfs: float | None = None) -> list[Finding]:
    """What a listener would get from this file: level, clipping, overshoot, DC, phase, rate, subtype, header."""
    expect = FileExpectation(expect_rate, expect_subtype, stage, decoded_dbfs)
    out: list[Finding] = []
    for rule in FILE_RULES:
        found = rule.fn(f, expect)
        out += found
        if found and rule.final:
            break
    return out


def judge_route(route: RouteMeasurement) -> list[Finding]:
    """Tokens, decoded audio, and each written file against the decoded audio it came from."""
    out: list[Finding] = []
    if route.audio_only and route.error is None:
        out.append(make("output.codes_unavailable", "info", "generation",
                        f"generate returns {route.audio_only} and no token codes: the generated tokens could not be "
                        "checked (range, silence pattern); the route is judged from its audio on", CHECK,
                        hint="return the codes beside the audio, or tap('generation.tokens', codes) inside generate",
                        returned=route.audio_only))
    if route.invalid:
        out.append(
            make(
                "generation.invalid_tokens",
                "error",
                "generation",
                f"{route.invalid} generated tokens lie outside [0, {route.cardinality}) "
                f"(values {route.special[:5]})" + (f"; the decoder raised: {route.error}" if route.error else ""),
                CHECK,
                hint="special ids (pattern padding, start token) reached the output: revert the delay "
                "pattern before returning codes",
                invalid=route.invalid,
                values=route.special[:10],
            )
        )
    if route.silent_frames is not None and route.silent_frames > 0.8:
        out.append(make("generation.silent", "error", "generation",
                        f"{100 * route.silent_frames:.0f}% of generated frames are the silence pattern "
                        f"{route.silence_pattern} (the codes the training tokens use for silence)", CHECK,
                        hint="the sampler only emits silence: check logits processors and masks applied before "
                             "sampling (masked_fill fills where the mask is True)", share=route.silent_frames,
                        pattern=route.silence_pattern))
    elif route.decoded_dbfs and max(route.decoded_dbfs) < SILENCE_DBFS and not route.invalid:
        out.append(make("output.silent", "error", "audio.decoded",
                        f"the decoder turns the generated tokens into silence (RMS {max(route.decoded_dbfs):.1f} dBFS)",
                        CHECK, hint="decode real training tokens to tell a broken decoder from silent tokens"))
    per_file: dict[str, list[Finding]] = {}
    for i, f in enumerate(route.files):
        level = route.decoded_dbfs[i] if i < len(route.decoded_dbfs) else None
        for finding in judge_file(f, expect_rate=route.decoded_rate, decoded_dbfs=level):
            per_file.setdefault(finding.id, []).append(finding)
    for same in per_file.values():  # one finding per problem, naming how many files share it
        first = same[0]
        if first.id == "audio.overshoot":  # a fresh model's level says little about a trained one's
            first = dataclasses.replace(first, severity=Severity.INFO, message=first.message + (
                " (a fresh, untrained model's render: the writer does not scale what it is given)"))
        if len(same) > 1:
            first = dataclasses.replace(
                first, message=first.message + f" (and {len(same) - 1} more of the {len(route.files)} written files)",
                evidence={**first.evidence, "files": [g.evidence.get("path") for g in same]})
        out.append(first)
    return out


def _round_trip(probe: DecoderProbe) -> Finding | None:
    """The golden tokens decode at a level far from the audio they were made from, on every example:
    the codec does not reproduce its input (weights never loaded, a decode missing its scale)."""
    gaps = [g for g in probe.round_trip_db if math.isfinite(g)]
    if len(gaps) < 2 or not (all(g >= SCALED_DB for g in gaps) or all(g <= -SCALED_DB for g in gaps)):
        return None
    louder = gaps[0] > 0
    lo, hi = min(gaps), max(gaps)
    sims = probe.round_trip_similarity
    sim = f"; log-mel correlation with the input {min(sims):.2f} to {max(sims):.2f}" if sims else ""
    return make("codec.round_trip", "warning", "tokens",
                f"the codec's round trip does not give its input back: the golden batch's tokens decode "
                f"{abs(lo) if louder else abs(hi):.0f} to {abs(hi) if louder else abs(lo):.0f} dB "
                f"{'louder' if louder else 'quieter'} than {probe.round_trip_stage}, the audio they were encoded "
                f"from, on all {len(gaps)} examples{sim}", CHECK,
                hint="a codec at its initial weights encodes and decodes noise: check that its checkpoint is loaded "
                     "into it (`load_state_dict` on the module that encodes, not a copy; `from_pretrained`, not "
                     "`from_config`), then that decode undoes the same normalisation encode applied",
                stage_encoded=probe.round_trip_stage, level_gap_db=gaps, similarity=sims)


def judge_decoder(probe: DecoderProbe | None) -> list[Finding]:
    if probe is None or probe.error is not None:
        return []
    trip = _round_trip(probe)
    if trip is not None:  # a codec that does not reproduce its input: where a change lands says nothing
        return [trip]
    if probe.far_share is None or probe.far_share < FAR_SHARE:
        return []
    return [make("tokens.codebook_order", "error", "audio.decoded",
                 f"changing the codes of frame(s) {probe.changed} changes the decoded audio mostly elsewhere: "
                 f"{100 * probe.far_share:.0f}% of the difference lies more than {probe.window} frames away (in the "
                 "waveform's energy and in its log-mel spectrum alike)", CHECK,
                 hint="the decoder receives codes in the wrong layout: codes are [B, K, T]; a reshape where a "
                      "transpose/permute belongs interleaves codebooks and frames", far_share=probe.far_share,
                 window=probe.window, frames=probe.frames)]


def judge_coverage(cov: dict[str, object]) -> list[Finding]:
    """`output.unchecked` (info) when the output family could look at nothing: no audio stage, no decoder
    probe, no generated audio. A family that did not run reports no health; it says why it did not."""
    if cov.get("stages") or cov.get("decoder") or cov.get("generated"):
        return []
    why = list(cov.get("not_checked") or [])  # type: ignore[call-overload]
    return [make("output.unchecked", "info", None, "the output route could not be checked: " + "; ".join(why),
                 CHECK, hint="tap the audio stages with sample_rate=, and give the pipeline `decode` and `render` (or "
                             "`generate` + `decode`) to have the route from tokens to the written file checked; a "
                             "symbolic pipeline's output is judged by the symbolic family", not_checked=why)]
