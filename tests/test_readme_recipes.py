"""The README's recipes run verbatim, as a newcomer would type them in a fresh project.

Between `<!-- recipe:NAME -->` and `<!-- /recipe -->` the README holds a `toml` block (the project's
configuration, written as its `pyproject.toml`) and a `bash` block (the commands, run one by one in a
subprocess from that project, each must exit 0). The test supplies only what the user brings: their
pipeline file where the configuration names it, or a saved tiny MusicGen and a tiny audiofolder.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import signalchain

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

README = Path(__file__).parents[1] / "README.md"
TOY = Path(__file__).parent / "toy_pipeline.py"
_SRC = str(Path(signalchain.__file__).resolve().parents[1])  # the signalchain under test


def recipe(name: str) -> tuple[str, list[list[str]]]:
    """(the toml block, the commands of the bash block) of the README's recipe `name`."""
    text = README.read_text()
    m = re.search(rf"<!-- recipe:{re.escape(name)} -->\n(.*?)<!-- /recipe -->", text, re.S)
    assert m, f"README.md has no recipe:{name} block"
    blocks = dict(re.findall(r"```(toml|bash)\n(.*?)```", m.group(1), re.S))
    assert set(blocks) == {"toml", "bash"}, f"recipe:{name} needs one toml and one bash block"
    commands = [shlex.split(line, comments=True) for line in blocks["bash"].splitlines()]
    return blocks["toml"], [c for c in commands if c]


def run_verbatim(project: Path, commands: list[list[str]]) -> list[str]:
    """Each command as typed (`signalchain …` is this checkout's CLI); its combined output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_SRC, os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    outputs = []
    for argv in commands:
        assert argv[0] == "signalchain", f"the recipe runs signalchain only, not {argv[0]!r}"
        proc = subprocess.run([sys.executable, "-c", "from signalchain.cli import main; main()", *argv[1:]],
                              cwd=project, env=env, capture_output=True, text=True, timeout=600)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"`{shlex.join(argv)}` exited {proc.returncode}:\n{out[-3000:]}"
        outputs.append(" ".join(out.split()))  # as read, whatever the terminal's width wrapped
    return outputs


def test_the_own_pipeline_recipe_runs_verbatim(tmp_path) -> None:
    toml, commands = recipe("own-pipeline")
    config = tomllib.loads(toml)["tool"]["signalchain"]
    target, attr = config["pipeline"].rsplit(":", 1)
    user_file = tmp_path / target  # the user's own pipeline, where the configuration says it is
    user_file.parent.mkdir(parents=True, exist_ok=True)
    (user_file.parent / "toy.py").write_text(TOY.read_text())
    user_file.write_text(f"from toy import ToyPipeline\n\n{attr} = ToyPipeline()\n")
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / ".git").mkdir()  # the top of the user's repository
    outputs = run_verbatim(tmp_path, commands)
    assert [c[1] for c in commands] == ["capture", "compare"]
    said = f"pipeline {config['pipeline']} (from pyproject.toml [tool.signalchain])"
    assert all(said in out for out in outputs), outputs
    assert "identical: every stage matches the golden batch" in outputs[-1]


@pytest.mark.slow
def test_the_hf_musicgen_recipe_runs_verbatim(tmp_path) -> None:
    pytest.importorskip("transformers")
    from signalchain.reference.hf.export import write_audiofolder, write_model

    toml, commands = recipe("hf-musicgen")
    config = tomllib.loads(toml)["tool"]["signalchain"]
    write_model(tmp_path / config["hf_musicgen"])  # what the user brings: a saved MusicGen and its data
    for data in config["data"]:
        write_audiofolder(tmp_path / data, n=10)
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / ".git").mkdir()
    outputs = run_verbatim(tmp_path, commands)
    assert all("(from pyproject.toml [tool.signalchain])" in out for out in outputs), outputs
    assert "identical: every stage matches the golden batch" in outputs[-1]
