"""DataLoader workers that each start from a copy of one numpy random generator: worker 0 and
worker 1 draw the same "random" clips and crops, so consecutive batches are identical.

pytorch/pytorch#5059: a dataset whose `__getitem__` draws with numpy gives the same random numbers
in every DataLoader worker (each worker is a fork of the same process, with the same RNG state).
Since PyTorch 1.9 the workers reseed numpy's *global* state, but a generator the dataset holds
itself (`self.rng = np.random.default_rng(seed)`, the modern idiom, or MONAI's `self.R`) is copied
into every worker unchanged: the thread's situation, in today's code. The fix the thread gives: a
`worker_init_fn` that reseeds from the worker's torch seed (`get_worker_info().seed`).

Reproduced in an AudioCraft-style sampler (each item is a random clip and a random crop, the
index ignored) over the reference clips, two workers, batches made in the main process.

What the message should say (class "messages"): `loader.repeats` names the loader, but its hint
("the iterator is re-created every step or returns a cached batch") sends the user to their loop.
It should say: "the identical batches alternate with the number of workers (batch i equals batch
i + 1 with 2 workers): the workers share one random state; seed each worker's generator in
`worker_init_fn` from `torch.utils.data.get_worker_info().seed`".
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

WORKERS = 2

BUG = RealBug(
    name="msg_worker_shared_rng", thread="https://github.com/pytorch/pytorch/issues/5059",
    library="torch", idiom="torch DataLoader, num_workers=2, random-sampling dataset with its own numpy Generator",
    cls="messages",
    cause="every worker forks the dataset with the same numpy Generator state: the workers draw the same clips "
          "and crops, so batch 0 (worker 0) equals batch 1 (worker 1)",
    fix="worker_init_fn that reseeds the dataset's generator from get_worker_info().seed",
    stages=("loader",), cause_ids=("loader.worker_seed", "loader.repeats"), symptom="flat-loss",
    families=("data",))


class RandomClips(Dataset):
    """AudioCraft-like random sampling: each item is (a random clip of the split, a random crop seed)."""

    def __init__(self, n_clips: int, length: int, seed: int = 0):
        self.n_clips, self.length = n_clips, length
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[int, int]:
        return int(self.rng.integers(self.n_clips)), int(self.rng.integers(2**31))


def reseed_worker(worker_id: int) -> None:
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)  # the worker's own torch-made seed


def collate(items):
    return [i for i, _ in items], items[0][1]


class WorkerLoaderPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def data_loader(self, seed: int = 0) -> DataLoader:
        ds = RandomClips(self.cfg.train_size, length=64 * self.cfg.batch_size, seed=seed)
        g = torch.Generator().manual_seed(seed)
        return DataLoader(ds, batch_size=self.cfg.batch_size, num_workers=WORKERS, collate_fn=collate,
                          worker_init_fn=reseed_worker if self.fixed else None, generator=g,
                          multiprocessing_context="fork")

    def loader(self, split: str = "train", seed: int = 0):
        while True:
            for indices, crop_seed in self.data_loader(seed):
                yield self.make_batch(indices, seed=crop_seed)


def pipeline(fixed: bool) -> WorkerLoaderPipeline:
    return WorkerLoaderPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    drawn = []
    for i, (indices, crop_seed) in enumerate(p.data_loader(0)):
        drawn.append((tuple(indices), crop_seed))
        if i == 3:
            break
    pairs = [(i, i + 1) for i in range(0, len(drawn) - 1, WORKERS) if drawn[i] == drawn[i + 1]]
    return bool(pairs), f"identical consecutive batches {pairs} of {len(drawn)}; first clips {[d[0][:3] for d in drawn]}"
