"""`judge_module_shares` / `judge_parameters`: the trainable share of each top-level module, read
from parameter records alone, and `trace.shifts.edge_delays` with the delay judge it feeds."""

from __future__ import annotations

import numpy as np

from signalchain.checks.data import judge_targets
from signalchain.checks.optimisation.modules import judge_module_shares, judge_parameters, top_modules
from signalchain.records.optimisation import GradientMeasurement, ParamGrad
from signalchain.trace import Trace, make_record
from signalchain.trace.shifts import edge_delays


def p(name: str, n: int, trainable: bool = True, shape: tuple[int, ...] = (), in_optimizer: bool = True) -> ParamGrad:
    return ParamGrad(name=name, module=name.rsplit(".", 1)[0], numel=n, requires_grad=trainable,
                     in_optimizer=in_optimizer, used=True, grad="ok", shape=shape or (n,))


def measured(params: list[ParamGrad]) -> GradientMeasurement:
    return GradientMeasurement(True, True, None, params, [], {}, [])


def test_wrappers_are_looked_through() -> None:
    root, groups = top_modules([p("base_model.model.decoder.w", 4), p("base_model.model.text.w", 4)])
    assert root == "base_model.model" and set(groups) == {"decoder", "text"}


def test_a_module_frozen_whole_is_info_and_a_sliver_is_a_warning() -> None:
    params = [p("codec.w", 1000, False), p("decoder.w", 9930, False), p("decoder.head", 70)]
    found = judge_module_shares(params)
    assert [(f.severity.value, f.evidence.get("role")) for f in found] == [("info", "frozen_modules"),
                                                                           ("warning", "partly_frozen")]
    assert found[1].evidence["module"] == "decoder" and round(found[1].evidence["trainable_share"], 3) == 0.007


def test_the_module_that_makes_the_logits_frozen_whole_is_a_warning() -> None:
    params = [p("text.w", 100), p("decoder.w", 1000, False)]
    found = judge_module_shares(params, lm="decoder")
    assert [f.evidence["role"] for f in found] == ["lm_frozen"] and found[0].severity.value == "warning"


def test_low_rank_pairs_make_a_frozen_base_info() -> None:
    params = [p("decoder.q.base", 64 * 64, False, (64, 64)), p("decoder.q.lora_A", 4 * 64, shape=(4, 64)),
              p("decoder.q.lora_B", 64 * 4, shape=(64, 4))]
    found = judge_module_shares(params)
    assert [(f.severity.value, f.evidence["role"]) for f in found] == [("info", "adapters")]


def test_parameters_missing_from_the_optimizer_and_all_frozen_are_errors() -> None:
    missing = judge_parameters(measured([p("a.w", 10), p("b.w", 10, in_optimizer=False)]))
    assert [f.id for f in missing] == ["optim.param_not_in_optimizer"]
    frozen = judge_parameters(measured([p("a.w", 10, False)]))
    assert [(f.id, f.severity.value) for f in frozen] == [("optim.param_frozen", "error")]


def pattern_mask(k: int, t: int, delays: list[int], tail: int = 0) -> np.ndarray:
    m = np.zeros((2, k, t + max(delays) + tail), bool)
    for j, d in enumerate(delays):
        m[:, j, d : d + t] = True
    return m


def test_edge_delays_read_a_pattern_and_refuse_a_story_the_edges_disagree_on() -> None:
    assert edge_delays(pattern_mask(4, 20, [0, 1, 2, 3])) == [0, 1, 2, 3]
    assert edge_delays(pattern_mask(4, 20, [0, 1, 2, 3], tail=5)) == [0, 1, 2, 3]  # padding after the clips
    assert edge_delays(pattern_mask(4, 20, [0, 0, 0, 0])) == [0, 0, 0, 0]
    odd = pattern_mask(4, 20, [0, 1, 2, 3])
    odd[:, 0, -1] = True  # codebook 0 ends late: the edges no longer agree
    assert edge_delays(odd) is None


def labels_trace(delays: list[int], model: list[int]) -> Trace:
    rng = np.random.default_rng(0)
    b, k, t = 2, 4, 30
    y = np.full((b, k, t + max(model)), -100)
    for j, d in enumerate(delays):
        y[:, j, d : d + t] = rng.integers(0, 64, (b, t))
    tr = Trace()
    tr.append(make_record("condition.tokens", 0, np.ones((b, 5), np.int64), {}, keep_value=True))
    tr.append(make_record("logits", 1, np.zeros((b * k, t + max(model), 64), np.float32), {}, keep_value=False))
    tr.append(make_record("targets", 2, y.transpose(0, 2, 1).copy(), {"ignore_index": -100, "model_delay": model},
                          keep_value=True))
    return tr


def test_labels_without_tokens_are_judged_against_the_model_delays() -> None:
    assert [f.id for f in judge_targets(labels_trace([0, 1, 2, 3], [0, 1, 2, 3])) if f.severity.value == "error"] == []
    wrong = [f for f in judge_targets(labels_trace([0, 0, 0, 0], [0, 1, 2, 3])) if f.id == "targets.misaligned"]
    assert wrong and wrong[0].evidence["pattern_delays"] == [0, 0, 0, 0]
