"""`LiveSession` in a hand-written loop: verdicts, skipped updates, findings file, golden, phases."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from _live_models import Tiny, collate, examples, flat
from signalchain.findings import Finding
from signalchain.golden.store import load_golden
from signalchain.integrations._live import LiveSession

torch.set_num_threads(1)
STEPS, BAD = 8, 5


def run(session: LiveSession, bad: int | None = BAD, seed: int = 0, steps: int = STEPS, hooked: bool = False):
    """A loop that steps unconditionally, as a trainer does: the session's guard withholds the update.
    hooked: the session takes batch, output and loss from forward hooks (as under HF's Trainer)."""
    model = Tiny(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    session.attach(model, opt, replay=lambda m, b: m(**b)["loss"])
    if hooked:
        session.watch_forward(model)
    data = examples(steps, bad, seed)
    verdicts, moved = [], []
    for step in range(steps):
        batch = collate(data[step * 4:(step + 1) * 4])
        session.begin_step(step, None if hooked else batch)
        before = flat(model)
        with session.phase("forward"):
            out = model(**batch)
        out["loss"].backward()
        verdicts.append(session.before_optimizer(step, None if hooked else out["loss"]))
        opt.step()
        opt.zero_grad()
        moved.append(not torch.equal(before, flat(model)))
        session.end_step(step)
    return model, opt, verdicts, moved, session.close()


def test_a_nan_step_is_located_skipped_and_written(tmp_path) -> None:
    session = LiveSession(out_dir=tmp_path, tensorboard=False)
    model, opt, verdicts, moved, findings = run(session)
    assert verdicts == [s != BAD for s in range(STEPS)]
    assert moved == [s != BAD for s in range(STEPS)]  # only the NaN step's update was withheld
    first = next(f for f in findings if f.id == "nonfinite.first")
    assert first.stage == "features" and first.evidence["op"] == "aten.rsqrt.default"
    assert first.evidence["step"] == BAD
    assert "step" not in opt.__dict__  # the guard is gone after close
    saved = json.loads((tmp_path / "findings.json").read_text())
    assert [Finding.from_dict(f) for f in saved["findings"]] == findings
    assert session.close() is findings  # idempotent


def test_clean_runs_say_nothing_and_save_the_first_step(tmp_path) -> None:
    for seed in range(3):
        session = LiveSession(out_dir=tmp_path / str(seed), tensorboard=False)
        _, _, verdicts, moved, findings = run(session, bad=None, seed=seed, hooked=True)
        assert all(verdicts) and all(moved)
        assert [f for f in findings if f.severity.value != "info"] == []
    golden = load_golden(tmp_path / "0" / "golden")
    assert {"x", "targets", "logits", "loss"} <= set(golden.trace.names())
    assert golden.provenance["step"] == 0


def test_hooked_forward_gives_the_loss_and_the_replayed_batch() -> None:
    session = LiveSession(out_dir=None, tensorboard=False)
    _, _, verdicts, moved, findings = run(session, hooked=True)
    assert moved == [s != BAD for s in range(STEPS)]
    first = next(f for f in findings if f.id == "nonfinite.first")
    assert first.stage == "features" and first.evidence["step"] == BAD


def test_findings_go_to_the_signalchain_logger(tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="signalchain"):
        run(LiveSession(out_dir=None, tensorboard=False))
    assert any("nonfinite.first" in r.getMessage() for r in caplog.records)
    # one clean line: the level is the severity, the logger's name says signalchain (issue 25)
    line = next(r for r in caplog.records if "nonfinite.first" in r.getMessage())
    assert line.name == "signalchain" and line.levelname == "ERROR"
    assert line.getMessage().startswith("nonfinite.first @ ") and "[error]" not in line.getMessage()


def test_a_monitor_finding_speaks_the_trainers_step_numbering() -> None:
    """optim.step_skipped said "step 1" while its evidence said step 0 (issue 25): the message and
    the evidence both give the trainer's step."""
    session = LiveSession(out_dir=None, tensorboard=False)
    model = Tiny(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # a zero rate: the update changes nothing
    session.attach(model, opt, replay=lambda m, b: m(**b)["loss"])
    data = examples(2, None, 0)
    for step in range(2):
        batch = collate(data[step * 4:(step + 1) * 4])
        session.begin_step(step, batch)
        out = model(**batch)
        out["loss"].backward()
        session.before_optimizer(step, out["loss"])
        opt.step()
        opt.zero_grad()
        session.end_step(step)
    (skipped,) = [f for f in session.close() if f.id == "optim.step_skipped"]
    assert skipped.evidence["step"] == 0 and skipped.message.startswith("step 0:"), skipped.message


def test_without_skipping_the_update_goes_through(tmp_path) -> None:
    _, _, verdicts, moved, _ = run(LiveSession(out_dir=None, tensorboard=False, skip_nonfinite=False))
    assert verdicts[BAD] is False and moved[BAD] is True


def test_an_internal_failure_is_a_finding_not_a_crash(tmp_path, monkeypatch) -> None:
    def boom(self, step, logs):
        raise RuntimeError("injected")

    monkeypatch.setattr(LiveSession, "_end", boom)
    _, _, verdicts, _, findings = run(LiveSession(out_dir=tmp_path, tensorboard=False), bad=None)
    assert all(verdicts)
    failed = [f for f in findings if f.id == "internal.check_failed"]
    assert len(failed) == 1 and "injected" in failed[0].message and failed[0].evidence["hook"] == "end_step"


def test_a_check_that_raises_is_a_warning_and_changes_no_other_finding(monkeypatch) -> None:
    """Issue 40: the per-codebook CE raised on every clean step of a public script and hid the real
    findings. A check of ours that raises is a warning naming it and "please report"; the run's
    exit code and every other finding (here the NaN step's) are what they are without the crash."""
    from signalchain.findings import exit_code
    from signalchain.integrations import _scalars

    def key(fs):
        return [(f.id, f.severity, f.stage, f.message) for f in fs]

    _, _, _, _, clean = run(LiveSession(out_dir=None, tensorboard=False, every=1), hooked=True)

    def boom(*args, **kwargs):
        raise IndexError("Target 64 is out of bounds.")

    monkeypatch.setattr(_scalars, "per_codebook_ce", boom)
    _, _, verdicts, moved, found = run(LiveSession(out_dir=None, tensorboard=False, every=1), hooked=True)
    failed = [f for f in found if f.id == "internal.check_failed"]
    assert len(failed) == 1 and failed[0].severity.value == "warning"  # said once, not on every step
    assert "Target 64" in failed[0].message and "please report" in failed[0].hint
    assert key([f for f in found if f.id != "internal.check_failed"]) == key(clean)
    assert exit_code(found) == exit_code(clean) == 1  # the NaN step's error, and nothing from our crash
    assert moved == [s != BAD for s in range(STEPS)]  # the run itself went on as before


def test_strict_raises(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(LiveSession, "_end", lambda self, step, logs: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run(LiveSession(out_dir=None, tensorboard=False, strict=True), bad=None)


def test_phases_are_timed_and_loader_waits_measured(tmp_path) -> None:
    session = LiveSession(out_dir=None, tensorboard=False)
    run(session, bad=None)
    assert session.phase_times["forward"] > 0
    assert session._phase == "loader"


def test_a_scalers_scale_and_the_step_scalars_reach_tensorboard(tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    session = LiveSession(out_dir=tmp_path, every=2, ratio_every=3)
    model = Tiny(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    session.attach(model, opt, scaler=scaler, replay=lambda m, b: m(**b)["loss"])
    data = examples(STEPS, None, 0)
    for step in range(STEPS):
        batch = collate(data[step * 4:(step + 1) * 4])
        session.begin_step(step, batch)
        loss = model(**batch)["loss"]
        scaler.scale(loss).backward()
        session.before_optimizer(step, loss)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        session.end_step(step, {"lr": 0.1})
    findings = session.close()
    assert [f for f in findings if f.severity.value != "info"] == []
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("signalchain/grad_scale")] == [(s, 1024.0) for s in range(STEPS)]
    assert [e.step for e in acc.Scalars("signalchain/update_ratio")] == [0, 3, 6]
    assert [e.step for e in acc.Scalars("signalchain/lr")] == list(range(STEPS))


def test_hooks_after_close_do_nothing(tmp_path) -> None:
    session = LiveSession(out_dir=None, tensorboard=False)
    *_, findings = run(session, bad=None)
    session.begin_step(99)
    assert session.before_optimizer(99) is True and not session.in_step and session.findings == findings
