"""Negative control for pytorch/pytorch#5059: a dataset that draws with numpy's *global* functions
(`np.random.randint` in `__getitem__`), two DataLoader workers, no `worker_init_fn`.

This is the code of the thread, and it looked like a bug for years; since PyTorch 1.9 each worker
seeds numpy's global state from its own torch seed (`torch/utils/data/_utils/worker.py`), so the
workers draw different clips and crops. The innocent sign: the code has no `worker_init_fn` and
uses numpy randomness in the workers; the batches still differ. A detector must stay silent.
"""

from __future__ import annotations

import numpy as np
from torch.utils.data import Dataset

from real_bugs.bed import RealBug
from real_bugs.bugs import msg_worker_shared_rng as shared

BUG = RealBug(
    name="msg_worker_global_numpy_control", thread="https://github.com/pytorch/pytorch/issues/5059",
    library="torch", idiom="torch DataLoader, num_workers=2, np.random global calls in __getitem__",
    cls="control", kind="control",
    cause="numpy global randomness in DataLoader workers without worker_init_fn (innocent since PyTorch 1.9)",
    fix="nothing to fix", symptom="flat-loss", families=("data",))


class GlobalNumpyClips(Dataset):
    def __init__(self, n_clips: int, length: int, seed: int = 0):
        self.n_clips, self.length = n_clips, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[int, int]:
        return int(np.random.randint(self.n_clips)), int(np.random.randint(2**31 - 1))


class GlobalNumpyPipeline(shared.WorkerLoaderPipeline):
    def data_loader(self, seed: int = 0):
        loader = super().data_loader(seed)
        loader.dataset.__class__ = GlobalNumpyClips  # same loader, the thread's dataset
        return loader


def pipeline(fixed: bool = False) -> GlobalNumpyPipeline:
    return GlobalNumpyPipeline(fixed=False)


def shows(fixed: bool = False) -> tuple[bool, str]:
    p = pipeline()
    drawn = []
    for i, (indices, crop_seed) in enumerate(p.data_loader(0)):
        drawn.append((tuple(indices), crop_seed))
        if i == 3:
            break
    distinct = len(set(drawn))
    no_init = p.data_loader(0).worker_init_fn is None
    return no_init and distinct == len(drawn), (f"no worker_init_fn: {no_init}; {distinct} distinct batches of "
                                                f"{len(drawn)} from 2 workers")
