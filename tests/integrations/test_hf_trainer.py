"""`SignalchainCallback` in a real HF `Trainer` run (tiny model, CPU): a NaN at a known step is
located, its update withheld and nothing else skipped; findings.json, the golden and TensorBoard
are read back."""

from __future__ import annotations

import json
import math

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from _live_models import CODEBOOKS, Codes, Tiny, code_examples, collate, examples, flat  # noqa: E402
from signalchain.cli import cli  # noqa: E402
from signalchain.findings import Finding  # noqa: E402
from signalchain.integrations._live import LiveSession  # noqa: E402
from signalchain.integrations.hf_trainer import SignalchainCallback  # noqa: E402

torch.set_num_threads(1)
STEPS, BAD, RATE = 12, 7, 32000


class Ordered(torch.utils.data.IterableDataset):
    """In order, no shuffling: the step that sees the zero row is known."""

    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __iter__(self):
        return iter(self.items)


class Moves(transformers.TrainerCallback):
    """Whether each optimizer step changed the weights."""

    def __init__(self) -> None:
        self.moved: list[bool] = []

    def on_step_begin(self, args, state, control, model=None, **kw):
        self.before = flat(model)

    def on_step_end(self, args, state, control, model=None, **kw):
        self.moved.append(not torch.equal(self.before, flat(model)))


def train(tmp_path, *, bad: int | None = BAD, seed: int = 0, accumulate: int = 1, codes: bool = False,
          clip: float = 1.0, **options):
    model = Codes(seed) if codes else Tiny(seed)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulate, learning_rate=0.05, lr_scheduler_type="constant",
        logging_steps=1, save_strategy="no", disable_tqdm=True, seed=seed, dataloader_num_workers=0,
        max_grad_norm=clip)
    cb, moves = SignalchainCallback(**options), Moves()
    data = Ordered(code_examples(STEPS * 4, seed) if codes else examples(STEPS * accumulate, bad, seed))
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate,
                                   callbacks=[cb, moves])
    trainer.train()
    cb.log_history = trainer.state.log_history
    return cb, moves.moved, tmp_path / "signalchain"


def scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "audio": 0})
    acc.Reload()
    return acc


def test_a_nan_step_is_located_and_only_its_update_withheld(tmp_path) -> None:
    sample = lambda model: (torch.sin(torch.arange(RATE // 10) / 5.0) * 0.5, RATE)  # noqa: E731
    cb, moved, out = train(tmp_path, every=4, sample_every=5, sample_fn=sample)
    assert moved == [s != BAD for s in range(STEPS)]
    first = next(f for f in cb.findings if f.id == "nonfinite.first")
    assert first.stage == "features" and first.evidence["op"] == "aten.rsqrt.default"
    assert first.evidence["step"] == BAD
    assert cb.session.monitor.fired == [BAD]
    saved = [Finding.from_dict(f) for f in json.loads((out / "findings.json").read_text())["findings"]]
    assert saved == cb.findings
    acc = scalars(out / "tensorboard")
    tags = set(acc.Tags()["scalars"])
    assert {"signalchain/loss", "signalchain/grad_norm_unclipped", "signalchain/skipped_steps",
            "signalchain/update_ratio", "signalchain/loader_wait_s"} <= tags
    assert [e.step for e in acc.Scalars("signalchain/loss")] == list(range(STEPS))
    assert [e.step for e in acc.Scalars("signalchain/loader_wait_s")] == list(range(1, STEPS))
    assert [e.step for e in acc.Scalars("signalchain/update_ratio")] == [0]  # ratio_every=20
    skipped = {e.step: e.value for e in acc.Scalars("signalchain/skipped_steps")}
    assert skipped[BAD - 1] == 0 and skipped[BAD] == 1 and skipped[STEPS - 1] == 1
    clips = acc.Audio("signalchain/sample")
    assert [c.step for c in clips] == [0, 5, 10] and {c.sample_rate for c in clips} == {RATE}


def test_the_first_step_is_a_golden_that_inspect_reads(tmp_path) -> None:
    _, _, out = train(tmp_path, bad=None, tensorboard=False)
    res = CliRunner().invoke(cli, ["inspect", str(out / "golden"), "--json", str(tmp_path / "i.json")])
    assert res.exit_code == 0, res.output
    stages = {s["name"] for s in json.loads((tmp_path / "i.json").read_text())["stages"]}
    assert {"x", "targets", "logits", "loss"} <= stages


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_runs_raise_nothing(tmp_path, seed) -> None:
    cb, moved, _ = train(tmp_path, bad=None, seed=seed, tensorboard=False, golden=False)
    assert all(moved) and len(moved) == STEPS
    assert [f for f in cb.findings if f.severity.value != "info"] == []


def test_gradient_accumulation_is_one_verdict_per_optimizer_step(tmp_path) -> None:
    # examples() poisons one row of micro-batch BAD (of 2 * STEPS): optimizer step BAD // 2
    cb, moved, _ = train(tmp_path, accumulate=2, tensorboard=False, golden=False)
    assert cb.session.monitor.steps == STEPS and len(cb.session.monitor.history["loss"]) == STEPS
    assert cb.session.monitor.fired == [BAD // 2]
    assert moved == [s != BAD // 2 for s in range(STEPS)]
    first = next(f for f in cb.findings if f.id == "nonfinite.first")
    assert first.stage == "features" and first.evidence["step"] == BAD // 2


def test_a_hook_that_raises_is_a_finding_and_the_run_completes(tmp_path, monkeypatch) -> None:
    def boom(self, step, loss, grad_norm):
        raise RuntimeError("injected in before_optimizer")

    monkeypatch.setattr(LiveSession, "_before", boom)
    cb, moved, out = train(tmp_path, bad=None, tensorboard=False)
    assert len(moved) == STEPS and all(moved)
    failed = [f for f in cb.findings if f.id == "internal.check_failed"]
    assert len(failed) == 1 and "injected" in failed[0].message
    assert json.loads((out / "findings.json").read_text())["findings"][0]["id"] == "internal.check_failed"


def test_per_codebook_ce_and_perplexity_every_n_steps(tmp_path) -> None:
    cb, moved, out = train(tmp_path, codes=True, every=3, golden=False)
    assert all(moved) and [f for f in cb.findings if f.severity.value != "info"] == []
    acc = scalars(out / "tensorboard")
    for k in range(CODEBOOKS):
        ce, ppl = acc.Scalars(f"signalchain/ce/codebook_{k}"), acc.Scalars(f"signalchain/ppl/codebook_{k}")
        assert [e.step for e in ce] == [0, 3, 6, 9] == [e.step for e in ppl]
        assert [p.value for p in ppl] == pytest.approx([math.exp(c.value) for c in ce], rel=1e-4)
        assert 0 < ce[0].value < 2 * math.log(8)  # near chance (log 8) for an untrained model


def test_on_clipped_steps_the_unclipped_norm_is_hfs_own(tmp_path) -> None:
    # every step is clipped to 1e-3: what the callback sees is clipped, so HF's logged pre-clip norm is written
    cb, moved, out = train(tmp_path, bad=None, clip=1e-3, golden=False)
    logged = {h["step"] - 1: h["grad_norm"] for h in cb.log_history if "grad_norm" in h}
    written = {e.step: e.value for e in scalars(out / "tensorboard").Scalars("signalchain/grad_norm_unclipped")}
    assert sorted(written) == list(range(STEPS)) == sorted(logged)
    assert all(v > 1e-2 for v in written.values())  # far above the clipped 1e-3
    assert [written[s] for s in range(STEPS)] == pytest.approx([logged[s] for s in range(STEPS)], rel=1e-5)
