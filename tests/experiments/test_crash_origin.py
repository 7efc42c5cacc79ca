"""Whose exception is it (experiments/_crash.py): an op the pipeline calls that raises while one of
signalchain's torch modes relays it is the pipeline's crash (pipeline.step_failed), not a check that
crashed (HF bed fault `minus100_decoder_inputs`: an embedding given -100 under the gradient-reach
probe's GraphWatch)."""

import torch

from signalchain.experiments._crash import crash_finding
from signalchain.probes.graph_watch import GraphWatch


def users_step(ids: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding(ids, torch.zeros(4, 2))


def test_an_op_raising_under_a_relaying_torch_mode_is_the_pipelines_crash():
    try:
        with GraphWatch():
            users_step(torch.tensor([0, -100]))
    except Exception as exc:  # the user's IndexError, seen through our mode's frame
        f = crash_finding("optimisation.gradients", exc)
    assert f.id == "pipeline.step_failed" and "test_crash_origin.py" in f.message


def test_an_exception_in_signalchains_own_code_stays_ours():
    try:
        crash_finding("x", None)  # type: ignore[arg-type]  # our code raising on a bad argument
    except Exception as exc:
        f = crash_finding("optimisation.gradients", exc)
    assert f.id == "internal.check_failed"
