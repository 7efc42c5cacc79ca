"""The strangers' bed, clean: every in-process script × seed trains (all its optimizer steps, the
trainable weights moved, a finite loss) and signalchain says no error, no `internal.check_failed`, and
no warning outside the script's `ALLOWED` list. The multi-process scripts are in
`test_strangers_ddp.py`; the faults the bed must find are in `test_bed_can_fail.py`."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("peft")
pytest.importorskip("lightning")

from strangers import _bed  # noqa: E402
from strangers._bed import assert_clean, verdict  # noqa: E402
from strangers.scripts import SCRIPTS  # noqa: E402

HERE = Path(__file__).resolve().parent
MODULES = {name: importlib.import_module(f"strangers.scripts.{name}") for name in SCRIPTS}
CASES = [(name, seed) for name, m in MODULES.items() if not m.SLOW for seed in _bed.seeds(False)]


@pytest.mark.parametrize("name,seed", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_a_clean_stranger_gets_no_error_and_no_check_failed(tmp_path, name: str, seed: int) -> None:
    module = MODULES[name]
    run = _bed.timed(name, seed, lambda: module.main(seed, tmp_path))
    assert_clean(run, module)


def test_every_script_file_is_in_the_bed_and_each_allowance_says_why() -> None:
    files = {p.stem for p in (HERE / "scripts").glob("*.py") if not p.stem.startswith("_")}
    assert files == set(SCRIPTS) and len(SCRIPTS) >= 8
    for name, module in MODULES.items():
        assert module.IDIOM and isinstance(module.ALLOWED, dict), name
        assert all(isinstance(why, str) and len(why) > 20 for why in module.ALLOWED.values()), name
    assert len({m.IDIOM for m in MODULES.values()}) == len(MODULES)  # one public idiom each


def test_a_verdict_counts_what_fails_the_bed() -> None:
    """The rule the table and the tests share, on hand-made runs (so a silent bed cannot pass by a rule
    that sees nothing)."""
    def finding(fid: str, severity: str) -> dict:
        return {"id": fid, "severity": severity, "stage": "x", "message": "m", "evidence": {}}

    clean = _bed.Run("s", 0, [finding("optim.param_frozen", "info")])
    assert verdict(clean, {}) == []
    assert len(verdict(_bed.Run("s", 0, [finding("targets.misaligned", "error")]), {})) == 1
    assert len(verdict(_bed.Run("s", 0, [finding("internal.check_failed", "warning")]), {})) == 1
    warned = _bed.Run("s", 0, [finding("loss.spike", "warning")])
    assert len(verdict(warned, {})) == 1 and verdict(warned, {"loss.spike": "the user's lr is too high"}) == []
    assert len(verdict(_bed.Run("s", 0, [], error="ValueError: boom"), {})) == 1
