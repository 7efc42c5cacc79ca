"""DESIGN §5 on every subcommand: a usage or internal error is one line on stderr and exit 2, and a
pipeline that calls sys.exit() never hands its exit code to signalchain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signalchain.cli import cli
from signalchain.cli._common import guarded

COMMANDS = sorted(cli.commands)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), prog_name="signalchain")


def assert_one_line(res: Any, prefix: str = "signalchain: error: ") -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    err = res.stderr
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(prefix) and "Traceback" not in res.output and "Usage:" not in res.output
    return err


def test_every_subcommand_is_registered_and_guarded() -> None:
    assert {"capture", "compare", "inspect", "doctor", "faults", "audit", "listen"} <= set(COMMANDS)
    wrapper_code = guarded(lambda: 0).__code__
    for name in COMMANDS:
        assert cli.commands[name].callback.__code__ is wrapper_code, f"{name} is not @guarded"


@pytest.mark.parametrize("name", COMMANDS)
def test_an_unknown_option_is_one_line_and_exit_2(name: str) -> None:
    err = assert_one_line(invoke(name, "--no-such-option"))
    assert "--no-such-option" in err and f"signalchain {name} --help" in err


@settings(max_examples=60, deadline=None, derandomize=True)
@given(name=st.sampled_from(COMMANDS), option=st.from_regex(r"--[a-z][a-z0-9-]{0,15}", fullmatch=True))
def test_any_unknown_option_of_any_subcommand_is_one_line(name: str, option: str) -> None:
    known = {o for p in cli.commands[name].params for o in (*p.opts, *p.secondary_opts)}
    if any(k.startswith(option) for k in known) or option in ("--help",):
        return  # click accepts unambiguous prefixes of real options
    assert_one_line(invoke(name, option, "x"))


def _bad_values() -> list[tuple[str, list[str], str]]:
    """Per subcommand: a bad choice for each Choice option, a word for each integer option."""
    out = []
    for name in COMMANDS:
        for p in cli.commands[name].params:
            if isinstance(p, click.Option) and isinstance(p.type, click.Choice):
                out.append((name, [p.opts[0], "no-such-choice"], "no-such-choice"))
            elif isinstance(p, click.Option) and p.type is click.INT:
                out.append((name, [p.opts[0], "eleven"], "eleven"))
    return out


@pytest.mark.parametrize("name,args,quoted", _bad_values(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_bad_choice_or_number_is_one_line_and_exit_2(name: str, args: list[str], quoted: str) -> None:
    assert quoted in assert_one_line(invoke(name, *args))


@pytest.mark.parametrize("name", [n for n in COMMANDS if any(
    isinstance(p, click.Argument) and p.required for p in cli.commands[n].params)])
def test_a_missing_argument_is_one_line_and_exit_2(name: str) -> None:
    assert "Missing argument" in assert_one_line(invoke(name))


def test_an_unknown_subcommand_is_one_line_and_exit_2() -> None:
    assert "nosuch" in assert_one_line(invoke("nosuch"))


def test_help_and_version_still_exit_0() -> None:
    assert invoke("--version").exit_code == 0
    assert all(invoke(n, "--help").exit_code == 0 for n in COMMANDS)


# ---- internal errors ---------------------------------------------------------------------------------

def _minimal_args(cmd: click.Command, tmp_path: Path) -> list[str]:
    """Values for the required parameters: an existing folder for arguments, a new path for options."""
    args: list[str] = []
    for p in cmd.params:
        if p.required and isinstance(p, click.Argument):
            args.append(str(tmp_path))
        elif p.required and isinstance(p, click.Option):
            args += [p.opts[0], str(tmp_path / "out")]
    return args


def _explode(*args: Any, **kwargs: Any) -> int:
    raise ZeroDivisionError("a bug deep inside")


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
@pytest.mark.parametrize("wrapped", [True, False], ids=["guarded", "unguarded"])
@pytest.mark.parametrize("name", COMMANDS)
def test_an_internal_error_in_any_subcommand_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                name: str, wrapped: bool, debug: bool) -> None:
    cmd = cli.commands[name]
    monkeypatch.setattr(cmd, "callback", guarded(_explode) if wrapped else _explode)
    res = invoke(name, *_minimal_args(cmd, tmp_path), *(["--debug"] if debug else []))
    assert res.exit_code == 2, res.output
    first = res.stderr.splitlines()[0]
    assert first.startswith("signalchain: internal error: ZeroDivisionError: a bug deep inside")
    if debug:
        assert "Traceback" in res.stderr and "_explode" in res.stderr
    else:
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_the_doctor_turns_an_unexpected_exception_into_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("signalchain.cli.doctor_cmd.run_doctor", _explode)
    assert_one_line(invoke("doctor", "--family", "data"), prefix="signalchain: internal error: ZeroDivisionError")


def test_faults_turns_an_unexpected_exception_into_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("signalchain.cli.faults_cmd.score_catalogue", _explode)
    assert_one_line(invoke("faults", "--fault", "mask_all_padding", "--seeds", "0"),
                    prefix="signalchain: internal error: ZeroDivisionError")


# ---- a pipeline that calls sys.exit ------------------------------------------------------------------

TINY = '''
import sys
import torch

EXIT = {exit!r}
if "import" in EXIT:
    sys.exit(EXIT["import"])


class Tiny:
    name = "tiny"

    def golden_batch(self, seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(4, 3, generator=g), torch.randint(0, 2, (4,), generator=g)

    def build_model(self, seed):
        torch.manual_seed(seed)
        return torch.nn.Linear(3, 2)

    def build_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, model, batch, tap):
        x, y = batch
        logits = tap("logits", model(x))
        if "step" in EXIT:
            sys.exit(EXIT["step"])  # the line the finding names
        return tap("loss", torch.nn.functional.cross_entropy(logits, y))


def factory():
    if "factory" in EXIT:
        sys.exit(EXIT["factory"])
    return Tiny()


pipeline = Tiny()
'''


def write_pipeline(folder: Path, name: str = "tiny_pipe", **exit: Any) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(TINY.format(exit=exit)))
    return path


@pytest.mark.parametrize("command", ["doctor", "capture", "faults"])
def test_sys_exit_while_importing_a_pipeline_is_a_usage_error(tmp_path: Path, command: str) -> None:
    spec = f"{write_pipeline(tmp_path, **{'import': 3})}:pipeline"
    extra = ["--out", str(tmp_path / "g")] if command == "capture" else []
    err = assert_one_line(invoke(command, spec, *extra))
    assert spec in err and "sys.exit(3)" in err and "tiny_pipe.py:" in err


def test_sys_exit_in_an_importable_module_or_a_factory_is_a_usage_error(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    write_pipeline(tmp_path, "exiting_module", **{"import": 4})
    write_pipeline(tmp_path, "exiting_factory", factory=5)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "sys.exit(4)" in assert_one_line(invoke("doctor", "exiting_module:pipeline"))
    assert "sys.exit(5)" in assert_one_line(invoke("doctor", "exiting_factory:factory"))


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.one_of(st.none(), st.integers(-3, 300), st.text(max_size=20)))
def test_no_exit_code_leaks_from_an_import(tmp_path: Path, code: Any) -> None:
    res = invoke("doctor", f"{write_pipeline(tmp_path, **{'import': code})}:pipeline")
    assert_one_line(res)  # exit 2, whatever the pipeline asked for (0 and None included)


@pytest.mark.parametrize("code", [3, 0])
def test_sys_exit_during_a_step_is_a_one_line_error_where_no_finding_can_be_made(tmp_path: Path, code: int) -> None:
    res = invoke("capture", f"{write_pipeline(tmp_path, step=code)}:pipeline", "--out", str(tmp_path / "g"))
    err = assert_one_line(res)
    assert f"sys.exit({code})" in err and "tiny_pipe.py:" in err and "signalchain capture" in err


def test_sys_exit_during_a_step_is_a_pipeline_step_failed_finding_in_the_doctor(tmp_path: Path) -> None:
    path = write_pipeline(tmp_path, step=3)
    out = tmp_path / "d.json"
    res = invoke("doctor", f"{path}:pipeline", "--family", "data", "--budget", "economy", "--json", str(out))
    assert res.exit_code == 1, res.output  # an error finding: not 3, not 2
    (f,) = [f for f in json.loads(out.read_text())["findings"] if f["id"] == "pipeline.step_failed"]
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "the line the finding names" in t)
    assert f["severity"] == "error" and f["stage"] == "logits" and "sys.exit(3)" in f["message"]
    assert f"{path}:{line}" in f["message"]


@pytest.mark.slow
@pytest.mark.parametrize("args", [["doctor", "--no-such-option"], ["doctor", "{spec}"]], ids=["bad-option", "exit-3"])
def test_a_real_process_exits_2_with_one_line_on_stderr(tmp_path: Path, args: list[str]) -> None:
    """The same through the installed entry point, in a process of its own (no CliRunner in between)."""
    spec = f"{write_pipeline(tmp_path, **{'import': 3})}:pipeline"
    argv = [a.format(spec=spec) for a in args]
    proc = subprocess.run([sys.executable, "-c", "from signalchain.cli import main; main()", *argv],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("signalchain: error: "), proc.stderr
    assert proc.stdout == ""


def test_audit_of_an_empty_folder_is_a_usage_error_not_a_pass(tmp_path: Path) -> None:
    """A typo'd or empty data folder must fail a CI gate, as `listen` does on one."""
    empty = tmp_path / "data"
    empty.mkdir()
    res = invoke("audit", str(empty))
    lines = [line for line in res.stderr.splitlines() if line.strip()]  # the progress bar leaves a blank line
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("signalchain: error: nothing to audit")
    assert str(empty) in lines[0] and "No findings" not in res.output
