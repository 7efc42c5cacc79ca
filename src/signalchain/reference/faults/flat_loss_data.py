"""Loss does not decrease: what reaches the loss carries nothing to learn (causes 5 and 6, loaders).

Random, constant or misaligned targets; a loss mask that keeps almost nothing; a loader that
repeats one batch; tokens served from a cache that went stale. The optimisation-path causes are in
`flat_loss.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch

from .. import prep
from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import Batch, ReferencePipeline

SECTION = "Loss does not decrease"


# ---- 5. targets random, constant or misaligned ------------------------------------------------------

@fault("targets_random", "flat_loss", "the targets are random", SECTION,
       ["targets.random"], "targets", symptom="flat-loss")
def _targets_random(p: ReferencePipeline) -> None:
    corrupt_percent = 15  # a token-corruption augmentation: "replace 15 % of the codes"

    def targets_from(tokens: torch.Tensor) -> torch.Tensor:
        # Bug: the corruption rate is given in percent but compared with a probability in [0, 1)
        # (`rand < 15` is always true), and it is applied after the targets were split from the
        # inputs: every target is a uniformly random code. Seeded by the batch so runs repeat.
        g = torch.Generator().manual_seed(int(tokens.sum()))
        noise = torch.randint(0, p.codec.cardinality, tokens.shape, generator=g)
        return torch.where(torch.rand(tokens.shape, generator=g) < corrupt_percent, noise, tokens)

    p.targets_from = targets_from  # type: ignore[method-assign]


@fault("targets_codebook_index", "flat_loss", "the targets are constant", SECTION,
       ["targets.constant"], "targets", symptom="flat-loss")
def _targets_codebook_index(p: ReferencePipeline) -> None:
    def targets_from(tokens: torch.Tensor) -> torch.Tensor:
        card = p.codec.cardinality
        offsets = torch.arange(tokens.shape[1])[None, :, None] * card  # [1, K, 1]
        flat = tokens + offsets  # one shared vocabulary: id = k * card + code
        # Bug: the code is recovered with `//` (the codebook index) instead of `%`: every target
        # of codebook k is the constant k.
        return flat // card

    p.targets_from = targets_from  # type: ignore[method-assign]


@fault("targets_shifted_one_frame", "flat_loss", "the targets are misaligned in time", SECTION,
       ["targets.misaligned"], "targets", symptom="flat-loss")
def _targets_shifted_one_frame(p: ReferencePipeline) -> None:
    def targets_from(tokens: torch.Tensor) -> torch.Tensor:
        # Bug: the text-LM idiom `targets = x[..., 1:]` is applied on top of `compute_predictions`,
        # which already aligns logits[t] with codes[t]: the model is asked for frame t + 1 from a
        # prefix ending at t - 1 (the last frame is repeated to keep the length).
        return torch.cat([tokens[..., 1:], tokens[..., -1:]], dim=-1)

    p.targets_from = targets_from  # type: ignore[method-assign]


@fault("targets_delay_applied_twice", "flat_loss", "the targets are misaligned across codebooks",
       SECTION, ["targets.misaligned"], "targets", symptom="flat-loss")
def _targets_delay_applied_twice(p: ReferencePipeline) -> None:
    def targets_from(tokens: torch.Tensor) -> torch.Tensor:
        # Bug: the targets get the delay pattern again (with a wrapping `roll`), although the
        # logits were already reverted to frame order: codebook k's targets lag k frames behind
        # its predictions, and for k >= 1 they are codes the model has already been shown.
        return torch.stack([tokens[:, k].roll(k, dims=-1) for k in range(tokens.shape[1])], dim=1)

    p.targets_from = targets_from  # type: ignore[method-assign]


# ---- 6. the valid loss mask is nearly empty ---------------------------------------------------------

@fault("padding_mask_in_seconds", "flat_loss", "the valid loss mask is nearly empty", SECTION,
       ["mask.empty"], "mask.padding", symptom="flat-loss")
def _padding_mask_in_seconds(p: ReferencePipeline) -> None:
    def padding_mask(valid: np.ndarray, frames: int) -> torch.Tensor:
        # Bug: the valid length is converted to seconds instead of frames (divided by the sample
        # rate, not the hop), so a 2 s crop keeps frames 0 and 1 of 100: 2 % of the targets.
        n_valid = valid / p.cfg.sample_rate
        return torch.from_numpy(np.arange(frames)[None, :] < n_valid[:, None])

    p.padding_mask = padding_mask  # type: ignore[method-assign]


# ---- loaders: the same batch again, or tokens from a stale cache ----------------------------------

@fault("loader_repeats_batch", "flat_loss", "the data loader repeatedly returns the same batch",
       SECTION, ["loader.repeats"], "loader", symptom="flat-loss")
def _loader_repeats_batch(p: ReferencePipeline) -> None:
    def loader(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        indices = np.array(p.split_indices(split))
        while True:
            # Bug: the sampler's generator is re-created from the seed for every batch (as when a
            # loop calls `next(iter(loader))`): the same permutation, so the same first batch
            # with the same crops, every time.
            rng = np.random.default_rng(seed)
            order = rng.permutation(indices)
            yield p.make_batch(order[: p.cfg.batch_size].tolist(), seed=int(rng.integers(2**31)))

    p.loader = loader  # type: ignore[method-assign]


@fault("stale_token_cache", "flat_loss", "cached tokens are stale", SECTION,
       ["loader.stale_cache"], "tokens", symptom="flat-loss")
def _stale_token_cache(p: ReferencePipeline) -> None:
    load_clips, encode = p.load_clips, p.encode_tokens
    cache: dict[str, torch.Tensor] = {}  # clip id -> codes [K, F]
    current: list[tuple[str, np.ndarray]] = []  # (id, clip) of the batch being prepared

    def load(batch: Batch) -> list[np.ndarray]:
        clips = load_clips(batch)
        current[:] = [(str(m.get("source_id", i)), c) for i, (m, c) in enumerate(zip(batch.metadata, clips))]
        return clips

    def first_segment_tokens(clip: np.ndarray, frames: int) -> torch.Tensor:
        # What the offline preprocessing script encoded: the clip's first segment, crop start 0.
        audio, lengths = prep.collate([clip])
        audio, lengths = p.resample(audio, lengths, p.cfg.source_sample_rate, p.cfg.sample_rate)
        segment = frames * p.codec.hop
        cropped, _ = p.apply_crops(p.to_mono(audio), np.array([[0, segment]]), lengths)
        return encode(cropped)[0]

    def encode_tokens(cropped: np.ndarray) -> torch.Tensor:
        # Bug: tokens come from a cache precomputed offline by id, for each clip's first segment,
        # while the loader crops at random: every crop that does not start at 0 is trained on the
        # codes of other audio. The cache is keyed by the clip id only, not (id, crop).
        frames = p.codec.frames(cropped.shape[-1])
        codes = []
        for key, clip in current[: len(cropped)]:
            if key not in cache:
                cache[key] = first_segment_tokens(clip, frames)
            codes.append(cache[key])
        return torch.stack(codes)  # [B, K, F]

    p.load_clips = load  # type: ignore[method-assign]
    p.encode_tokens = encode_tokens  # type: ignore[method-assign]
