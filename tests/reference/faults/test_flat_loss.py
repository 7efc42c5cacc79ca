"""The flat-loss faults of the optimisation path: each cuts one link, and the cut is measured.

Every symptom is read directly (parameters before and after an update, gradients after backward,
optimiser groups, taps, loss curves) against the clean pipeline, never through a detector.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from signalchain import record, tap
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import catalogue, get_fault
from signalchain.trace.vocabulary import stage_info

torch.set_num_threads(1)

SMALL = RefConfig(batch_size=4, segment_seconds=1.0, dim=64, layers=1, warmup_steps=1)
NAMES = {"lr_too_small", "params_frozen", "optimizer_before_heads_replaced", "param_groups_miss_matrices",
         "zero_grad_before_step", "embeddings_detached", "logits_detached", "grad_accumulation_never_steps",
         "mask_all_padding", "loss_from_targets", "stale_hidden_cache", "condition_cast_to_ids_dtype",
         "hidden_numpy_roundtrip", "model_too_small", "bottleneck_width_one"}
RAISES_ON_BACKWARD = {"logits_detached"}
# None of these faults touches the data, so one golden batch serves them all (clips are costly).
GOLDEN = ReferencePipeline(SMALL).golden_batch(0)


def _setup(*faults: str, cfg: RefConfig = SMALL) -> tuple[ReferencePipeline, Any, Any, Any]:
    p = ReferencePipeline(cfg, faults=list(faults))
    model = p.build_model(0)
    return p, model, p.build_optimizer(model), GOLDEN


def _losses(p: ReferencePipeline, model: Any, opt: Any, batch: Any, n: int) -> list[float]:
    return [float(p.train_step(model, opt, batch).loss.detach()) for _ in range(n)]


def _snapshot(model: Any) -> dict[str, torch.Tensor]:
    return {n: q.detach().clone() for n, q in model.named_parameters()}


def _changed(model: Any, before: dict[str, torch.Tensor]) -> set[str]:
    return {n for n, q in model.named_parameters() if n in before and not torch.equal(before[n], q.detach())}


def _grads_after_backward(p: ReferencePipeline, model: Any, batch: Any) -> dict[str, torch.Tensor | None]:
    model.zero_grad(set_to_none=True)
    p.step(model, batch).loss.backward()
    return {n: q.grad for n, q in model.named_parameters()}


@pytest.fixture(scope="module")
def clean_curve() -> list[float]:
    p, model, opt, batch = _setup()
    return _losses(p, model, opt, batch, 15)


# ---- registration -----------------------------------------------------------------------------

def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    registered = {f.name for f in catalogue("flat_loss")}
    assert NAMES <= registered
    for name in NAMES:
        f = get_fault(name)
        assert f.family == "flat_loss" and f.section == "Loss does not decrease"
        assert f.expected_ids and all(i.count(".") >= 1 and i == i.lower() for i in f.expected_ids)
        assert stage_info(f.expected_stage) is not None, f.expected_stage
        assert f.symptom == "flat-loss" and f.cause


@pytest.mark.parametrize("name", sorted(NAMES))
def test_fault_builds_and_steps_as_the_real_bug_would(name: str) -> None:
    p, model, opt, batch = _setup(name)
    out = p.step(model, batch)
    assert out.logits.shape[:3] == out.targets.shape
    if name in RAISES_ON_BACKWARD:
        with pytest.raises(RuntimeError, match="does not require grad"):
            p.train_step(model, opt, batch)
    else:
        p.train_step(model, opt, batch)


# ---- 1. learning rate too small -----------------------------------------------------------------

def test_lr_too_small_trains_at_rate_zero(clean_curve: list[float]) -> None:
    """The scaling rule's integer division makes the rate 0: every update leaves every weight as it was."""
    p, model, opt, batch = _setup("lr_too_small")
    assert SMALL.lr > 0 and SMALL.batch_size < 256
    assert all(g["initial_lr"] == 0.0 and g["lr"] == 0.0 for g in opt.param_groups)
    before = _snapshot(model)
    curve = _losses(p, model, opt, batch, 4)
    assert _changed(model, before) == set() and curve[0] == curve[-1]
    assert clean_curve[0] - clean_curve[7] > 0.5


# ---- 2. frozen / absent parameters --------------------------------------------------------------

def test_params_frozen_leaves_the_language_model_untouched() -> None:
    p, model, opt, batch = _setup("params_frozen")
    trainable = {n for n, q in model.named_parameters() if q.requires_grad}
    assert trainable and all(n.startswith("text_encoder.") for n in trainable)
    frozen_share = 1 - sum(q.numel() for q in model.parameters() if q.requires_grad) / model.num_parameters()
    assert frozen_share > 0.5
    before = _snapshot(model)
    p.train_step(model, opt, batch)
    assert not any(n.startswith(("heads.", "blocks.", "embeddings.")) for n in _changed(model, before))
    clean_p, clean_model, clean_opt, _ = _setup()
    before = _snapshot(clean_model)
    clean_p.train_step(clean_model, clean_opt, batch)
    assert any(n.startswith("heads.") for n in _changed(clean_model, before))


def _optimised(opt: Any) -> set[int]:
    return {id(q) for g in opt.param_groups for q in g["params"]}


def test_heads_replaced_after_the_optimizer_get_gradients_but_never_move() -> None:
    p, model, opt, batch = _setup("optimizer_before_heads_replaced")
    heads = list(model.heads.parameters())
    assert not any(id(q) in _optimised(opt) for q in heads)
    before = _snapshot(model)
    p.step(model, batch).loss.backward()
    assert all(q.grad is not None and q.grad.abs().sum() > 0 for q in heads)
    opt.step()
    assert not any(n.startswith("heads.") for n in _changed(model, before))
    _, clean_model, clean_opt, _ = _setup()
    assert all(id(q) in _optimised(clean_opt) for q in clean_model.parameters())


def test_param_groups_miss_every_matrix() -> None:
    p, model, opt, batch = _setup("param_groups_miss_matrices")
    held = _optimised(opt)
    matrices = [q for q in model.parameters() if q.dim() == 2]
    assert matrices and not any(id(q) in held for q in matrices)
    before = _snapshot(model)
    p.train_step(model, opt, batch)
    changed = _changed(model, before)
    assert changed and all(dict(model.named_parameters())[n].dim() != 2 for n in changed)


# ---- 3. gradients zero, missing, detached ---------------------------------------------------------

def test_zero_grad_before_step_means_no_update_and_a_zero_grad_norm() -> None:
    p, model, opt, batch = _setup("zero_grad_before_step")
    before = _snapshot(model)
    with record(values=True) as t:
        out = p.train_step(model, opt, batch, tap)
    assert float(t.value("grad.norm")) == 0.0 and out.extras["grad_norm"] == 0.0
    assert all(q.grad is None for q in model.parameters())
    assert _changed(model, before) == set()


def test_embeddings_detached_get_no_gradient() -> None:
    p, model, _, batch = _setup("embeddings_detached")
    grads = _grads_after_backward(p, model, batch)
    assert all(g is None for n, g in grads.items() if n.startswith("embeddings."))
    assert all(g is not None for n, g in grads.items() if n.startswith(("heads.", "blocks.")))
    clean_p, clean_model, _, _ = _setup()
    clean = _grads_after_backward(clean_p, clean_model, batch)
    assert all(g is not None for n, g in clean.items() if n.startswith("embeddings."))


def test_logits_detached_have_no_graph() -> None:
    p, model, _, batch = _setup("logits_detached")
    out = p.step(model, batch)
    assert not out.logits.requires_grad and out.logits.grad_fn is None
    assert not out.loss.requires_grad
    clean_p, clean_model, _, _ = _setup()
    assert clean_p.step(clean_model, batch).logits.requires_grad


# ---- 4. optimiser step skipped ------------------------------------------------------------------

def test_grad_accumulation_never_steps() -> None:
    p, model, opt, batch = _setup("grad_accumulation_never_steps")
    before = _snapshot(model)
    norms = [p.train_step(model, opt, batch).extras["grad_norm"] for _ in range(3)]
    assert _changed(model, before) == set()
    assert norms[2] == pytest.approx(3 * norms[0], rel=1e-3)  # the same gradient piles up, unused


# ---- 6-7. empty mask; loss independent of the output ------------------------------------------

def test_mask_all_padding_empties_the_loss_mask() -> None:
    p, model, _, batch = _setup("mask_all_padding")
    with record(values=True) as t:
        p.step(model, batch, tap)
    assert not np.asarray(t.value("mask.padding")).any() and not np.asarray(t.value("mask.loss")).any()
    assert float(t.value("loss")) == 0.0


def test_loss_from_targets_does_not_depend_on_the_model() -> None:
    p, batch = ReferencePipeline(SMALL, faults=["loss_from_targets"]), GOLDEN
    a, b = (float(p.step(p.build_model(s), batch).loss.detach()) for s in (0, 1))
    assert a == b
    grads = _grads_after_backward(p, p.build_model(0), batch)
    assert all(g is None for g in grads.values())
    clean = ReferencePipeline(SMALL)
    with torch.no_grad():
        assert float(clean.step(clean.build_model(0), batch).loss) != float(
            clean.step(clean.build_model(1), batch).loss
        )


# ---- 8. stale predictions ------------------------------------------------------------------------

def test_stale_hidden_cache_gives_the_same_logits_for_different_batches() -> None:
    p, model, _, batch = _setup("stale_hidden_cache")
    other = ReferencePipeline(SMALL).golden_batch(1)
    assert p.step(model, batch).targets.ne(p.step(model, other).targets).any()
    with torch.no_grad():
        a, b = p.step(model, batch).logits, p.step(model, other).logits
    assert torch.equal(a, b)
    clean_p, clean_model, _, _ = _setup()
    with torch.no_grad():
        assert not torch.equal(clean_p.step(clean_model, batch).logits, clean_p.step(clean_model, other).logits)


# ---- 9. integer / device conversions ------------------------------------------------------------

def test_condition_cast_to_ids_dtype_zeroes_the_condition_and_its_gradient() -> None:
    p, model, _, batch = _setup("condition_cast_to_ids_dtype")
    with record(values=True) as t:
        p.step(model, batch, tap)
    cond = np.asarray(t.value("condition.embedding"))
    assert np.all(cond == 0)
    grads = _grads_after_backward(p, model, batch)
    assert all(g is None for n, g in grads.items() if n.startswith("text_encoder."))
    clean_p, clean_model, _, _ = _setup()
    with record(values=True) as t:
        clean_p.step(clean_model, batch, tap)
    assert np.abs(np.asarray(t.value("condition.embedding"))).max() > 0


def test_hidden_numpy_roundtrip_cuts_the_gradient_below_the_heads() -> None:
    p, model, _, batch = _setup("hidden_numpy_roundtrip")
    grads = _grads_after_backward(p, model, batch)
    assert all(g is None for n, g in grads.items() if n.startswith(("blocks.", "embeddings.", "text_encoder.")))
    assert all(g is not None for n, g in grads.items() if n.startswith(("heads.", "norm.")))


# ---- 10. capacity --------------------------------------------------------------------------------

def test_model_too_small_cannot_fit_one_batch(clean_curve: list[float]) -> None:
    p, model, opt, batch = _setup("model_too_small")
    clean_model = ReferencePipeline(SMALL).build_model(0)

    def decoder_size(m: Any) -> int:  # the text encoder's width is fixed; the decoder's is not
        return sum(q.numel() for n, q in m.named_parameters() if not n.startswith("text_encoder."))

    assert decoder_size(model) < decoder_size(clean_model) / 8
    curve = _losses(p, model, opt, batch, 15)
    assert curve[-1] > clean_curve[-1] + 1.0


def test_bottleneck_width_one_makes_the_logits_rank_one(clean_curve: list[float]) -> None:
    p, model, opt, batch = _setup("bottleneck_width_one")

    def logit_rank(pipe: ReferencePipeline, m: Any) -> int:
        with torch.no_grad():
            x = pipe.step(m, batch).logits[:, 0].reshape(-1, m.config.cardinality).double()
        s = torch.linalg.svdvals(x - x.mean(dim=0))
        return int((s > s[0] * 1e-6).sum())

    assert logit_rank(p, model) == 1  # logits = bias + (one number) * vector, per position
    clean_p, clean_model, _, _ = _setup()
    assert logit_rank(clean_p, clean_model) > 50
    curve = _losses(p, model, opt, batch, 15)
    assert curve[-1] > clean_curve[-1] + 1.0
