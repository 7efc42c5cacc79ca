"""The splits family: does evaluation data leak into training? (suspiciously good validation)

Observes three things a pipeline shows: the split lists (`splits()`: ids, copies, near-copies,
overlapping windows, other versions; records with audio, HF `Audio` dicts, rows naming their file,
or metadata only, when only ids and captions can be judged; records carrying a piece's `notes`
instead of audio are searched by note fingerprints: duplicates, transposed copies, other versions),
the loaders (`loader(split)`: what each split really serves), and the taps of one step (a
standardisation whose statistics can be recovered and compared with each split's). The file audit
(`signalchain audit`) runs the same judges on datasets on disk.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from ...audio.fingerprint import audio_hash, mono
from ...audit.judge_leaks import LoaderEvidence, judge_loaders, judge_norm_stats
from ...audit.memory import ClipAudit, audit_clips, clip_fields
from ...audit.midi_memory import audit_notes, has_notes
from ...audit.taps import AudioTap, recover_standardisation
from ...checks.base import make
from ...findings import Finding
from ...records.figures import Audio, Figure, Table
from ..context import Context
from ..doctor import SELF, Family, Step, judge, register
from ..splits import audio_taps as _audio_taps
from ..splits import loader_clips as _loader_clips

__all__: list[str] = []

CHECK = "experiments.splits"


def _measure_loaders(ctx: Context, audit: ClipAudit, splits: list[str], model: Any
                     ) -> tuple[list[LoaderEvidence], list[Finding]]:
    """Match what each split's loader serves against the split lists, by exact mono audio."""
    p, index = ctx.pipeline, audit.by_hash()
    evidence, problems = [], []
    for split in splits:
        # Enough draws that a sampler leaking even 10 % evaluation data shows (0.9^96 ≈ 4e-5).
        batches = max(12, 4 * ctx.budget.loader_batches) if split == audit.train else max(4, ctx.budget.loader_batches)
        ev = LoaderEvidence(split=split, examples=0)
        try:
            for batch in itertools.islice(iter(p.loader(split)), batches):
                clips = _loader_clips(p, batch, model)
                if clips is None:
                    problems.append(make("split.loader_opaque", "info", None, f"loader({split!r}) batches show no "
                                         "audio (no audio.original tap, no .clips): loader leaks not checked", CHECK,
                                         hint="tap('audio.original', audio, lengths=...) in the step"))
                    break
                for clip in clips:
                    ev.examples += 1
                    members = index.get(audio_hash(mono(clip)), [])
                    owners = {audit.entries[i].split for i in members}
                    if len(owners) == 1:  # found in one split only; a clip in both says nothing
                        ev.only_in.setdefault(owners.pop(), []).append(audit.entries[members[0]].ref)
                    elif not owners:
                        ev.unmatched += 1
        except Exception as exc:  # the user's loader failing is a finding about it, not a crash
            problems.append(make("pipeline.step_failed", "error", None, f"reading batches of loader({split!r}) "
                                 f"raised {type(exc).__name__}: {exc}", CHECK,
                                 hint="fix the loader or the step; they fail outside signalchain too"))
            continue
        evidence.append(ev)
    return evidence, problems


def _metrics(seen: tuple[ClipAudit, dict[str, list[Any]]]) -> dict[str, Figure]:
    audit, splits = seen
    rows = []
    for name, s in audit.stats.items():
        f = s.figures()
        seconds = sum(e.seconds for e in audit.entries if e.split == name)
        rows.append([name, int(f["clips"]), round(seconds, 1), f"{f['mean']:.3g}", f"{f['std']:.3g}"])
    out: dict[str, Figure] = {"splits.sizes": Table("Splits as splits() lists them",
                                                    ["split", "clips", "seconds", "mean", "std"], rows)}
    if audit.note_matches:
        e = audit.entries
        out["splits.matches"] = Table(
            "The same piece on both sides of the split (by its notes)",
            ["kind", "evaluation", "training", "similarity", "agreement", "shift", "tempo ratio"],
            [[m.kind, e[m.a].ref, e[m.b].ref, f"{m.similarity:.3f}", f"{m.agreement:.2f}", f"{m.shift:+d}",
              f"{m.tempo_ratio:.3f}"] for m in sorted(audit.note_matches, key=lambda m: -m.similarity)[:200]])
    flagged = sorted(audit.matches, key=lambda m: -m.similarity)[:200]
    if flagged:
        e = audit.entries
        out["splits.matches"] = Table(
            "The same audio on both sides of the split",
            ["kind", "evaluation", "training", "similarity", "coverage", "overlap (s)"],
            [[m.kind, e[m.a].ref, e[m.b].ref, f"{m.similarity:.3f}", f"{m.coverage:.2f}",
              f"{m.overlap_seconds:.2f}"] for m in flagged])
        flat = [(s, i) for s, clips in splits.items() for i in range(len(clips))]  # entry k is flat[k]
        pairs = []
        for m in flagged[:3]:
            for k in (m.a, m.b):
                s, i = flat[k]
                audio, sr, *_ = clip_fields(splits[s][i])
                pairs.append({"label": e[k].ref, "audio": audio[:, : 8 * sr], "rate": sr,
                              "note": f"{m.kind} pair, similarity {m.similarity:.3f}"})
        if pairs and len({c["rate"] for c in pairs}) == 1:
            out["splits.listen"] = Audio("Listen: flagged pairs (evaluation, then training)", pairs[0]["rate"],
                                         [{k: v for k, v in c.items() if k != "rate"} for c in pairs])
    return out


@dataclass
class _NormTaps:
    """The golden step's audio taps, on the fresh model the loaders' step reuses."""

    model: Any
    taps: list[AudioTap]
    problems: list[Finding]


def _read(ctx: Context) -> dict[str, list[Any]]:
    return {str(k): list(v) for k, v in ctx.pipeline.splits().items()}


def _audit(ctx: Context, splits: dict[str, list[Any]]) -> ClipAudit:
    if has_notes(splits):  # a symbolic pipeline: pieces as notes tables, searched by note fingerprints
        return audit_notes(splits, progress=lambda s: ctx.say(f"splits: {s}"))
    return audit_clips(splits, progress=lambda s: ctx.say(f"splits: {s}"))


def audit_findings(audit: ClipAudit) -> list[Finding]:
    return list(audit.findings)


def _norm_taps(ctx: Context) -> _NormTaps:
    model = ctx.fresh_model()
    try:
        return _NormTaps(model, _audio_taps(ctx.pipeline, ctx.batch(), model), [])
    except Exception as exc:  # the user's step failing is reported by the data family
        return _NormTaps(
            model,
            [],
            [
                make(
                    "split.norm_unchecked",
                    "info",
                    None,
                    f"the step raised {type(exc).__name__}: {exc}; normalisation statistics were not checked",
                    CHECK,
                    hint="fix the step first",
                )
            ],
        )


def norm_unchecked(seen: _NormTaps) -> list[Finding]:
    return seen.problems


def judge_norm(seen: _NormTaps, audit: ClipAudit) -> list[Finding]:
    fitted = recover_standardisation(seen.taps)
    return [] if fitted is None else judge_norm_stats(fitted, audit.stats, audit.train)


def _loaders(ctx: Context, audit: ClipAudit, splits: dict[str, list[Any]], seen: _NormTaps
             ) -> tuple[list[LoaderEvidence], list[Finding], str]:
    evidence, problems = _measure_loaders(ctx, audit, list(splits), seen.model)
    return evidence, problems, audit.train


def loader_problems(m: tuple[list[LoaderEvidence], list[Finding], str]) -> list[Finding]:
    return m[1]


def judge_served(m: tuple[list[LoaderEvidence], list[Finding], str]) -> list[Finding]:
    return judge_loaders(m[2], m[0])


def _has_audio(ctx: Context) -> bool:
    return ctx.result("splits.audit").has_audio


def _both(ctx: Context, audit: ClipAudit, splits: dict[str, list[Any]]) -> tuple[ClipAudit, dict[str, list[Any]]]:
    return audit, splits


register(
    Family(
        "splits",
        "Splits: evaluation data leaking into training (ids, copies, windows, versions, statistics, samplers)",
        after=("output",),
        needs=("splits",),
        needed_by="experiments.splits",
        steps=(
            Step("read", say="splits: reading splits()", measure=_read, isolated=False, empty_ok=True),
            Step("audit", measure=_audit, reads=("splits.read",), isolated=False, judges=(audit_findings,)),
            # Metadata-only records: audit_clips said so once; there is no audio to match.
            Step(
                "norm",
                when=_has_audio,
                measure=_norm_taps,
                isolated=False,
                judges=(norm_unchecked, judge(judge_norm, SELF, "splits.audit")),
            ),
            Step(
                "loaders",
                when=_has_audio,
                needs=("loader",),
                needed_by="experiments.splits.loaders",
                say="splits: what the loaders serve",
                measure=_loaders,
                reads=("splits.audit", "splits.read", "splits.norm"),
                isolated=False,
                judges=(loader_problems, judge_served),
            ),
            Step(
                "sizes", measure=_both, reads=("splits.audit", "splits.read"), timing="", isolated=False, show=_metrics
            ),
        ),
    )
)
