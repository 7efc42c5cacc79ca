"""Testing helpers for a user's CI: the golden batch as a regression test.

    from signalchain.testing import assert_matches_golden

    def test_pipeline_matches_golden():
        assert_matches_golden("mypkg.pipeline:make", "tests/golden/mypkg")

Under pytest, `--signalchain-update` refreshes the goldens on purpose and the `signalchain_golden`
fixture is the same check bound to that flag (`signalchain.integrations.pytest_plugin`). Importing
this module does not import torch: the pipeline's code does, when a check runs.
"""

from __future__ import annotations

from .golden import Tolerance, dtype_tolerance, stage_tolerances, suggest_tolerances
from .integrations.golden_assert import GoldenChecker, assert_matches_golden

__all__ = ["GoldenChecker", "Tolerance", "assert_matches_golden", "dtype_tolerance", "stage_tolerances",
           "suggest_tolerances"]
