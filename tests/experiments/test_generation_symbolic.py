"""The generation family on a pipeline that taps its symbolic ids `[B, T]` as `generation.tokens`."""

import pytest

pytest.importorskip("miditok")

from _symbolic_pipeline import SymbolicToy  # noqa: E402
from signalchain import tap  # noqa: E402


class TappingToy(SymbolicToy):
    """Taps what it generates, ids [B, T] (one stream), as symbolic pipelines do."""

    def generate(self, model, batch, sampling):
        return tap("generation.tokens", super().generate(model, batch, sampling), **self.meta)


@pytest.mark.slow
def test_tapped_symbolic_ids_are_read_as_one_stream():
    from signalchain.experiments.doctor import run_doctor

    r = run_doctor(TappingToy(), families=["generation"], budget="economy")
    assert [f for f in r.findings if f.id == "internal.check_failed"] == []
    assert "generation" in r.families
