"""Judges of the split itself: the same material on both sides (ids, copies, near-copies,
overlapping windows, other versions of a piece, shared cached features) and leaks through
processing (normalisation statistics, samplers, loaders). Pure: evidence in, findings out,
stage "split"; one finding per kind and pair of splits, naming the examples."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from ..checks.base import make
from ..findings import Finding
from ..records.audit import STAGE_SPLIT
from .leakage import Entry, Match, side_rank, train_split

__all__ = ["evaluation_pair", "eval_partner", "judge_shared_ids", "judge_matches", "judge_alternate_versions",
           "judge_cache_refs", "split_sizes", "title_key"]

CHECK = "audit.splits"
EXAMPLES = 3  # examples quoted in a message; evidence keeps up to 1000 pairs


def split_sizes(entries: Sequence[Entry]) -> dict[str, int]:
    sizes: dict[str, int] = defaultdict(int)
    for e in entries:
        sizes[e.split] += 1
    return dict(sizes)


_EVAL_NAME = re.compile(r"^(valid(ation)?|val|dev|eval(uate|uation)?|test(ing)?|generate|gen|holdout|heldout)"
                        r"([_\-.]?\w*)?$", re.IGNORECASE)


def evaluation_pair(a_split: str, b_split: str, sizes: dict[str, int]) -> bool:
    """Both splits are evaluation splits: neither is the training split (`train_split`), or both are
    named as evaluation splits are (valid, test, generate, …). Evaluation splits may share examples
    (AudioCraft's dataset configs point `generate` at `evaluate`'s files); what they share never
    reaches the weights, so it is not a leak."""
    train = train_split(sizes)
    named = all(_EVAL_NAME.match(s) for s in (a_split, b_split))
    return named or train not in (a_split, b_split)


def eval_partner(entries: Sequence[Entry]):
    """Sort key of a match (anything with `.a`, `.b`): True when both sides are evaluation splits."""
    sizes = split_sizes(entries)
    return lambda m: evaluation_pair(entries[m.a].split, entries[m.b].split, sizes)


def _pair_finding(fid: str, severity: str, entries: Sequence[Entry], pairs: list[tuple[int, int]], what: str,
                  hint: str, extra: list[dict] | None = None) -> Finding:
    a_split, b_split = entries[pairs[0][0]].split, entries[pairs[0][1]].split
    n_eval = len({a for a, _ in pairs})
    sizes = split_sizes(entries)
    size = sizes[a_split]
    shown = "; ".join(f"{entries[a].where} ~ {entries[b].where}" for a, b in pairs[:EXAMPLES])
    tail = ""
    if evaluation_pair(a_split, b_split, sizes):
        severity, tail = "info", (" (both are evaluation splits: what they share is scored twice, never "
                                  "trained on, so it is not a leak)")
        hint = ("nothing to fix for training; keep evaluation splits apart only if their scores must be "
                "independent")
    return make(
        fid,
        severity,
        STAGE_SPLIT,
        f"{n_eval} of {size} {a_split} examples ({100 * n_eval / max(size, 1):.0f}%) {what} in {b_split}: "
        f"{shown}{tail}",
        CHECK,
        hint=hint,
        evaluation_only=bool(tail),
        splits=[a_split, b_split],
        count=n_eval,
        total=size,
        pairs=[
            {"a": entries[a].ref, "b": entries[b].ref, **(extra[i] if extra else {})}
            for i, (a, b) in enumerate(pairs[:1000])
        ],
    )


def _by_split_pair(pairs: list[tuple[int, int]], entries: Sequence[Entry]) -> dict[tuple[str, str], list[int]]:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for n, (a, b) in enumerate(pairs):
        groups[(entries[a].split, entries[b].split)].append(n)
    return groups


def judge_shared_ids(entries: Sequence[Entry]) -> list[Finding]:
    """The same source (recording) id in two splits: segments of one recording on both sides."""
    sizes = split_sizes(entries)
    by_id: dict[str, dict[str, int]] = defaultdict(dict)
    for i, e in enumerate(entries):
        if e.source_id:
            by_id[e.source_id].setdefault(e.split, i)
    pairs = []
    for splits in by_id.values():
        if len(splits) > 1:
            members = sorted(splits.values(), key=lambda i: side_rank(sizes)(entries[i].split))
            pairs += [(a, members[-1]) for a in members[:-1]]
    out = []
    for idx in _by_split_pair(pairs, entries).values():
        group = [pairs[n] for n in idx]
        out.append(_pair_finding("split.shared_id", "error", entries, group, "share a source id with examples",
                                 "split by source id (recording), not by file or row: every segment of a recording "
                                 "belongs to one split", [{"source_id": entries[a].source_id} for a, _ in group]))
    return out


_KIND = {
    "exact": ("split.duplicate", "have a byte-identical copy (decoded audio)",
              "deduplicate by audio hash before splitting, then keep each cluster on one side"),
    "near": ("split.near_duplicate", "have a near-duplicate (same recording re-gained, re-encoded, resampled, "
             "noised or cropped)", "cluster near-duplicates by fingerprint and assign each cluster to one split"),
    "overlap": ("split.overlapping_windows", "overlap in time with a window",
                "cut recordings into windows after splitting, or split by recording"),
}


def judge_matches(entries: Sequence[Entry], matches: Sequence[Match]) -> list[Finding]:
    """Copies, near-copies and overlapping windows across splits."""
    out = []
    between_evals = eval_partner(entries)
    for kind, (fid, what, hint) in _KIND.items():
        # One partner per evaluation example: in training where it has one there, else its best.
        chosen = sorted((m for m in matches if m.kind == kind), key=lambda m: (m.a, between_evals(m), -m.similarity))
        best: dict[int, Match] = {}
        for m in chosen:
            best.setdefault(m.a, m)  # one partner per evaluation example: its best
        ms = list(best.values())
        pairs = [(m.a, m.b) for m in ms]
        for idx in _by_split_pair(pairs, entries).values():
            group = [ms[n] for n in idx]
            extra = [{"similarity": round(m.similarity, 3), "coverage": round(m.coverage, 3),
                      "overlap_s": round(m.overlap_seconds, 2), "lag_s": round(m.lag_seconds, 3)} for m in group]
            f = _pair_finding(fid, "error", entries, [(m.a, m.b) for m in group], what, hint, extra)
            if kind != "exact":
                lo = min(m.similarity for m in group)
                f = make(f.id, f.severity, f.stage, f.message + f" (aligned similarity ≥ {lo:.2f})", f.check,
                         hint=f.hint, **f.evidence)
            out.append(f)
    return out


_BRACKETS = re.compile(r"[\(\[\{].*?[\)\]\}]")
_VERSION_WORDS = re.compile(r"\s+-\s+(live|remaster(ed)?|demo|acoustic|remix|edit|version|mix|take|mono|stereo)\b.*$")


def title_key(title: str | None, artist: str | None) -> str | None:
    """Title and artist folded for comparison: case, punctuation and version tags ignored."""
    if not title or not artist:
        return None
    t = _VERSION_WORDS.sub("", _BRACKETS.sub(" ", title.lower()))
    fold = lambda s: " ".join(re.sub(r"[^\w]+", " ", s).split())  # noqa: E731
    return f"{fold(t)}|{fold(artist.lower())}" if fold(t) else None


def judge_alternate_versions(entries: Sequence[Entry], matches: Sequence[Match]) -> list[Finding]:
    """Another take or arrangement of the same piece (same title and artist, a different file) across
    splits. Pairs already reported as copies are left to those findings."""
    sizes = split_sizes(entries)
    copied = {(m.a, m.b) for m in matches} | {(m.b, m.a) for m in matches}
    by_key: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, e in enumerate(entries):
        key = title_key(e.title, e.artist)
        if key:
            by_key[key][e.split].append(i)
    pairs = []
    for splits in by_key.values():
        if len(splits) < 2:
            continue
        order = sorted(splits, key=side_rank(sizes))
        for s in order[:-1]:
            for a in splits[s]:
                partner = next((b for t in order if t != s for b in splits[t] if (a, b) not in copied
                                and entries[a].audio_hash != entries[b].audio_hash), None)
                if partner is not None:
                    pairs.append((a, partner))
    out = []
    for idx in _by_split_pair(pairs, entries).values():
        group = [pairs[n] for n in idx]
        out.append(
            _pair_finding(
                "split.alternate_version",
                "warning",
                entries,
                group,
                "are another version (same title and artist) of examples",
                "group versions of a work (title + artist, or a work id) and keep each group in one split",
                [{"title": entries[a].title, "artist": entries[a].artist} for a, _ in group],
            )
        )
    return out


def judge_cache_refs(entries: Sequence[Entry], matches: Sequence[Match]) -> list[Finding]:
    """Cached features shared across splits: the same cache file, or byte-identical cache content,
    behind examples whose audio differs. The cache was built before the split (by position or for
    the whole collection), so one side reads the other's features."""
    copied = {(m.a, m.b) for m in matches} | {(m.b, m.a) for m in matches}
    sizes = split_sizes(entries)
    owners: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(entries):
        for ref, h in zip(e.cache_refs, e.cache_hashes or [""] * len(e.cache_refs)):
            owners[f"path:{ref}"].append(i)
            if h:
                owners[f"sha:{h}"].append(i)
    pairs: set[tuple[int, int]] = set()
    for members in owners.values():
        by_split: dict[str, int] = {}
        for i in members:
            by_split.setdefault(entries[i].split, i)
        if len(by_split) < 2:
            continue
        order = sorted(by_split.values(), key=lambda i: side_rank(sizes)(entries[i].split))
        for a in order[:-1]:
            b = order[-1]
            if (a, b) not in copied and entries[a].audio_hash != entries[b].audio_hash:
                pairs.add((a, b))
    ordered = sorted(pairs)
    out = []
    for idx in _by_split_pair(ordered, entries).values():
        group = [ordered[n] for n in idx]
        out.append(_pair_finding("split.cache_before_split", "error", entries, group,
                                 "read cached features that also serve different audio", "rebuild the feature cache "
                                 "after splitting, keyed by example id (not position), one cache per split",
                                 [{"cache": entries[a].cache_refs} for a, _ in group]))
    return out
