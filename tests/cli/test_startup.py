"""Start-up (issue 26 item 4): the group is lazy, so `signalchain --help`, `--version`, a command's own
`--help` and `listen` import only what they use (never torch, transformers or matplotlib), the
listing still shows every command as its docstring says, and the times a command prints are wall times.

These tests assert which modules get imported, never how long anything takes (benchmarks/bench_cli.py
measures that).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

from signalchain.cli import COMMANDS, cli
from signalchain.cli._clock import begin, elapsed, process_age

HEAVY = ("torch", "transformers", "matplotlib")

#: Run the real command line in a fresh interpreter, then say on the last line of stderr its exit code
#: and which of HEAVY and which subcommand modules it imported.
_PROBE = textwrap.dedent("""
    import json, os, sys
    sys.argv = ["signalchain", *sys.argv[1:]]
    from signalchain.cli import COMMANDS, cli, main
    if os.environ.get("PROBE_EAGER"):  # every command imported first: the listing click makes from them
        [cli.commands[name] for name in COMMANDS]
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    roots = {m.split(".")[0] for m in sys.modules}
    cmds = sorted(m for m in sys.modules if m.startswith("signalchain.cli.") and m.endswith(("_cmd", "_cmds")))
    print("\\nPROBE " + json.dumps({"code": code, "heavy": sorted(roots & set(HEAVY)), "commands": cmds}),
          file=sys.stderr)
""").replace("HEAVY", repr(HEAVY))


def _probe(*argv: str, eager: bool = False) -> tuple[dict, str]:
    env = {**os.environ, "COLUMNS": "100", "HF_HUB_OFFLINE": "1", "PROBE_EAGER": "1" if eager else ""}
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=300, env=env)
    err, _, probe = proc.stderr.rpartition("\nPROBE ")
    assert probe, proc.stderr
    return {**json.loads(probe), "stderr": err}, proc.stdout


def test_the_table_of_short_helps_is_each_commands_docstring() -> None:
    """COMMANDS holds what the listing shows without importing a command: it must not drift from the
    command's own docstring (its first sentence, as click shortens it) nor name the wrong object."""
    for name, (module, attr, short) in COMMANDS.items():
        cmd = cli.commands[name]
        assert cmd.name == name and cmd.callback.__module__ == f"signalchain.cli.{module}", (name, module, attr)
        assert cmd.get_short_help_str(10**6) == short, f"COMMANDS[{name!r}] differs from its docstring"


def test_help_imports_no_subcommand_nor_torch_and_lists_them_all_as_click_would() -> None:
    seen, out = _probe("--help")
    assert seen == {"code": 0, "heavy": [], "commands": [], "stderr": ""}, seen
    listed = re.findall(r"^  ([a-z]+) {2,}", out.split("Commands:", 1)[1], flags=re.M)
    assert listed == sorted(COMMANDS)
    seen, eager = _probe("--help", eager=True)  # click's own listing, from the real docstrings
    assert seen["code"] == 0 and len(seen["commands"]) == len(set(m for m, _, _ in COMMANDS.values()))
    assert eager == out


def test_version_imports_no_subcommand_nor_torch() -> None:
    seen, out = _probe("--version")
    assert seen == {"code": 0, "heavy": [], "commands": [], "stderr": ""} and out.startswith("signalchain, version ")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_commands_own_help_imports_that_command_and_no_torch(name: str) -> None:
    seen, out = _probe(name, "--help")
    assert seen["code"] == 0 and f"Usage: signalchain {name}" in out
    assert seen["heavy"] == [] and f"signalchain.cli.{COMMANDS[name][0]}" in seen["commands"], seen
    others = set(seen["commands"]) - {f"signalchain.cli.{COMMANDS[name][0]}"}
    assert not {"signalchain.cli.doctor_cmd", "signalchain.cli.verify_cmd"} & others, seen


def test_an_unknown_command_is_still_one_line_and_imports_nothing() -> None:
    seen, out = _probe("nosuch")
    err = seen.pop("stderr")
    assert seen == {"code": 2, "heavy": [], "commands": []} and out == ""
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("signalchain: error: ") and "nosuch" in err


def test_listen_on_a_short_wav_needs_no_torch(tmp_path: Path) -> None:
    sr = 16_000
    wav = tmp_path / "one.wav"
    sf.write(wav, 0.3 * np.sin(2 * np.pi * 440 * np.arange(4 * sr) / sr), sr)
    seen, out = _probe("listen", str(wav), "--json", "-")
    assert seen["code"] == 0 and json.loads(out)["findings"] == []
    assert seen["heavy"] == [] and seen["commands"] == ["signalchain.cli.listen_cmd"], seen


def test_audit_prints_the_wall_time_which_covers_the_audits_own(tmp_path: Path) -> None:
    """"8 examples in 0.3 s" after 10 s of waiting: the printed figure is now the command's wall time,
    which can never be less than the audit's own measured parts."""
    sr = 16_000
    folder = tmp_path / "clips"
    folder.mkdir()
    for i in range(3):
        sf.write(folder / f"c{i}.wav", 0.2 * np.sin(2 * np.pi * (200 + 90 * i) * np.arange(sr) / sr), sr)
    out = tmp_path / "a.json"
    res = CliRunner().invoke(cli, ["audit", str(folder), "--no-cache", "--json", str(out)], prog_name="signalchain")
    assert res.exit_code == 0, res.output
    timings = json.loads(out.read_text())["timings"]
    assert timings["wall"] >= timings["total"]
    (printed,) = re.findall(r"3 examples in ([0-9.]+) s", res.output)
    assert float(printed) == round(timings["wall"], 1)


def test_the_clock_of_the_real_command_line_starts_with_the_process() -> None:
    age = process_age()
    if age is None:
        pytest.skip("no /proc here: the clock starts at the command's own start")
    begin(whole_process=True)
    assert elapsed() >= age - 0.05  # /proc counts in clock ticks (1/100 s): a few ticks of margin
    begin()
    assert elapsed() < age  # a command invoked in-process (a test, a Python caller) counts from its own start
