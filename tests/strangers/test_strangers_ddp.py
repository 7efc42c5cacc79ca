"""The strangers' bed under `torchrun` (2 CPU ranks, gloo): the dreambooth Seq2SeqTrainer + LoRA script
and a hand-written DDP loop. Each job has a hard deadline and its whole process group is killed after
(`_rank_jobs.run_ranks`). Seed 0 on every run of the suite; `SIGNALCHAIN_STRANGERS_SEEDS=0,1,2` for all."""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("peft")

from strangers import _bed  # noqa: E402
from strangers._bed import assert_clean  # noqa: E402
from strangers.scripts import SCRIPTS  # noqa: E402

MODULES = {name: importlib.import_module(f"strangers.scripts.{name}") for name in SCRIPTS}
CASES = [(name, seed) for name, m in MODULES.items() if m.SLOW for seed in _bed.seeds(True)]


@pytest.mark.slow
@pytest.mark.parametrize("name,seed", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_a_clean_torchrun_stranger_gets_no_error_on_any_rank(tmp_path, name: str, seed: int) -> None:
    module = MODULES[name]
    run = _bed.timed(name, seed, lambda: module.main(seed, tmp_path))
    assert_clean(run, module)  # both ranks wrote their findings and trained (`ranks_run` reads each)
