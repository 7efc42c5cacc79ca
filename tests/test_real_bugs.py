"""The real-bug bed's fast subset (benchmarks/real_bugs, `make real-bugs` runs the whole bed): each
bug's symptom check separates it from its twin, the twin gets no error, a control stays clean, and
the bugs found at the right stage stay found. The bed's detectors see only the pipelines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from real_bugs.bed import module, run_job, score  # noqa: E402
from real_bugs.bugs import NAMES  # noqa: E402

FAST = [n for n in NAMES if module(n).BUG.fast]
#: fast bugs signalchain names at the right stage today: a regression there fails the test
FOUND = {"data_int16_pcm_unscaled", "data_rate_not_resampled", "declared_pad_is_eos_masks_eos",
         "data_channels_last_downmix"}


def test_the_bed_holds_enough_real_bugs_each_with_a_thread() -> None:
    bugs = [module(n).BUG for n in NAMES]
    assert len(bugs) >= 36 and sum(b.kind == "control" for b in bugs) >= 5
    assert all(b.thread.startswith("https://") for b in bugs)
    assert len({b.name for b in bugs}) == len(bugs) == len(set(NAMES))


@pytest.mark.parametrize("name", FAST)
def test_a_fast_real_bug(name: str) -> None:
    bug = module(name).BUG
    run = run_job(name, False, 0)
    twin = run_job(name, True, 0) if bug.kind == "bug" else None
    o = score(bug, run, twin)
    assert not o.problems, o.problems
    if bug.kind == "control":
        assert o.result == "clean", o.ids
        return
    assert o.twin == "clean", o.twin_ids
    if name in FOUND:
        assert o.result == "found", o.ids
