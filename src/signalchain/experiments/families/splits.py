"""The splits family: does evaluation data leak into training? (suspiciously good validation)

Observes three things a pipeline shows: the split lists (`splits()`: ids, copies, near-copies,
overlapping windows, other versions; records with audio, HF `Audio` dicts, rows naming their file,
or metadata only, when only ids and captions can be judged), the loaders (`loader(split)`: what each split really serves),
and the taps of one step (a standardisation whose statistics can be recovered and compared with
each split's). The file audit (`signalchain audit`) runs the same judges on datasets on disk.
"""

from __future__ import annotations

import itertools
from typing import Any

from ...audio.fingerprint import audio_hash, mono
from ...audit.judge_leaks import LoaderEvidence, judge_loaders, judge_norm_stats
from ...audit.memory import ClipAudit, audit_clips, clip_fields
from ...audit.taps import AudioTap, recover_standardisation
from ...checks.base import make, run_check
from ...findings import Finding
from ...pipeline import capabilities, missing_capability
from ..context import Context
from ..doctor import family
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


def _metrics(ctx: Context, audit: ClipAudit, splits: dict[str, list[Any]]) -> None:
    rows = []
    for name, s in audit.stats.items():
        f = s.figures()
        seconds = sum(e.seconds for e in audit.entries if e.split == name)
        rows.append([name, int(f["clips"]), round(seconds, 1), f"{f['mean']:.3g}", f"{f['std']:.3g}"])
    ctx.metrics["splits.sizes"] = {"kind": "table", "title": "Splits as splits() lists them",
                                   "headers": ["split", "clips", "seconds", "mean", "std"], "rows": rows}
    flagged = sorted(audit.matches, key=lambda m: -m.similarity)[:200]
    if flagged:
        e = audit.entries
        ctx.metrics["splits.matches"] = {
            "kind": "table", "title": "The same audio on both sides of the split",
            "headers": ["kind", "evaluation", "training", "similarity", "coverage", "overlap (s)"],
            "rows": [[m.kind, e[m.a].ref, e[m.b].ref, f"{m.similarity:.3f}", f"{m.coverage:.2f}",
                      f"{m.overlap_seconds:.2f}"] for m in flagged]}
        flat = [(s, i) for s, clips in splits.items() for i in range(len(clips))]  # entry k is flat[k]
        pairs = []
        for m in flagged[:3]:
            for k in (m.a, m.b):
                s, i = flat[k]
                audio, sr, *_ = clip_fields(splits[s][i])
                pairs.append({"label": e[k].ref, "audio": audio[:, : 8 * sr], "rate": sr,
                              "note": f"{m.kind} pair, similarity {m.similarity:.3f}"})
        if pairs and len({c["rate"] for c in pairs}) == 1:
            ctx.metrics["splits.listen"] = {"kind": "audio", "title": "Listen: flagged pairs (evaluation, then training)",
                                            "sample_rate": pairs[0]["rate"],
                                            "clips": [{k: v for k, v in c.items() if k != "rate"} for c in pairs]}


def _judge_norm(taps: list[AudioTap], audit: ClipAudit) -> list[Finding]:
    fitted = recover_standardisation(taps)
    return [] if fitted is None else judge_norm_stats(fitted, audit.stats, audit.train)


@family("splits", "Splits: evaluation data leaking into training (ids, copies, windows, versions, statistics, samplers)")
def splits_family(ctx: Context) -> list[Finding]:
    p = ctx.pipeline
    if "splits" not in capabilities(p):
        return [missing_capability(p, "splits", "experiments.splits")]  # type: ignore[list-item]
    ctx.say("splits: reading splits()")
    with ctx.timed("splits.read"):
        splits = {str(k): list(v) for k, v in p.splits().items()}
    with ctx.timed("splits.audit"):
        audit = audit_clips(splits, progress=lambda s: ctx.say(f"splits: {s}"))
    out = list(audit.findings)
    if not audit.has_audio:  # metadata-only records: audit_clips said so once; nothing to match audio against
        _metrics(ctx, audit, splits)
        return out
    with ctx.timed("splits.norm"):
        model = ctx.fresh_model()
        try:
            taps = _audio_taps(p, ctx.batch(), model)
        except Exception as exc:  # the user's step failing is reported by the data family
            taps = []
            out.append(make("split.norm_unchecked", "info", None, f"the step raised {type(exc).__name__}: {exc}; "
                            "normalisation statistics were not checked", CHECK, hint="fix the step first"))
        out += run_check("audit.norm_stats", _judge_norm, taps, audit)
    if "loader" in capabilities(p):
        ctx.say("splits: what the loaders serve")
        with ctx.timed("splits.loaders"):
            evidence, problems = _measure_loaders(ctx, audit, list(splits), model)
        out += problems + run_check("audit.loaders", judge_loaders, audit.train, evidence)
    else:
        out.append(missing_capability(p, "loader", "experiments.splits.loaders"))  # type: ignore[arg-type]
    _metrics(ctx, audit, splits)
    return out
