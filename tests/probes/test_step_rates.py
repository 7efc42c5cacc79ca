"""`StepRates` in a group too large to measure whole: every small tensor (norm gains, biases) is still
measured, so a tensor whose update rounds away is told from a skipped step in a large model too."""

from __future__ import annotations

import torch

from signalchain.probes.step_rates import MAX_TENSORS, SMALL_TENSOR, VALUE_BUDGET, StepRates

torch.set_num_threads(1)


def test_a_gain_whose_update_rounds_away_is_measured_in_a_large_group() -> None:
    big = [torch.nn.Parameter(torch.randn(VALUE_BUDGET // 4) * 0.02) for _ in range(5)]  # over the budget
    gains = [torch.nn.Parameter(torch.ones(64)) for _ in range(2 * MAX_TENSORS)]  # more than the spread takes
    params = big + gains
    names = {id(q): f"p{i}" for i, q in enumerate(params)}
    opt = torch.optim.SGD(params, lr=1e-3)
    with StepRates(opt, names).attached_to() as probe:
        for q in big:
            q.grad = torch.randn_like(q)
        for q in gains:
            q.grad = torch.full_like(q, 1e-9)  # lr·|g| = 1e-12, below half an ulp of 1.0 (6e-8)
        opt.step()
    assert all(g.numel() <= SMALL_TENSOR for g in gains)
    assert probe.accs[0].rec.sampled < sum(q.numel() for q in params)  # the group is sampled...
    stuck = {names[id(q)] for q in gains}
    assert set(probe.below_resolution()) == stuck  # ...yet every gain is measured, and only they round away
