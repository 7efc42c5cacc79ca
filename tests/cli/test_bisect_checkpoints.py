"""`run_checkpoints_mode`, what `signalchain bisect GOLDEN --checkpoints …` runs: output, JSON, exit codes."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from checkpoint_run import TwoGroupPipeline, train
from signalchain.cli._bisect_checkpoints import run_checkpoints_mode
from signalchain.errors import UsageError
from signalchain.experiments.capture import run_golden
from signalchain.golden import collect_provenance, save_golden

SPEC = "checkpoint_run:TwoGroupPipeline"  # importable: tests/ is on sys.path (conftest)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bisect")
    train(root / "spiked")
    train(root / "clean", steps=6, spike_at=None)
    pipe = TwoGroupPipeline()
    save_golden(root / "golden", run_golden(pipe, 0).trace, collect_provenance(pipe, spec=SPEC, seed=0))
    return root


def _run(root: Path, checkpoints: str, **kw) -> tuple[int, str]:
    buf = io.StringIO()
    con = Console(file=buf, width=140, color_system=None)
    args = dict(con=con, golden=str(root / "golden"), checkpoints=checkpoints, pipeline=None, rtol=1e-5, atol=1e-6,
                tols=(), json_path=None, html_path=None)
    args.update(kw)
    return run_checkpoints_mode(**args), buf.getvalue()


def test_names_checkpoint_13_exit_1_and_writes_the_bisect_json(run):
    out = run / "report.json"
    code, text = _run(run, str(run / "spiked"), json_path=str(out))
    assert code == 1
    assert "bisect.first_bad_checkpoint" in text and "ckpt-013.pt" in text and "exp_avg_sq" in text
    assert "from the golden's manifest" in text
    payload = json.loads(out.read_text())
    b = payload["bisect"]
    assert payload["signalchain"] and b["mode"] == "checkpoints" and b["status"] == "found"
    assert (b["last_healthy"], b["first_unhealthy"]) == ("ckpt-012.pt", "ckpt-013.pt")
    assert b["runs"] == len(b["probes"]) <= math.ceil(math.log2(20)) + 2
    assert {g["group"] for g in b["groups"]} == {"body", "head"}
    (finding,) = [f for f in payload["findings"] if f["id"] == "bisect.first_bad_checkpoint"]
    assert finding["stage"] == "optimizer" and finding["evidence"]["reason"]["group"] == "head"


def test_a_glob_and_an_explicit_pipeline_work_too(run):
    code, _ = _run(run, str(run / "spiked" / "ckpt-01*.pt"), pipeline=str(Path(__file__).parents[1] /
                                                                           "checkpoint_run.py") + ":TwoGroupPipeline")
    assert code == 1  # 010…019: 013 is still the first unhealthy one


def test_a_flaky_end_is_exit_0(run):
    out = run / "flaky.json"
    code, text = _run(run, str(run / "clean"), json_path=str(out))
    assert code == 0 and "bisect.flaky" in text
    b = json.loads(out.read_text())["bisect"]
    assert b["status"] == "flaky_bad" and b["runs"] == 2 and b["first_unhealthy"] is None


def test_no_checkpoint_matched_is_a_usage_error_naming_the_pattern(run):
    pattern = str(run / "nowhere" / "*.pt")
    with pytest.raises(UsageError, match=r"--checkpoints '.*nowhere/\*\.pt' matched no checkpoint"):
        _run(run, pattern)
    with pytest.raises(UsageError, match=r"matched only ckpt-000\.pt; bisect needs at least two"):
        _run(run, str(run / "spiked" / "ckpt-000.pt"))


@pytest.mark.parametrize(("kw", "match"), [(dict(factor=1.0), "--factor 1.0"), (dict(rtol=math.nan), "--rtol"),
                                           (dict(tols=("nosuch=1e-3",)), "the golden has no stage 'nosuch'")])
def test_bad_options_are_usage_errors(run, kw, match):
    with pytest.raises(UsageError, match=match):
        _run(run, str(run / "spiked"), **kw)


def test_the_bisect_command_reaches_checkpoint_mode_with_its_factor_and_writes_the_page(run):
    from click.testing import CliRunner

    from signalchain.cli import cli

    page = run / "bisect.html"
    res = CliRunner().invoke(cli, ["bisect", str(run / "golden"), "--checkpoints", str(run / "spiked"),
                                   "--html", str(page)])
    assert res.exit_code == 1, res.output
    html = page.read_text()
    assert "exp_avg_sq.max per param group" in html and "ckpt-013.pt (first unhealthy)" in html
    assert html.count("<img") >= 3  # loss and per-group curves over the run
    # a factor this loose calls every checkpoint healthy: the bad end no longer reproduces
    res = CliRunner().invoke(cli, ["bisect", str(run / "golden"), "--checkpoints", str(run / "spiked"),
                                   "--factor", "1e9"])
    assert res.exit_code == 0 and "bisect.flaky" in res.output, res.output
