"""Zoo members whose data follow the conventions of real music datasets, not the beds' own: segments
sampled from long files with AudioCraft's MusicInfo sidecars, a dreambooth set of long takes cut
into chunk files that keep their take's caption, and a ten-clip fine-tuning split drawn for
several epochs. The beds' models and losses are unchanged; only what the loader hands them is the
user's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from signalchain.integrations.hf_musicgen import Example
from signalchain.reference.config import RefConfig
from signalchain.reference.data import generate_clip
from signalchain.reference.hf import HFBedConfig
from signalchain.reference.pipeline import Batch

from ._member import member
from ._recipe import Recipe
from .hf import HFMember
from .reference import RefMember

__all__ = ["RefSegments", "HFOwnData", "musicinfo", "chunked_examples", "small_split"]

SR = 32000  # the rate the source files are stored at


def musicinfo(meta: dict[str, Any], i: int) -> dict[str, Any]:
    """An AudioCraft MusicInfo sidecar from a reference clip's metadata: every field present (the
    dataset requires them), some left empty as real sidecars leave them (no source id: MusicInfo has none)."""
    info = {k: v for k, v in meta.items() if k != "source_id"}
    info["name"] = f"take{i:03d}"
    if i % 3 == 1:
        info["keywords"] = ""
    if i % 4 == 2:
        info["moods"] = []
    if i % 5 == 3:
        info["title"], info["artist"], info["key"] = "", "", ""
    return info


class RefSegments(RefMember):
    """The reference model fed as AudioCraft's MusicDataset feeds MusicGen: the manifest lists long
    files, and each draw picks a file and a random `seek_time` and returns that segment with the
    file's MusicInfo and its SegmentInfo (`meta.path`, `seek_time`, `n_frames`, …)."""

    FILES = {"train": range(0, 10), "valid": range(10, 13)}
    SECONDS = 10.0
    COLLECTION = 4  # source files of their own, apart from the bed's clips

    def __init__(self, name: str, recipe: Recipe):
        super().__init__(name, RefConfig(), recipe)
        self._files: dict[int, dict[str, Any]] = {}

    def file(self, i: int) -> dict[str, Any]:
        """File `i` as the manifest and its sidecar describe it."""
        if i not in self._files:
            c = generate_clip(i, self.COLLECTION, SR, seconds=self.SECONDS)
            info = musicinfo(c.metadata, i)
            self._files[i] = {"audio": c.audio, "sample_rate": SR, "caption": info["description"],
                              "metadata": info, "path": f"/datasets/music/{info['name']}.wav"}
        return self._files[i]

    def segment(self, i: int, seek: float, seconds: float) -> tuple[np.ndarray, str, dict[str, Any]]:
        f = self.file(i)
        total = f["audio"].shape[-1]
        start, n = int(seek * SR), int(seconds * SR)
        audio = f["audio"][:, start : start + n]
        info = {**f["metadata"], "meta": {"path": f["path"], "duration": total / SR, "sample_rate": SR,
                                          "amplitude": None, "weight": None, "info_path": None},
                "seek_time": round(seek, 4), "n_frames": int(audio.shape[-1]), "total_frames": total,
                "sample_rate": SR, "channels": int(audio.shape[0])}
        return audio, f["caption"], info

    def _batch(self, picks: list[tuple[int, float, float]], seed: int) -> Batch:
        segs = [self.segment(i, seek, s) for i, seek, s in picks]
        return Batch([a for a, _, _ in segs], SR, [c for _, c, _ in segs], [m for _, _, m in segs], seed)

    def loader(self, split: str = "train", seed: int = 0) -> Iterator[Batch]:
        files = list(self.FILES["valid" if split in ("valid", "validation") else "train"])
        rng = np.random.default_rng([seed, 5])
        seg = self.cfg.segment_seconds
        while True:  # MusicDataset: a file drawn at random, then a seek inside it
            picks = [(files[int(rng.integers(len(files)))], float(rng.uniform(0, self.SECONDS - seg)), seg)
                     for _ in range(self.cfg.batch_size)]
            yield self._batch(picks, int(rng.integers(2**31)))

    def golden_batch(self, seed: int) -> Batch:
        """Segments of the first files, and the last file's 1.2 s tail (shorter than the crop: padding)."""
        rng = np.random.default_rng([seed, 9])
        seg = self.cfg.segment_seconds
        picks = [(i, float(rng.uniform(0, self.SECONDS - seg)), seg) for i in range(self.cfg.batch_size - 1)]
        return self._batch(picks + [(self.FILES["train"][-1], self.SECONDS - 1.2, 1.2)], seed)

    def splits(self) -> dict[str, list[dict[str, Any]]]:
        return {s: [self.file(i) for i in idx] for s, idx in self.FILES.items()}

    def training_examples(self) -> list[dict[str, Any]]:
        return self.splits()["train"]


def chunked_examples(takes: dict[str, range], seconds: float = 7.2, chunk: float = 2.0,
                     collection: int = 6) -> list[Example]:
    """Long takes cut into `chunk`-second files (the tail shorter), an audiofolder's rows: each chunk
    named `<take>_chunkNNN.wav` in its split's folder, `metadata.csv` holding `file_name` and `text`."""
    out = []
    for split, idx in takes.items():
        for t in idx:
            c = generate_clip(t, collection, SR, seconds=seconds)
            n = int(chunk * SR)
            for k, start in enumerate(range(0, c.audio.shape[-1], n)):
                name = f"{split}/take{t:02d}_chunk{k:03d}.wav"
                out.append(Example(np.ascontiguousarray(c.audio[:, start : start + n]), SR, c.caption,
                                   {"file_name": name, "text": c.caption}, None, f"/datasets/dreambooth/{name}",
                                   split))
    return out


def small_split(n: int = 12, seconds: float = 4.0, valid_every: int = 5, collection: int = 5) -> list[Example]:
    """`n` clips of one length (a user's own recordings, trimmed alike), every `valid_every`-th held out."""
    return [Example(c.audio, SR, c.caption, {"file_name": f"clip{i:02d}.wav", "text": c.caption}, None,
                    f"/datasets/mine/clip{i:02d}.wav", "valid" if i % valid_every == valid_every - 1 else "train")
            for i, c in enumerate(generate_clip(i, collection, SR, seconds=seconds) for i in range(n))]


class HFOwnData(HFMember):
    """The HF bed trained on data of the user's own (`examples`) instead of the bed's clips."""

    def __init__(self, name: str, recipe: Recipe, examples: list[Example], *, pretrained: bool = False):
        super().__init__(name, HFBedConfig(), recipe, pretrained=pretrained)
        self.examples = examples


@member("ref-segments", "reference", optimizer="adamw", lr=1e-3, data="audiocraft-segments")
def ref_segments() -> RefSegments:
    """AudioCraft's MusicDataset: ten 10 s files (three more for validation), each draw a random
    segment of a random file with the file's MusicInfo sidecar (some fields empty, as real sidecars
    leave them) and its SegmentInfo. Every segment of a file carries that file's description, so a
    loader's captions take ten values over many segments: the caption of a file is shared by its
    segments by design, and nothing is missing from the metadata."""
    return RefSegments("ref-segments", Recipe("adamw", lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01, clip=1.0))


@member("hf-chunks", "hf", optimizer="adamw", lr=1e-4, data="dreambooth-chunks")
def hf_chunks() -> HFOwnData:
    """A dreambooth set: seven 7.2 s takes cut into 2 s chunk files (the tail shorter) named
    `takeNN_chunkNNN.wav`, an audiofolder whose metadata.csv holds only `file_name` and `text`, six
    takes for training and one for validation (a take never straddles the split). Each chunk keeps
    its take's caption, as chunking scripts write them: four clips share every caption, and they are
    pieces of one recording."""
    return HFOwnData("hf-chunks", Recipe("adamw", lr=1e-4, betas=(0.9, 0.99), clip=1.0),
                     chunked_examples({"train": range(0, 6), "valid": range(6, 7)}))


@member("hf-ft-small", "hf", pretrained="hf", optimizer="adamw", lr=1e-4, data="ten-clip-split")
def hf_ft_small() -> HFOwnData:
    """The pretrained bed fine-tuned on a small set of its user's own: twelve 4 s recordings of
    another collection, ten for training and two held out, batch 4 at AdamW 1e-4. Eight batches
    draw 32 examples from ten: several epochs over a small split, which is how a small fine-tune
    trains, and every clip comes back as the split's size implies."""
    return HFOwnData("hf-ft-small", Recipe("adamw", lr=1e-4, betas=(0.9, 0.99), clip=1.0), small_split(),
                     pretrained=True)
