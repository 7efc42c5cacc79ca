"""Loss-scale collapse judged live with a real `GradScaler` (CPU float16 autocast): one skipped step is
how a scaler works and says nothing; a scale that keeps halving because the gradients keep growing is
`amp.scale_collapse` at the step, against where the scale settled in the same run."""

from __future__ import annotations

import torch

from _live_models import Tiny, collate, examples
from signalchain.integrations._live import LiveSession

torch.set_num_threads(1)


def run(boost, steps: int = 40):
    """A hand-written AMP loop; `boost(step)` multiplies only the loss that is backpropagated (so the
    loss the session judges stays the model's, and only the gradients grow)."""
    session = LiveSession(out_dir=None, tensorboard=False, golden=False)
    model = Tiny(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    session.attach(model, opt, scaler=scaler, replay=lambda m, b: m(**b)["loss"])
    data = examples(steps, None, 0)
    for step in range(steps):
        batch = collate(data[step * 4:(step + 1) * 4])
        session.begin_step(step, batch)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(**batch)["loss"]
        scaler.scale(loss.float() * boost(step)).backward()
        scaler.unscale_(opt)  # as the trainers do before their hook
        session.before_optimizer(step, loss)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        session.end_step(step)
    return session, session.close()


def test_one_skipped_float16_step_is_silent() -> None:
    session, findings = run(lambda s: 2.0**20 if s == 25 else 1.0)  # one batch overflows the scaled gradients
    scales = session.monitor.history["scale"]
    assert scales[25] == scales[24] / 2 and session.monitor.skipped == 1
    assert [f for f in findings if f.severity.value != "info"] == []


def test_a_scale_that_keeps_halving_is_named_at_its_step() -> None:
    session, findings = run(lambda s: 1.0 if s < 20 else 4.0 ** (s - 19))  # the gradients grow 4x a step
    collapse = [f for f in findings if f.id == "amp.scale_collapse" and f.check == "checks.instability_live"]
    assert len(collapse) == 1 and collapse[0].severity.value == "warning"
    ev = collapse[0].evidence
    scales = session.monitor.history["scale"]
    assert ev["settled"] == scales[19] and ev["halvings"] >= 8 and ev["scale"] == scales[ev["step"]]
    assert ev["step"] == next(i for i, x in enumerate(scales) if x <= scales[19] / 2**8)  # at the step, not later
    assert "halvings below" in collapse[0].message
