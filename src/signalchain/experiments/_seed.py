"""Seed every random source a pipeline may draw from, so a step can be replayed exactly."""

from __future__ import annotations

import random

import numpy as np

__all__ = ["seed_everything"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    import torch

    torch.manual_seed(seed)
