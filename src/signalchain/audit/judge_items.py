"""Judges of single examples: is the file there and readable, does it hold sound, does the manifest
tell the truth about it, does it have its metadata and a usable caption. Pure: records in,
findings out (stage "dataset", each naming the file and manifest line)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from ..checks.audio import CANCEL_DB, CLIP_SHARE, DC_LIMIT, SCALE_PEAK, SILENT_DBFS
from ..checks.base import make
from ..checks.pieces import sources
from ..findings import Finding
from ..records.audit import STAGE_DATASET, Item, Measure
from .measure import LOST, TIMED_OUT

__all__ = ["judge_item", "judge_captions", "caption_tokens", "DURATION_TOLERANCE_S"]

CHECK = "audit.items"
DURATION_TOLERANCE_S = 0.02  # AudioCraft writes frames / rate exactly; allow rounding in other writers
_TOKEN = re.compile(r"\w+|[^\w\s]")


def caption_tokens(caption: str) -> int:
    """Words and punctuation marks: a lower bound on what a subword tokenizer (T5, CLAP) counts."""
    return len(_TOKEN.findall(caption))


def _f(fid: str, severity: str, item: Item, message: str, hint: str, **evidence: object) -> Finding:
    return make(fid, severity, STAGE_DATASET, f"{item.where}: {message}", CHECK, hint=hint, path=item.ref,
                manifest=item.manifest, line=item.line, split=item.split, **evidence)


def _file(item: Item, m: Measure) -> list[Finding]:
    problem = m.problem or ""
    if problem.startswith("missing"):
        why = problem.partition(": ")[2]
        return [
            _f(
                "file.missing",
                "error",
                item,
                f"the audio file does not exist{f' ({why})' if why else ''}",
                "fix the path in the manifest (relative paths resolve against the manifest's folder) or drop the line",
            )
        ]
    if problem.startswith("not regular: "):
        what = problem.partition(": ")[2]
        return [_f("file.not_regular", "error", item, f"{what}, not a regular file: skipped without opening it",
                   "remove it or replace it with the audio file; a loader that opens it blocks (FIFO), reads "
                   "forever (device) or crashes (folder)", kind=what)]
    if problem.startswith(LOST):  # a timeout is one slow try (an overloaded node can make one): a warning
        timed_out = problem.startswith(TIMED_OUT)
        return [_f("file.lost", "warning" if timed_out else "error", item,
                   problem[len(TIMED_OUT if timed_out else LOST):],
                   "decode it alone (python -c \"import soundfile as sf; sf.read('FILE')\"): a file that kills or "
                   "hangs its decoder stops a training data loader too; re-export or drop it", problem=problem)]
    if problem.startswith("sample rate: "):
        return [_f("audio.sample_rate", "error", item, f"the header's {problem}",
                   "re-export the file with its true rate; a loader resamples from the header's claim",
                   sample_rate=m.sample_rate)]
    return [_f("file.unreadable", "error", item, problem,
               "re-export or drop this file; a loader that hits it crashes or trains on a substitute",
               problem=problem)]


def _container(item: Item, m: Measure) -> list[Finding]:
    """What the file's header says against what it holds, and a channel count no pipeline expects."""
    out = []
    if m.frames_claimed > m.samples:
        rate = m.sample_rate or 1
        out.append(
            _f(
                "file.truncated",
                "error",
                item,
                f"the header claims {m.frames_claimed:,} frames ({m.frames_claimed / rate:.3f} s), the file holds "
                f"{m.samples:,} ({m.samples / rate:.3f} s)"
                + (f"; decoding stopped: {m.read_error}" if m.read_error else "")
                + ": it was cut short, or its header lies (what it holds is audited)",
                "re-export or re-copy the file; loaders that trust the header crop past the end into padding",
                frames_claimed=m.frames_claimed,
                frames_present=m.samples,
            )
        )
    if m.channels > 2:
        out.append(_f("audio.channels", "warning", item,
                      f"{m.channels} channels: what the pipeline does with more than two (averages them, keeps "
                      "the first two, or fails) is up to its loader",
                      "downmix to mono or stereo when preparing the dataset, so every file reaches the model the "
                      "same way", channels=m.channels))
    return out


def _name(item: Item) -> list[Finding]:
    if not item.name_note:
        return []
    return [_f("file.name_encoding", "warning", item, item.name_note,
               "rename the file with a UTF-8 name: JSON manifests, Arrow (HF datasets) and most tools hold only "
               "UTF-8 text")]


def _audio(item: Item, m: Measure) -> list[Finding]:
    s, out = m.summary, []
    if s.get("nonfinite_fraction", 0.0) > 0:
        out.append(
            _f(
                "audio.nonfinite",
                "error",
                item,
                f"{100 * s['nonfinite_fraction']:.3g}% of the samples are NaN or inf",
                "re-export the file; one non-finite sample makes the loss NaN",
                fraction=s["nonfinite_fraction"],
            )
        )
    if s.get("rms_dbfs", 0.0) < SILENT_DBFS:
        out.append(_f("audio.silent", "warning", item, f"silent (RMS {s['rms_dbfs']:.1f} dBFS)",
                      "drop it or fix the export; silent clips teach the model silence", rms_dbfs=s["rms_dbfs"]))
    if s.get("peak", 0.0) > SCALE_PEAK:  # the same rule as checks.audio: past full scale by far is not clipping
        out.append(_f("audio.scale", "error", item, f"peaks at {s['peak']:.4g}, far beyond full scale 1.0",
                      "integer samples were stored as float without dividing by 32768 (or a gain was applied "
                      "twice): rescale the file", peak=s["peak"]))
    elif s.get("clipping_fraction", 0.0) > CLIP_SHARE:
        out.append(
            _f(
                "audio.clipped",
                "warning",
                item,
                f"{100 * s['clipping_fraction']:.2g}% of the samples sit at full scale",
                "re-export with headroom; the codec learns the distortion",
                fraction=s["clipping_fraction"],
            )
        )
    if abs(s.get("dc", 0.0)) > DC_LIMIT:
        out.append(_f("audio.dc_offset", "warning", item, f"DC offset {s['dc']:+.3f}",
                      "high-pass or remove the mean before training", dc=s["dc"]))
    mono_db = s.get("mono_energy_db")
    if m.channels > 1 and mono_db is not None and mono_db < CANCEL_DB:
        out.append(_f("audio.channel_cancel", "warning", item,
                      f"the channels cancel: the mono downmix is {-mono_db:.0f} dB quieter than the channels",
                      "one channel is inverted; fix the file or downmix a single channel", mono_energy_db=mono_db))
    return out


def _declared(item: Item, m: Measure) -> list[Finding]:
    out, d = [], item.declared
    if "sample_rate" in d and int(d["sample_rate"]) != m.sample_rate:
        out.append(_f("manifest.sample_rate_mismatch", "error", item,
                      f"the manifest says {d['sample_rate']} Hz, the file is {m.sample_rate} Hz",
                      "regenerate the manifest from the files (the rate drives resampling and durations)",
                      declared=d["sample_rate"], actual=m.sample_rate))
    if "duration" in d:
        real, said = m.seconds, float(d["duration"])
        if abs(said - real) > max(DURATION_TOLERANCE_S, 0.002 * real):
            longer = said > real
            out.append(_f("manifest.duration_mismatch", "error" if longer else "warning", item,
                          f"the manifest says {said:.3f} s, the file holds {real:.3f} s"
                          + (": crops past the end are zero padding" if longer else ": the rest is never sampled"),
                          "regenerate the manifest from the files (stale after trimming or re-export)",
                          declared=said, actual=real))
    if "channels" in d and int(d["channels"]) != m.channels:
        out.append(_f("manifest.channels_mismatch", "warning", item,
                      f"the manifest says {d['channels']} channels, the file has {m.channels}",
                      "regenerate the manifest from the files", declared=d["channels"], actual=m.channels))
    return out


def _metadata(item: Item) -> list[Finding]:
    state = item.sidecar_state
    if state == "missing":
        return [
            _f(
                "metadata.missing",
                "warning",
                item,
                f"no sidecar {item.sidecar}: the example trains without its caption",
                "write the MusicInfo JSON beside the audio (same name, .json)",
                sidecar=item.sidecar,
            )
        ]
    if state.startswith("unreadable"):
        return [_f("metadata.missing", "error", item, f"sidecar {item.sidecar} is {state}",
                   "rewrite the sidecar as UTF-8 JSON", sidecar=item.sidecar)]
    if item.caption_error:
        return [_f("metadata.missing", "error", item, f"caption unreadable: {item.caption_error}",
                   "re-save the caption as UTF-8")]
    if item.missing_fields and state == "ok":
        return [
            _f(
                "metadata.missing",
                "error",
                item,
                f"sidecar lacks {', '.join(item.missing_fields)}: AudioCraft's MusicDataset "
                "(info_fields_required, its default) raises KeyError on it",
                "add the fields (empty values are allowed)",
                missing=item.missing_fields,
            )
        ]
    if item.missing_fields:
        return [
            _f(
                "metadata.missing",
                "warning",
                item,
                f"no {', '.join(item.missing_fields)} for this file",
                "add the file's row (file_name and caption) to metadata.csv/metadata.jsonl",
                missing=item.missing_fields,
            )
        ]
    return []


def _caption(item: Item, max_tokens: int | None) -> list[Finding]:
    c = item.caption
    if c is None:
        return []
    if not c.strip():
        return [_f("caption.empty", "warning", item, "the caption is empty: the example trains unconditionally",
                   "write a caption; leave unconditional training to the condition dropout")]
    n = caption_tokens(c)
    if max_tokens and n > max_tokens:
        return [_f("caption.truncated", "warning", item,
                   f"the caption has ≥ {n} tokens (words and punctuation; subword tokenizers count more), "
                   f"over the limit of {max_tokens}: its end is cut", "shorten it or raise the tokenizer's max length",
                   tokens=n, limit=max_tokens)]
    return []


def judge_item(item: Item, m: Measure | None, max_caption_tokens: int | None = None) -> list[Finding]:
    """Every per-example finding; a missing or unreadable file stops at that one."""
    if m is not None and m.problem:
        return _name(item) + _file(item, m)
    out = _name(item) + ([] if m is None else _container(item, m) + _audio(item, m) + _declared(item, m))
    return out + _metadata(item) + _caption(item, max_caption_tokens)


def judge_captions(items: Sequence[tuple[Item, str]], min_group: int = 3, share: float = 0.01) -> list[Finding]:
    """One caption on many different recordings (a placeholder, a template): `items` are (item, audio hash).

    Pieces of one recording count once (`checks.pieces`: the same source id, the same file, chunk
    files of one take): segments and chunks keep their recording's caption. Groups of at least
    max(min_group, share·N) recordings are a warning each; smaller ones one info; captions kept only
    by the pieces of one recording another info.
    """
    kept: list[tuple[Item, str]] = []
    seen: dict[str, set[str]] = defaultdict(set)
    for item, h in items:
        if item.caption and item.caption.strip():
            key = " ".join(item.caption.lower().split())
            if h and h in seen[key]:
                continue  # the same clip listed twice is not a caption problem
            seen[key].add(h)
            kept.append((item, key))
    named = [("id", i.source_id) if i.source_id else ("file", i.origin or i.path) if i.origin or i.path else None
             for i, _ in kept]
    groups: dict[str, list[Item]] = defaultdict(list)
    recordings: dict[str, set[str]] = defaultdict(set)
    for n, ((item, key), source) in enumerate(zip(kept, sources(named, [k for _, k in kept]))):
        groups[key].append(item)
        recordings[key].add(source or f"#{n}")
    limit = max(min_group, int(share * len(items)) + 1)
    out, small, pieces = [], [], []
    for key, members in groups.items():
        takes = len(recordings[key])
        cut = f" (pieces of {takes} recordings in {len(members)} clips)" if takes < len(members) else ""
        if takes >= limit:
            out.append(make("caption.duplicate", "warning", STAGE_DATASET,
                            f"{takes} different {'recordings' if cut else 'clips'} share the caption {key[:80]!r}"
                            f"{cut}, e.g. {', '.join(m.where for m in members[:3])}", CHECK,
                            hint="a caption that fits many clips describes none; write specific ones",
                            caption=key, count=takes, clips=len(members), paths=[m.ref for m in members]))
        elif takes > 1:
            small.append(members)
        elif len(members) > 1:
            pieces.append(members)
    if small:
        out.append(
            make(
                "caption.duplicate",
                "info",
                STAGE_DATASET,
                (f"1 caption is shared by {len(small[0])} clips, " if len(small) == 1 else
                 f"{len(small)} captions are each shared by a few clips (at most {max(map(len, small))}), ") +
                f"e.g. {small[0][0].where} and {small[0][1].where}",
                CHECK,
                hint="usually harmless for templated captions",
                groups=[[m.ref for m in g] for g in small[:200]],
            )
        )
    if pieces:
        out.append(make("caption.duplicate", "info", STAGE_DATASET,
                        f"{len(pieces)} caption{'s are' if len(pieces) > 1 else ' is'} each kept by the pieces of one "
                        f"recording ({sum(map(len, pieces))} clips: the same source id or file, or chunk files of one "
                        f"take), e.g. {pieces[0][0].where} and {pieces[0][1].where}", CHECK,
                        hint="nothing to change: segments and chunks of a recording share its caption",
                        groups=[[m.ref for m in g] for g in pieces[:200]]))
    return out
