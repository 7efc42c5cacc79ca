"""One answer per mistake (issue 26 item 6, DESIGN §5): every command × every path it takes × {a missing
path, an empty folder, a file or folder of the wrong kind} is exit 2 and one line on stderr naming the
path, with no traceback, and nothing on stdout (nothing ran).

The table is the whole map. A `Cell` is run; a `NotApplicable` says why that input is no mistake for
that parameter (a missing `--out` folder is where a first golden goes). A command that gains a path
argument or option fails `test_the_table_covers_every_path_of_every_command` until the table has its
row. Placeholders in the arguments: {d} a folder of test inputs, {golden} a real golden batch, {toy}
the toy pipeline, {model} a saved HF MusicGen (only the `--data` cells that need one past its checks).

A bad file *inside* a folder or a manifest is not in this table: that is a finding naming the file,
and the rest of the work goes on (DESIGN §8; tests/cli/test_listen_cmd.py, tests/audit/).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

from signalchain.cli import cli

MISSING, EMPTY, WRONG = "missing", "empty folder", "wrong kind"
CASES = (MISSING, EMPTY, WRONG)
TOY = f"{Path(__file__).resolve().parents[1] / 'toy_pipeline.py'}:make"
#: Arguments that make each command valid apart from the path under test (cheap ones: --list, one family).
BASE = {"capture": ["--out", "{d}/out"], "compare": ["{golden}"], "inspect": ["{golden}"],
        "bisect": ["{golden}", "--checkpoints", "{d}/junk", "--pipeline", "{toy}"], "listen": ["{d}/tone.wav"],
        "zoo": ["--list"], "faults": ["--list"], "doctor": ["--family", "data"], "verify": ["--family", "data"],
        "audit": ["{d}/data"]}
#: Metavars of string options that name files or folders.
PATH_METAVARS = {"DIR", "DIR_OR_GLOB", "PATH", "SPEC", "NAME=PATH", "FILE_OR_DIR...", "[ZOO]"}


@dataclass(frozen=True)
class Cell:
    command: str
    param: str  # the click parameter's name
    case: str  # MISSING, EMPTY or WRONG, then what was given
    args: tuple[str, ...]
    names: str  # the path the one line must name
    says: str  # a regex for what the line says the mistake is
    quiet: bool = True  # nothing on stdout: the mistake was found before anything ran


def late(cell: Cell) -> Cell:
    """A cell whose mistake shows only once the work has begun (a file is known not to be a checkpoint
    only by loading it): its line is still the one answer, after what it said it was starting."""
    return Cell(cell.command, cell.param, cell.case, cell.args, cell.names, cell.says, quiet=False)


@dataclass(frozen=True)
class NotApplicable:
    command: str
    param: str
    case: str
    why: str


def c(command: str, param: str, case: str, args: list[str], names: str, says: str) -> Cell:
    return Cell(command, param, case, (command, *args), names, says)


def spec_cells(command: str, param: str, before: list[str], option: list[str], after: list[str]) -> list[Cell]:
    """A pipeline SPEC (`path/file.py:attr`): a missing file, a folder, a file that is not Python."""
    return [c(command, param, f"{MISSING}: nowhere.py", [*before, *option, "{d}/nowhere.py:make", *after],
              "{d}/nowhere.py", "no such file or folder"),
            c(command, param, f"{EMPTY}: empty/", [*before, *option, "{d}/empty:make", *after], "{d}/empty",
              "is a folder, not a Python file"),
            c(command, param, f"{WRONG}: a.wav", [*before, *option, "{d}/a.wav:make", *after], "{d}/a.wav",
              "cannot import .* as a Python file")]


def golden_cells(command: str, param: str, before: list[str], after: list[str]) -> list[Cell]:
    return [c(command, param, f"{MISSING}: nowhere/", [*before, "{d}/nowhere", *after], "{d}/nowhere",
              "no such file or folder: no golden batch here"),
            c(command, param, f"{EMPTY}: empty/", [*before, "{d}/empty", *after], "{d}/empty",
              "manifest.json: missing; a golden batch folder holds"),
            c(command, param, f"{WRONG}: a.wav", [*before, "{d}/a.wav", *after], "{d}/a.wav",
              "is not a folder; a golden batch is a folder"),
            c(command, param, f"{WRONG}: a folder of other files", [*before, "{d}/stuff", *after], "{d}/stuff",
              "manifest.json: missing")]


NO_ZOO_PATH = "ZOO is a module name (signalchain.reference.zoo), never read as a file or folder"
TABLE: list[Cell | NotApplicable] = [
    *spec_cells("capture", "pipeline", [], [], ["--out", "{d}/out"]),
    NotApplicable("capture", "out", MISSING, "a missing --out folder is made: it is where a first golden is written"),
    NotApplicable("capture", "out", EMPTY, "an empty --out folder is where a first golden is written"),
    c("capture", "out", f"{WRONG}: a.txt", ["{toy}", "--out", "{d}/a.txt"], "{d}/a.txt", "is a file, not a folder"),
    c("capture", "out", f"{WRONG}: a folder of other files", ["{toy}", "--out", "{d}/stuff"], "{d}/stuff",
      "not empty and not a golden batch"),

    *golden_cells("compare", "golden", [], []),
    c("compare", "golden2", f"{MISSING}: nowhere/", ["{golden}", "{d}/nowhere"], "{d}/nowhere",
      "no such file or folder"),
    c("compare", "golden2", f"{EMPTY}: empty/", ["{golden}", "{d}/empty"], "{d}/empty", "manifest.json: missing"),
    c("compare", "golden2", f"{WRONG}: a.wav", ["{golden}", "{d}/a.wav"], "{d}/a.wav", "is not a folder"),
    *spec_cells("compare", "pipeline", ["{golden}"], ["--pipeline"], []),

    *golden_cells("inspect", "golden", [], []),

    *spec_cells("doctor", "pipeline", [], [], ["--family", "data"]),
    *spec_cells("faults", "pipeline", [], [], ["--list"]),

    c("history", "run", f"{MISSING}: nowhere/", ["{d}/nowhere"], "{d}/nowhere", "no such file or folder"),
    c("history", "run", f"{EMPTY}: empty/", ["{d}/empty"], "{d}/empty", "holds no run log signalchain reads"),
    c("history", "run", f"{WRONG}: a.txt", ["{d}/a.txt"], "{d}/a.txt", "holds no run log signalchain reads"),
    *(NotApplicable("history", p, case, "--golden and --pipeline are only written into the printed bisect line: "
                                        "history reads neither")
      for p in ("golden", "pipeline") for case in (MISSING, EMPTY, WRONG)),
    c("audit", "paths", f"{MISSING}: nowhere/", ["{d}/nowhere"], "{d}/nowhere", "no such file or folder"),
    c("audit", "paths", f"{EMPTY}: empty/", ["{d}/empty"], "{d}/empty", "nothing to audit in .*: no audio files"),
    c("audit", "paths", f"{WRONG}: a.txt", ["{d}/a.txt"], "{d}/a.txt", "not a manifest"),
    c("audit", "paths", f"{WRONG}: a .json that is not a manifest", ["{d}/a.json"], "{d}/a.json", "not a manifest"),
    c("audit", "paths", f"{WRONG}: a FIFO", ["{d}/fifo"], "{d}/fifo", "a FIFO .*not a manifest or a folder"),
    c("audit", "splits", f"{MISSING}: nowhere/", ["--split", "train={d}/nowhere"], "train={d}/nowhere",
      "no such file or folder"),
    c("audit", "splits", f"{EMPTY}: empty/", ["--split", "train={d}/empty"], "{d}/empty", "nothing to audit in"),
    c("audit", "splits", f"{WRONG}: a.txt", ["--split", "train={d}/a.txt"], "{d}/a.txt", "not a manifest"),
    c("audit", "stats_file", f"{MISSING}: nowhere.json", ["{d}/data", "--stats", "{d}/nowhere.json"],
      "{d}/nowhere.json", "no such file or folder"),
    c("audit", "stats_file", f"{EMPTY}: empty/", ["{d}/data", "--stats", "{d}/empty"], "{d}/empty", "is a directory"),
    c("audit", "stats_file", f"{WRONG}: a.txt", ["{d}/data", "--stats", "{d}/a.txt"], "{d}/a.txt",
      "unsupported format"),
    c("audit", "sampler_file", f"{MISSING}: nowhere.json", ["{d}/data", "--sampler", "{d}/nowhere.json"],
      "{d}/nowhere.json", "no such file or folder"),
    c("audit", "sampler_file", f"{EMPTY}: empty/", ["{d}/data", "--sampler", "{d}/empty"], "{d}/empty",
      "is a directory"),
    c("audit", "sampler_file", f"{WRONG}: a.wav", ["{d}/data", "--sampler", "{d}/a.wav"], "{d}/a.wav",
      "cannot be read"),
    NotApplicable("audit", "cache_path", MISSING, "a missing --cache file is a new cache: it is made"),
    c("audit", "cache_path", f"{EMPTY}: empty/", ["{d}/data", "--cache", "{d}/empty"], "{d}/empty", "is a directory"),
    c("audit", "cache_path", f"{WRONG}: a.txt", ["{d}/data", "--cache", "{d}/a.txt"], "{d}/a.txt",
      "not a fingerprint cache .*left as it is"),
    c("audit", "cache_path", f"{WRONG}: inside a file", ["{d}/data", "--cache", "{d}/a.txt/fp.sqlite"],
      "{d}/a.txt/fp.sqlite", "cannot be written: .*a.txt is a file, not a folder"),

    c("listen", "paths", f"{MISSING}: nowhere.wav", ["{d}/nowhere.wav"], "{d}/nowhere.wav", "no such file or folder"),
    c("listen", "paths", f"{MISSING}: beside a good file", ["{d}/tone.wav", "{d}/nowhere.wav"], "{d}/nowhere.wav",
      "no such file or folder"),
    c("listen", "paths", f"{EMPTY}: empty/", ["{d}/empty"], "{d}/empty", "nothing to listen to in .*: no audio files"),
    c("listen", "paths", f"{WRONG}: a.txt", ["{d}/a.txt"], "{d}/a.txt", "not an audio file"),
    c("listen", "paths", f"{WRONG}: a.json", ["{d}/a.json"], "{d}/a.json", "not an audio file"),
    c("listen", "paths", f"{WRONG}: a FIFO", ["{d}/fifo"], "{d}/fifo", "is a FIFO .*not an audio file or a folder"),

    *golden_cells("bisect", "golden", [], ["--checkpoints", "{d}/junk"]),
    c("bisect", "checkpoints", f"{MISSING}: nowhere/", ["{golden}", "--checkpoints", "{d}/nowhere"], "{d}/nowhere",
      "no such file or folder"),
    c("bisect", "checkpoints", f"{EMPTY}: empty/", ["{golden}", "--checkpoints", "{d}/empty"], "{d}/empty",
      "matched no checkpoint"),
    c("bisect", "checkpoints", f"{WRONG}: a.txt", ["{golden}", "--checkpoints", "{d}/a.txt"], "{d}/a.txt",
      "matched no checkpoint"),
    late(c("bisect", "checkpoints", f"{WRONG}: a folder of .pt files that are not checkpoints",
           ["{golden}", "--checkpoints", "{d}/junk", "--pipeline", "{toy}"], "{d}/junk",
           "none of its 2 checkpoints loads .*step1.pt")),
    *spec_cells("bisect", "pipeline", ["{golden}", "--checkpoints", "{d}/junk"], ["--pipeline"], []),
    c("bisect", "repo", f"{MISSING}: nowhere/", ["{golden}", "--good", "A", "--bad", "B", "--repo", "{d}/nowhere"],
      "{d}/nowhere", "no such file or folder"),
    c("bisect", "repo", f"{EMPTY}: empty/", ["{golden}", "--good", "A", "--bad", "B", "--repo", "{d}/empty"],
      "{d}/empty", "not inside a git work tree"),
    c("bisect", "repo", f"{WRONG}: a.txt", ["{golden}", "--good", "A", "--bad", "B", "--repo", "{d}/a.txt"],
      "{d}/a.txt", "is a file, not a folder"),
    NotApplicable("bisect", "cache_dir", MISSING, "a missing --cache folder is made for the per-commit results"),
    NotApplicable("bisect", "cache_dir", EMPTY, "an empty --cache folder is a cache with nothing in it yet"),
    c("bisect", "cache_dir", f"{WRONG}: a.txt", ["{golden}", "--good", "A", "--bad", "B", "--cache", "{d}/a.txt"],
      "{d}/a.txt", "is a file, not a folder"),

    *spec_cells("verify", "before_spec", [], ["--before"], ["--family", "data"]),
    *spec_cells("verify", "after_spec", [], ["--after"], ["--family", "data"]),
    c("verify", "repo", f"{MISSING}: nowhere/",
      ["--repo", "{d}/nowhere", "--before-rev", "HEAD", "--before", "x.py:p", "--family", "data"], "{d}/nowhere",
      "no such file or folder"),
    c("verify", "repo", f"{EMPTY}: empty/",
      ["--repo", "{d}/empty", "--before-rev", "HEAD", "--before", "x.py:p", "--family", "data"], "{d}/empty",
      "not inside a git work tree"),
    c("verify", "repo", f"{WRONG}: a.txt",
      ["--repo", "{d}/a.txt", "--before-rev", "HEAD", "--before", "x.py:p", "--family", "data"], "{d}/a.txt",
      "is a file, not a folder"),
    *[cell for side in ("before", "after") for cell in (
        c("verify", f"{side}_checkpoint", f"{MISSING}: nowhere.pt", [f"--{side}-checkpoint", "{d}/nowhere.pt",
                                                                     "--family", "data"],
          "{d}/nowhere.pt", "no such file or folder"),
        c("verify", f"{side}_checkpoint", f"{EMPTY}: empty/", [f"--{side}-checkpoint", "{d}/empty", "--family", "data"],
          "{d}/empty", "an empty folder, not a checkpoint"),
        c("verify", f"{side}_checkpoint", f"{WRONG}: a.wav", [f"--{side}-checkpoint", "{d}/a.wav", "--family", "data"],
          "{d}/a.wav", "not a checkpoint .* can start from"),
        c("verify", f"{side}_checkpoint", f"{WRONG}: a folder of other files",
          [f"--{side}-checkpoint", "{d}/stuff", "--family", "data"], "{d}/stuff", "not a checkpoint .* can start from"),
    )],

    NotApplicable("zoo", "zoo_spec", MISSING, NO_ZOO_PATH),
    NotApplicable("zoo", "zoo_spec", EMPTY, NO_ZOO_PATH),
    c("zoo", "zoo_spec", f"{WRONG}: a folder where a module name goes", ["{d}/empty", "--list"], "{d}/empty",
      "cannot import zoo"),
]


def _shared_cells() -> Iterator[Cell | NotApplicable]:
    """The options every command shares (from cli/_common.py), on each command that has them."""
    for name, cmd in sorted(cli.commands.items()):
        params = {p.name for p in cmd.params}
        base = BASE.get(name, [])
        for opt, param, suffix in (("--json", "json_path", "json"), ("--html", "html_path", "html")):
            if param not in params:
                continue
            yield NotApplicable(name, param, MISSING, "a missing folder of the report is made when it is written "
                                                      "(test_a_report_into_a_missing_folder_is_written)")
            yield c(name, param, f"{EMPTY}: empty/ (a folder, not a file)", [*base, opt, "{d}/empty"], "{d}/empty",
                    "is a directory")
            yield c(name, param, f"{WRONG}: inside a file", [*base, opt, f"{{d}}/a.txt/r.{suffix}"],
                    f"{{d}}/a.txt/r.{suffix}", "cannot be written: .*a.txt is a file, not a folder")
        if "hf_musicgen" in params:
            if "--pipeline" in base:  # --hf-musicgen is the pipeline: with --pipeline beside it, that is the mistake
                at = base.index("--pipeline")
                base = base[:at] + base[at + 2:]
            yield c(name, "hf_musicgen", f"{MISSING}: nowhere/", [*base, "--hf-musicgen", "{d}/nowhere", "--data",
                                                                  "{d}/data"],
                    "{d}/nowhere", "no such file or folder")
            yield c(name, "hf_musicgen", f"{EMPTY}: empty/", [*base, "--hf-musicgen", "{d}/empty", "--data",
                                                              "{d}/data"],
                    "{d}/empty", "no config.json there")
            yield c(name, "hf_musicgen", f"{WRONG}: a.wav", [*base, "--hf-musicgen", "{d}/a.wav", "--data", "{d}/data"],
                    "{d}/a.wav", "is a file, not a folder")
            yield c(name, "data", f"{MISSING}: nowhere/", [*base, "--hf-musicgen", "{d}/empty", "--data",
                                                           "{d}/nowhere"],
                    "{d}/nowhere", "no such file or folder")
            yield c(name, "data", f"{EMPTY}: empty/", [*base, "--hf-musicgen", "{model}", "--data", "{d}/empty"],
                    "{d}/empty", "no readable audio in")
            yield c(name, "data", f"{WRONG}: a.txt", [*base, "--hf-musicgen", "{model}", "--data", "{d}/a.txt"],
                    "{d}/a.txt", "not a manifest")


ALL = [*TABLE, *_shared_cells()]
CELLS = [row for row in ALL if isinstance(row, Cell)]


def _path_params(cmd: click.Command) -> set[str]:
    """The parameters of `cmd` that name a file or a folder."""
    return {p.name for p in cmd.params if p.name and (
        isinstance(p.type, click.Path) or isinstance(p, click.Argument) or (p.metavar or "") in PATH_METAVARS
        or "pipeline" in p.name)}


# ---- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("mistakes")
    (d / "empty").mkdir()
    (d / "stuff").mkdir()
    (d / "stuff" / "notes.txt").write_text("not a golden, not a checkpoint\n")
    (d / "junk").mkdir()
    for n in (1, 2):
        (d / "junk" / f"step{n}.pt").write_text("not a checkpoint\n")
    t = np.arange(8000) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    sf.write(d / "tone.wav", tone, 16000)
    sf.write(d / "a.wav", tone, 16000)
    (d / "data").mkdir()
    for n in (1, 2):
        sf.write(d / "data" / f"clip{n}.wav", tone * n / 2, 16000)
    (d / "a.txt").write_text("plain text\n")
    (d / "a.json").write_text('{"not": "a manifest"}\n')
    os.mkfifo(d / "fifo")
    res = CliRunner().invoke(cli, ["capture", TOY, "--out", str(d / "golden")])
    assert res.exit_code == 0, res.output
    return {"d": str(d), "golden": str(d / "golden"), "toy": TOY}


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("transformers", reason="the --data cells past --hf-musicgen's checks need a saved model")
    from signalchain.reference.hf.export import write_model

    return str(write_model(tmp_path_factory.mktemp("hf") / "model"))


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging, were a FIFO ever opened."""
    def stop(*_: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s: something blocked")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---- the table -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", CELLS, ids=lambda x: f"{x.command} {x.param} {x.case}")
def test_a_mistake_is_exit_2_and_one_line_naming_the_path(cell: Cell, place: dict[str, str],
                                                          request: pytest.FixtureRequest) -> None:
    values = dict(place)
    if any("{model}" in a for a in cell.args):
        values["model"] = request.getfixturevalue("hf_model")
    args = [a.format(**values) for a in cell.args]
    with _deadline(120):
        res = CliRunner().invoke(cli, args, prog_name="signalchain")
    assert "Traceback" not in res.output, res.output[-3000:]
    assert res.exit_code == 2, (res.exit_code, res.output[-3000:])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith("signalchain: error: "), line  # a usage error, not "internal error"
    assert cell.names.format(**values) in line, line
    assert re.search(cell.says, line), (cell.says, line)
    if cell.quiet:
        assert not res.stdout.strip(), res.stdout  # nothing ran


def test_the_table_covers_every_path_of_every_command() -> None:
    have = {(r.command, r.param, r.case.split(":")[0]) for r in ALL}
    missing = [(name, param, case) for name, cmd in sorted(cli.commands.items()) for param in sorted(_path_params(cmd))
               for case in CASES if (name, param, case) not in have]
    assert not missing, f"add a Cell or a NotApplicable (with why) to TABLE for: {missing}"
    unknown = [(r.command, r.param) for r in ALL if r.param not in _path_params(cli.commands[r.command])]
    assert not unknown, f"rows for parameters that are not path parameters of their command: {unknown}"
    assert all(r.why.strip() for r in ALL if isinstance(r, NotApplicable))


def test_a_report_into_a_missing_folder_is_written(place: dict[str, str]) -> None:
    """The not-applicable cells of --json/--html: a missing folder of a report is made, not a mistake."""
    out = Path(place["d"]) / "reports" / "new"
    res = CliRunner().invoke(cli, ["listen", f"{place['d']}/tone.wav", "--json", str(out / "r.json"), "--html",
                                   str(out / "r.html")])
    assert res.exit_code == 0, res.output
    assert (out / "r.json").stat().st_size > 0 and (out / "r.html").stat().st_size > 0
