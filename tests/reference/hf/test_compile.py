"""The compile family on the hf bed: nothing is compiled there, and the family says so (info), never
a healthy verdict and never a warning."""

from __future__ import annotations

from signalchain.experiments.doctor import run_doctor


def test_the_compile_family_says_not_compiled(bed) -> None:
    r = run_doctor(bed, families=["compile"])
    assert [(f.id, f.severity.value) for f in r.findings] == [("perf.not_compiled", "info")]
    assert r.steps["compile"]["watch"]["status"] == "skipped"  # not evidence of anything (verify reads this)
