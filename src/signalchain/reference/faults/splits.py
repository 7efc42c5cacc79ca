"""Suspiciously good validation results: eight ways the validation data leak into training.

The clean reference splits by clip: rows [0, train_size) train, the next valid_size rows validate,
every clip its own source. Each fault below reproduces one way real splits go wrong. Where a fault
leaks part of the validation set, it is every second validation clip (row j = 0, 2, 4…): a partial
leak, as it usually is, so the leaked and the clean clips sit side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import soxr

from ..data import INSTRUMENTS, Clip, generate_clip, source_id
from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import Batch, ReferencePipeline

FAMILY = "splits"
SECTION = "Suspiciously good validation results"
VERSION_KEYS = ("tempo", "key_root", "mode", "instrument", "pattern", "register", "dynamics", "drums")


def _leaked_row(p: ReferencePipeline, index: int) -> int | None:
    """Row j of the validation split when clip `index` is one of the leaked ones, else None."""
    j = index - p.cfg.train_size
    return j if 0 <= j < p.cfg.valid_size and j % 2 == 0 else None


def _source_of(p: ReferencePipeline, j: int, salt: int) -> int:
    """The training clip that validation row j copies (spread over the training split)."""
    return (7 * j + salt) % p.cfg.train_size


def _renamed(clip: Clip, audio: np.ndarray, new_id: str, **attributes: Any) -> Clip:
    """`clip` under another id (a re-upload, a remaster, a segment): same description, new name."""
    metadata = {**clip.metadata, "name": new_id, "source_id": new_id}
    return Clip(audio=np.ascontiguousarray(audio, dtype=np.float32), sample_rate=clip.sample_rate,
                caption=clip.caption, metadata=metadata, attributes={**clip.attributes, **attributes},
                source_id=new_id)


ClipFn = Callable[[int, int], Clip]


def _replace_clips(p: ReferencePipeline, make: Callable[[ClipFn, int, int], Clip | None]) -> None:
    """Set `p.clip` to `make(clean_clip, index, seed)` (None: the clean clip), cached per clip."""
    clean: ClipFn = p.clip
    cache: dict[tuple[int, int], Clip] = {}

    def clip(index: int, seed: int = 0) -> Clip:
        key = (index, seed)
        if key not in cache:
            cache[key] = make(clean, index, seed) or clean(index, seed)
        return cache[key]

    p.clip = clip  # type: ignore[method-assign]


def _shuffled_batches(p: ReferencePipeline, indices: Sequence[int], seed: int) -> Iterator[Batch]:
    """The loader's sampler (shuffle every epoch, drop the last partial batch) over `indices`."""
    rows = np.asarray(indices)
    rng = np.random.default_rng(seed)
    epoch = 0
    while True:
        order = rng.permutation(rows)
        for start in range(0, len(order) - p.cfg.batch_size + 1, p.cfg.batch_size):
            yield p.make_batch(order[start : start + p.cfg.batch_size].tolist(),
                               seed=int(rng.integers(2**31)) + epoch)
        epoch += 1


# ---- the same material on both sides ------------------------------------------------------------

@fault("split_shared_source", FAMILY, "source ids across splits: two segments of one recording, one per split",
       SECTION, ["split.shared_id"], "split", symptom="too-good-validation")
def _split_shared_source(p: ReferencePipeline) -> None:
    def segment(clean: ClipFn, index: int, seed: int) -> Clip | None:
        j = _leaked_row(p, index)
        # Bug: recordings are cut into two segments (one manifest row each) and the split assigns
        # rows, not sources: the first half of a recording trains, its second half validates.
        if j is not None and j < p.cfg.train_size:
            source, part = j, 1
        elif index < min(p.cfg.valid_size, p.cfg.train_size) and index % 2 == 0:
            source, part = index, 0
        else:
            return None
        whole = clean(source, seed)
        mid = whole.audio.shape[-1] // 2
        audio = whole.audio[:, :mid] if part == 0 else whole.audio[:, mid:]
        # A segment keeps its recording's source id (that is the point of the id); only the
        # row's name says which part it is.
        seg = _renamed(whole, audio, whole.source_id, seconds=round(audio.shape[-1] / whole.sample_rate, 2))
        seg.metadata["name"] = f"{whole.source_id}-seg{part}"
        return seg

    _replace_clips(p, segment)


@fault("split_exact_duplicates", FAMILY, "duplicate clusters: byte-identical clips under different ids in both splits",
       SECTION, ["split.duplicate"], "split", symptom="too-good-validation")
def _split_exact_duplicates(p: ReferencePipeline) -> None:
    def reupload(clean: ClipFn, index: int, seed: int) -> Clip | None:
        j = _leaked_row(p, index)
        if j is None:
            return None
        # Bug: two catalogues were merged without deduplication; the same recordings appear under
        # new ids, and splitting by id sends one copy to each side.
        original = clean(_source_of(p, j, 0), seed)
        return _renamed(original, original.audio.copy(), source_id(index, seed))

    _replace_clips(p, reupload)


@fault(
    "split_near_duplicates",
    FAMILY,
    "near-duplicate clusters: the same clip re-gained, shifted, noised or resampled",
    SECTION,
    ["split.near_duplicate"],
    "split",
    symptom="too-good-validation",
)
def _split_near_duplicates(p: ReferencePipeline) -> None:
    def variant(clean: ClipFn, index: int, seed: int) -> Clip | None:
        j = _leaked_row(p, index)
        if j is None:
            return None
        # Bug: the collection holds remasters and re-encodes of its own clips (a gain change, a
        # few milliseconds of extra lead-in, a noisier transfer, a trip through 22.05 kHz) under
        # new ids; exact-hash deduplication misses them and the split puts them on both sides.
        original = clean(_source_of(p, j, 3), seed)
        x, sr = original.audio.astype(np.float64), original.sample_rate
        kind = (j // 2) % 4
        if kind == 0:
            y = x * 10 ** (-3 / 20)
        elif kind == 1:
            shift = int(0.01 * sr)
            y = np.concatenate([np.zeros((x.shape[0], shift)), x[:, :-shift]], axis=1)
        elif kind == 2:
            rms = float(np.sqrt(np.mean(x**2)))
            y = x + np.random.default_rng([seed, index, 3]).normal(0.0, rms * 10 ** (-40 / 20), x.shape)
        else:
            there = soxr.resample(x.T, sr, 22050)
            y = soxr.resample(there, 22050, sr).T
            y = np.pad(y, ((0, 0), (0, max(0, x.shape[1] - y.shape[1]))))[:, : x.shape[1]]
        return _renamed(original, y, source_id(index, seed))

    _replace_clips(p, variant)


@fault(
    "split_overlapping_windows",
    FAMILY,
    "overlapping windows: a long recording cut into overlapping windows before splitting",
    SECTION,
    ["split.overlapping_windows"],
    "split",
    symptom="too-good-validation",
)
def _split_overlapping_windows(p: ReferencePipeline) -> None:
    window_s, hop_s, per_source = 3.0, 1.5, 3  # 6 s recordings -> windows at 0, 1.5 and 3 s
    sources: dict[tuple[int, int], Clip] = {}

    def window(clean: ClipFn, index: int, seed: int) -> Clip | None:
        rows = p.cfg.train_size + p.cfg.valid_size
        if index >= rows:
            return None
        # Bug: every recording is cut into 3 s windows with a 1.5 s hop *before* the split, each
        # window written as its own file with its own id, then the rows are shuffled and split:
        # neighbouring windows, which share 1.5 s of audio, land on both sides.
        row = int(np.random.default_rng([seed, rows, 4]).permutation(rows)[index])
        source, w = divmod(row, per_source)
        if (source, seed) not in sources:
            sources[source, seed] = generate_clip(source, seed, p.cfg.source_sample_rate,
                                                  seconds=window_s + hop_s * (per_source - 1))
        whole = sources[source, seed]
        start = int(w * hop_s * whole.sample_rate)
        audio = whole.audio[:, start : start + int(window_s * whole.sample_rate)]
        return _renamed(whole, audio.copy(), f"{whole.source_id}-w{w}", seconds=window_s)

    _replace_clips(p, window)


@fault("split_alternate_versions", FAMILY, "alternate arrangements or performances of one piece in both splits",
       SECTION, ["split.alternate_version"], "split", symptom="too-good-validation")
def _split_alternate_versions(p: ReferencePipeline) -> None:
    def other_version(clean: ClipFn, index: int, seed: int) -> Clip | None:
        j = _leaked_row(p, index)
        if j is None:
            return None
        # Bug: the catalogue holds several versions of a piece (another take: new tempo within
        # the same feel, new length and mix; or another arrangement: a different instrument).
        # They are different recordings with their own ids, so an id split keeps both.
        piece = clean(_source_of(p, j, 5), seed)
        same = {k: piece.attributes[k] for k in VERSION_KEYS}
        if j % 4 == 2:  # an arrangement for another instrument
            same["instrument"] = INSTRUMENTS[(INSTRUMENTS.index(same["instrument"]) + 1) % len(INSTRUMENTS)]
        version = generate_clip(index, seed, p.cfg.source_sample_rate, attributes=same)
        version.metadata["title"] = piece.metadata["title"]  # same work, same artist
        version.metadata["artist"] = piece.metadata["artist"]
        return version

    _replace_clips(p, other_version)


# ---- leaks through processing: a cache, statistics, a sampler ----------------------------------

@fault("valid_reads_presplit_cache", FAMILY, "cached features created before splitting",
       SECTION, ["split.cache_before_split"], "split", symptom="too-good-validation")
def _valid_reads_presplit_cache(p: ReferencePipeline) -> None:
    def loader(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        indices = p.split_indices(split)
        # Bug: decoded examples were cached for the whole collection before the split, in
        # collection order, and a split reads `cache[j]` for its j-th example (its position)
        # instead of the example's own row. Training's rows come first, so training is right;
        # the validation loader reads training examples 0..valid_size-1 and scores the model on
        # data it trains on. The split lists themselves (`splits()`) are correct.
        return _shuffled_batches(p, range(len(indices)), seed)

    p.loader = loader  # type: ignore[method-assign]


@fault("norm_fitted_on_all", FAMILY, "normalisation statistics fitted on all data, validation included",
       SECTION, ["split.norm_fitted_on_all"], "split", symptom="too-good-validation")
def _norm_fitted_on_all(p: ReferencePipeline) -> None:
    target_rms = 0.1  # the working level the standardised audio is brought to (-20 dBFS)
    stats: list[float] = []

    def fit() -> tuple[float, float]:
        if not stats:
            # Bug: the waveform statistics are computed over every clip of the collection before
            # the split (train and valid rows alike): the mean and spread of the validation audio
            # shape what the model trains on.
            rows = [*p.split_indices("train"), *p.split_indices("valid")]
            x = np.concatenate([p.clip(int(i)).audio.mean(axis=0, dtype=np.float64) for i in rows])
            stats.extend([float(x.mean()), float(x.std())])
        return stats[0], stats[1]

    def normalize(audio: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        mean, std = fit()
        out = audio.copy()
        for i, n in enumerate(lengths):  # padding stays digital silence
            out[i, :, :n] = (audio[i, :, :n] - mean) * (target_rms / std)
        return out

    p.normalize = normalize  # type: ignore[method-assign]


@fault("sampler_includes_valid", FAMILY, "validation examples accidentally included in the training sampler",
       SECTION, ["split.sampler_includes_eval"], "split", symptom="too-good-validation")
def _sampler_includes_valid(p: ReferencePipeline) -> None:
    def loader(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        indices = p.split_indices(split)
        if split == "train":
            # Bug: the training sampler is built over `range(len(dataset))` of the unsplit
            # dataset instead of the training subset's indices: every epoch also trains on the
            # validation clips. The split lists (`splits()`) are correct.
            indices = range(p.cfg.train_size + p.cfg.valid_size)
        return _shuffled_batches(p, indices, seed)

    p.loader = loader  # type: ignore[method-assign]
