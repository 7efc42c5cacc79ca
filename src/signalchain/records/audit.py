"""What an audit knows about one example: where it comes from (`Item`) and what its audio is
(`Measure`). Readers fill items, measurement fills measures, judges read both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..audio.fingerprint import Fingerprint

__all__ = ["Item", "Measure", "STAGE_DATASET", "STAGE_SPLIT", "MUSICINFO_REQUIRED", "CAPTION_KEYS",
           "SOURCE_KEYS", "CACHE_KEYS"]

STAGE_DATASET = "dataset"
STAGE_SPLIT = "split"

#: Sidecar fields AudioCraft's MusicDataset requires when `info_fields_required` (its default) is on.
MUSICINFO_REQUIRED = ("title", "artist", "key", "bpm", "genre", "moods", "description", "name", "instrument")
#: Where a caption lives, in order of preference (AudioCraft: description; HF: text/caption).
CAPTION_KEYS = ("description", "caption", "text", "prompt")
#: Fields naming the recording an example was cut from.
SOURCE_KEYS = ("source_id", "source", "recording_id", "track_id", "song_id")
#: Fields pointing at precomputed features (token/feature caches).
CACHE_KEYS = ("features", "feature_path", "features_path", "cache", "cache_path", "tokens", "tokens_path",
              "codes", "codes_path", "embedding_path")


@dataclass
class Item:
    """One example as its manifest or folder describes it."""

    split: str
    ref: str  # what findings name: the audio path, or "split[index]" for in-memory clips
    path: str | None = None  # the audio file (None in memory)
    manifest: str | None = None
    line: int | None = None  # 1-based line of the manifest
    declared: dict[str, Any] = field(default_factory=dict)  # duration, sample_rate, channels
    caption: str | None = None  # None: no caption anywhere
    caption_error: str | None = None  # e.g. "not UTF-8 at byte 12"
    sidecar: str | None = None  # AudioCraft sidecar path (<audio>.json) when the format has one
    sidecar_state: str = "n/a"  # "ok", "missing", "unreadable: why", "n/a"
    missing_fields: list[str] = field(default_factory=list)
    source_id: str | None = None
    title: str | None = None
    artist: str | None = None
    cache_refs: list[str] = field(default_factory=list)  # resolved paths of cached features
    cache_hashes: list[str] = field(default_factory=list)
    name_note: str | None = None  # why the file's name itself is a problem (not UTF-8)
    origin: str | None = None  # the file a piece was cut from, where an in-memory record names it

    @property
    def where(self) -> str:
        """The path and, when it came from a manifest, the line."""
        if self.manifest and self.line:
            return f"{self.ref} ({self.manifest}:{self.line})"
        return self.ref

    def take_metadata(self, meta: dict[str, Any]) -> None:
        """Fill caption, source, title, artist and cache references from a metadata dict."""
        if self.caption is None:
            for key in CAPTION_KEYS:
                if key in meta and meta[key] is not None:
                    value = meta[key]
                    self.caption = " ".join(map(str, value)) if isinstance(value, list) else str(value)
                    break
        if self.source_id is None:
            self.source_id = next((str(meta[k]) for k in SOURCE_KEYS if meta.get(k) not in (None, "")), None)
        if self.title is None and meta.get("title"):
            self.title = str(meta["title"])
        if self.artist is None and meta.get("artist"):
            self.artist = str(meta["artist"])


@dataclass
class Measure:
    """What decoding the audio showed. `problem` set: nothing else is meaningful."""

    # "missing[: why]", "unreadable: why", "empty: why", "not regular: why", "sample rate: why"
    problem: str | None = None
    sample_rate: int = 0
    channels: int = 0
    samples: int = 0
    summary: dict[str, Any] = field(default_factory=dict)  # stats.audio_example_summary
    total: float = 0.0  # sum of the mono samples (float64), for normalisation statistics
    total_sq: float = 0.0
    audio_hash: str = ""
    frames_claimed: int = 0  # what the header claims, when more than `samples` decoded (else 0)
    read_error: str | None = None  # why decoding stopped before the end the header claims
    fp: Fingerprint | None = None

    @property
    def seconds(self) -> float:
        return self.samples / self.sample_rate if self.sample_rate else 0.0

    def scalars(self) -> dict[str, Any]:
        """Everything but the fingerprint arrays, as plain JSON (for the cache and the report)."""
        return {"problem": self.problem, "sample_rate": self.sample_rate, "channels": self.channels,
                "samples": self.samples, "summary": self.summary, "total": self.total,
                "total_sq": self.total_sq, "audio_hash": self.audio_hash, "frames_claimed": self.frames_claimed,
                "read_error": self.read_error}
