"""The history bed: its catalogue is consistent, its logs hold their faults in the raw numbers (read
with each format's own library, independently of signalchain's readers), and `score` finds every
fault at its step with every clean log silent."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from signalchain.reference.history_bed.catalogue import ENTRIES, LOGS, log_path, score

BY = {e.name: e for e in ENTRIES}


def test_the_catalogue_is_consistent() -> None:
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))
    faults = [e for e in ENTRIES if e.fault]
    assert len(faults) >= 20 and {e.writer for e in faults} == {"tensorboard", "lightning", "hf-trainer"}
    for e in ENTRIES:
        assert log_path(e).is_dir(), e.name
        if e.fault:
            assert e.expected and all(i.startswith("history.") for i in e.expected)
            assert BY[e.twin].fault is None and BY[e.twin].writer == e.writer
    assert sum(f.stat().st_size for f in LOGS.rglob("*") if f.is_file()) < 8 << 20
    assert not list(LOGS.rglob("*.bin")) and not list(LOGS.rglob("*.pkl"))  # no pickle in the repository


def _tb(name: str, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[int, float] = {}
    for f in sorted((LOGS / name).glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        acc.Reload()
        for ev in acc.Scalars(tag):
            out[ev.step] = ev.value  # a resumed run's later file wins, as its steps replace the old ones
    return out


def _hf(name: str, key: str) -> dict[int, float]:
    state = json.loads((LOGS / name / "checkpoint-60" / "trainer_state.json").read_text())
    return {e["step"]: e[key] for e in state["log_history"] if key in e}


def _lt(name: str, key: str) -> list[float]:
    with open(LOGS / name / "metrics.csv") as fh:
        return [float(r[key]) for r in csv.DictReader(fh) if r.get(key)]


def test_the_raw_logs_hold_their_faults() -> None:
    loss = _tb("tb_empty_labels_nan", "train/loss")
    assert math.isnan(loss[150]) and all(math.isfinite(loss[s]) for s in range(150))
    spike = _tb("tb_corrupt_batch_spike", "train/loss")
    assert spike[140] > 2 * spike[139] and spike[145] < 1.5 * spike[139]
    assert all(v == 0 for s, v in _tb("tb_lr_integer_division", "train/lr").items())
    lr = _tb("tb_scheduler_per_epoch", "train/lr")
    assert lr[80] < 0.3 * lr[79] and lr[89] > 0.9 * lr[79]
    clean, blocked = _tb("tb_clean", "train/loss"), _tb("tb_upload_blocks", "train/loss")
    assert len(clean) == len(blocked) == 240
    gain = _hf("hf_silent_clip_inf_gain", "grad_norm")
    assert math.isnan(gain[25]) and all(math.isnan(gain[s]) for s in range(26, 61))
    nan = _hf("hf_empty_labels_nan", "grad_norm")
    assert all(math.isfinite(nan[s]) for s in range(26, 61))  # the weights trained on
    assert all(v == 0 for v in _hf("hf_lr_zero", "learning_rate").values())
    evals = _lt("lt_cached_eval", "val_loss")
    assert len(evals) == 12 and len(set(evals)) == 1
    hp = (LOGS / "lt_lr_not_as_configured" / "hparams.yaml").read_text()
    assert "learning_rate: 0.01" in hp and max(_lt("lt_lr_not_as_configured", "lr-Adam")) == pytest.approx(0.1)


def test_every_fault_found_at_its_step_and_every_clean_log_silent() -> None:
    rows = score()
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    assert sum(1 for r in rows if r["fault"]) >= 20


@pytest.mark.parametrize("seed", [3])
def test_regenerated_logs_on_another_seed_score_the_same(tmp_path: Path, seed: int) -> None:
    """A log of each writer, remade from scratch on another seed (a few seconds idle)."""
    from signalchain.reference.history_bed.generate import generate_one

    names = ["tb_clean", "tb_empty_labels_nan", "hf_silent_clip_inf_gain", "lt_cached_eval"]
    for n in names:
        generate_one(BY[n], tmp_path, seed)
    rows = score(tmp_path, names=names)
    # the logs' wall clock is this machine's, loaded or not: a slowdown it logs is real but not the bed's
    # fault, so throughput is judged on the committed logs only (made on an idle machine)
    for r in rows:
        r["found"] = [f for f in r["found"] if f["id"] != "history.throughput_drop"]
    bad = [r["name"] for r in rows if (r["found"] if r["fault"] is None else not r["ok"])]
    assert bad == [], [r for r in rows if r["name"] in bad]
    assert {p.name for p in (tmp_path / "hf_silent_clip_inf_gain").iterdir()} == {"checkpoint-20", "checkpoint-40",
                                                                                 "checkpoint-60"}
    shutil.rmtree(tmp_path)


def test_the_printed_bisect_line_names_the_first_bad_checkpoint(tmp_path: Path) -> None:
    """A real HF Trainer run goes NaN at step 25: `history` names the step and the pair, and its printed
    `signalchain bisect` line, run as printed, names checkpoint-40 (whose weights are non-finite)."""
    import shlex

    from click.testing import CliRunner

    from signalchain.cli import cli

    spec = "signalchain.reference.history_bed.pipeline:BedPipeline"
    golden = tmp_path / "golden"
    assert CliRunner().invoke(cli, ["capture", spec, "--out", str(golden)]).exit_code == 0
    run = CliRunner().invoke(cli, ["history", str(LOGS / "hf_silent_clip_inf_gain"), "--golden", str(golden),
                                   "--pipeline", spec, "--json", str(tmp_path / "h.json")])
    assert run.exit_code == 1
    doc = json.loads((tmp_path / "h.json").read_text())
    assert doc["findings"][0]["id"] == "history.nonfinite" and doc["findings"][0]["evidence"]["step"] == 25
    pair = doc["bisect"]["pair"]
    assert (pair["last_healthy"]["step"], pair["first_unhealthy"]["step"]) == (20, 40)
    argv = shlex.split(doc["bisect"]["command"])
    assert argv[:2] == ["signalchain", "bisect"]
    res = CliRunner().invoke(cli, [*argv[1:], "--json", str(tmp_path / "b.json")])
    assert res.exit_code == 1, res.output
    assert json.loads((tmp_path / "b.json").read_text())["bisect"]["first_unhealthy"] == "checkpoint-40"
