"""The README's real-output blocks, made from real runs of the bundled pipelines (`make docs`).

Every block that README.md marks

    <!-- output:NAME run=RUN [prompt] [rows=a,b,c] [header] [after-table] [gap] [stderr] -->
    ```
    …what this script writes…
    ```
    <!-- /output -->

is the output of the run RUN (see RUNS below: the commands `make demo` runs, and a few cheap
doctor runs of the bundled beds), abridged by the rule written in its own marker, so the rule sits
beside the block it shapes:

- no rule: the whole output;
- `rows=a,b,c`: of the tables, only the rows whose first text cell (a stage, an id) is one of
  these, with their wrapped continuation lines; `header` keeps the tables' column-name lines too;
- `after-table`: the lines after the last table (the verdict lines); `gap` puts `…` between the
  rows kept and those lines;
- `prompt`: the block starts with the command line, `$ signalchain …`;
- `stderr`: the run's standard error is appended (standard output alone by default: that is what
  stays on a terminal, where progress bars are transient).

`<!-- output:renderer run=symbolic-capture -->` is prose, not a block: which renderer played the
symbolic golden's notes, read from the golden's manifest (`meta.rendered.renderer`).

Each run is a real `signalchain` process with the source of this checkout (`src/` first on
PYTHONPATH), in a fresh temporary folder as its working directory (so paths read `demo-out/…`),
with COLUMNS=120, NO_COLOR=1, TERM=dumb, one thread and fixed seeds. What still varies from run to
run is normalised here, and only that: the seconds a command says it took (`in 76.9 s` →
`in <n> s`), and the temporary folder (→ `.`). Trailing spaces (rich pads centred titles) are cut.

    python tools/readme_blocks.py           # rewrite README.md's blocks (`make docs`)
    python tools/readme_blocks.py --check   # exit 1 and a short diff when README.md differs

The `listen` and `audit` examples' inputs are written first by `tools/_readme_data.py`.
Blocks outside markers (the HF Trainer, Lightning DDP, Monitor, MIDI audit, bisect and verify
outputs) come from the runs their text names (tests and benchmarks scripts, minutes each) and are
not regenerated here.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT / "tools"))
from _readme_data import MAKERS  # noqa: E402  (the inputs of the listen and audit examples)

#: name -> (arguments of `signalchain`, exit codes that are the expected verdict, working folder
#: relative to the run's temporary folder or, with a leading "repo:", to the checkout). The order
#: is the order they run in: `compare-fault` needs the golden `capture` saved.
RUNS: dict[str, tuple[tuple[str, ...], tuple[int, ...], str]] = {
    "capture": (("capture", "--out", "demo-out/golden", "--seed", "0"), (0,), "."),
    "compare-fault": (("compare", "demo-out/golden", "--fault", "crop_in_padding"), (1,), "."),
    "doctor-fault": (("doctor", "--symptom", "flat-loss", "--fault", "zero_grad_before_step"), (1,), "."),
    "symbolic-capture": (("capture", "symbolic-bed", "--out", "demo-out/symbolic-golden", "--seed", "0"), (0,), "."),
    "hf-bed-fault": (("doctor", "hf-bed", "--fault", "decoder_inputs_are_labels", "--symptom",
                      "too-good-validation"), (1,), "."),
    "symbolic-fault": (("doctor", "symbolic-bed", "--family", "data", "--fault", "tokenizer_drops_tempo"), (1,), "."),
    "listen-takes": (("listen", "take-01.wav", "take-02.wav"), (1,), "."),  # inputs: tools/_readme_data.py
    "audit-set": (("audit", "sc-audit", "--no-cache"), (1,), "."),
}

_MARK = re.compile(r"<!-- output:(?P<name>[\w.-]+)(?P<rule>[^>]*?)\s*-->\n(?P<body>.*?)<!-- /output -->\n", re.S)
#: The seconds a command reports for itself ("families run: … in 76.9 s", "in 0.3 s"): they vary.
_SECONDS = re.compile(r"\bin \d+(?:\.\d+)? s\b")
_TABLE_EDGE = ("┏", "┡", "└", "┌", "├", "╇", "━")


@dataclass
class Output:
    """What one run printed, normalised."""

    stdout: str
    stderr: str
    code: int


@dataclass(frozen=True)
class Rule:
    run: str
    rows: tuple[str, ...] = ()
    header: bool = False
    after_table: bool = False
    gap: bool = False
    stderr: bool = False
    prompt: bool = False

    @classmethod
    def parse(cls, text: str) -> Rule:
        words = dict(w.split("=", 1) if "=" in w else (w, "") for w in text.split())
        unknown = set(words) - {"run", "rows", "header", "after-table", "gap", "stderr", "prompt"}
        if unknown or "run" not in words:
            raise ValueError(f"bad output rule {text.strip()!r}: needs run=NAME; unknown {sorted(unknown)}")
        return cls(run=words["run"], rows=tuple(r for r in words.get("rows", "").split(",") if r),
                   header="header" in words, after_table="after-table" in words, gap="gap" in words,
                   stderr="stderr" in words, prompt="prompt" in words)


def normalise(text: str, folder: Path | None = None) -> str:
    """Cut what varies between runs: the temporary folder, self-reported seconds, trailing spaces."""
    if folder is not None:
        text = "\n".join(_unfold(line, f"{folder}/") for line in text.splitlines())
        text = text.replace(str(folder), ".")
    text = _SECONDS.sub("in <n> s", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def _unfold(line: str, prefix: str) -> str:
    """`line` without `prefix`; in a table row the cell keeps its width (the spaces move to its end)."""
    while prefix in line:
        at = line.index(prefix)
        line = line[:at] + line[at + len(prefix):]
        edge = line.find("│", at)
        if edge >= 0:
            line = line[:edge] + " " * len(prefix) + line[edge:]
    return line


def run_all(names: Iterable[str] | None = None, python: str = sys.executable, workers: int | None = None
            ) -> dict[str, Output]:
    """Run the named RUNS (all by default) in one temporary folder, independent ones side by side
    (`workers`, default: the CPU count, at most 4); raise when one ends with an exit code that is
    not its expected verdict."""
    wanted = set(RUNS if names is None else names)
    if "compare-fault" in wanted:
        wanted.add("capture")
    env = dict(os.environ, COLUMNS="120", LINES="50", NO_COLOR="1", TERM="dumb", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONHASHSEED="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("FORCE_COLOR", None)
    out: dict[str, Output] = {}
    with tempfile.TemporaryDirectory(prefix="sc-docs-") as tmp:
        folder = Path(tmp).resolve()

        def one(name: str) -> None:
            args, codes, cwd = RUNS[name]
            where = ROOT / cwd[5:] if cwd.startswith("repo:") else folder / cwd
            if name in MAKERS:
                MAKERS[name](folder)
            done = subprocess.run([python, "-c", "from signalchain.cli import main; main()", *args], cwd=where,
                                  env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if done.returncode not in codes:
                raise RuntimeError(f"`signalchain {' '.join(args)}` exited {done.returncode}, expected {codes}: "
                                   f"{(done.stderr or done.stdout).strip()[-2000:]}")
            out[name] = Output(normalise(done.stdout, folder), normalise(done.stderr, folder), done.returncode)
            if name == "symbolic-capture":
                out["renderer"] = Output(_renderers(folder / "demo-out/symbolic-golden"), "", 0)

        def chain(names: Sequence[str]) -> None:
            for name in names:
                one(name)

        # compare-fault re-runs the golden capture saved: one chain; every other run stands alone
        chains = [[n for n in ("capture", "compare-fault") if n in wanted]]
        chains += [[n] for n in RUNS if n in wanted and n not in ("capture", "compare-fault")]
        with ThreadPoolExecutor(max_workers=workers or min(4, os.cpu_count() or 1)) as pool:
            for job in [pool.submit(chain, c) for c in chains if c]:
                job.result()
    return out


def _renderers(golden: Path) -> str:
    """The renderers the golden's notes stages were played with, as its manifest records them."""
    manifest = json.loads((golden / "manifest.json").read_text(encoding="utf-8"))
    found = sorted({st["meta"]["rendered"]["renderer"] for st in manifest.get("stages", [])
                    if isinstance(st.get("meta"), Mapping) and isinstance(st["meta"].get("rendered"), Mapping)})
    return "; ".join(found) or "none: no notes stage was rendered"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]


def _first_text(line: str) -> str:
    """A table row's first cell that is not a row number: the stage or the id."""
    cells = [c for c in _cells(line) if c and not c.isdigit()]
    return cells[0] if cells else ""


def abridge(text: str, rule: Rule) -> str:
    """`text` abridged by `rule` (see the module's docstring)."""
    lines = text.splitlines()
    if not rule.rows and not rule.after_table:
        return "\n".join(lines)
    last_edge = max((i for i, ln in enumerate(lines) if ln.startswith("└")), default=-1)
    kept: list[str] = []
    keeping = False
    for line in lines[: last_edge + 1] if rule.rows else []:
        if line.startswith("┃"):
            keeping = False
            if rule.header:
                kept.append(line)
        elif line.startswith("│"):
            cells = _cells(line)
            continuation = bool(cells) and not any(cells[:2])  # a wrapped row: its first cells are blank
            if not continuation:
                keeping = _first_text(line) in rule.rows
            if keeping:
                kept.append(line)
        elif line.startswith(_TABLE_EDGE):
            keeping = False
    tail = lines[last_edge + 1:] if rule.after_table else []
    if rule.gap and kept and tail:
        kept.append("…")
    return "\n".join(kept + tail)


def block(name: str, rule: Rule, outputs: Mapping[str, Output]) -> str:
    """The text between a marker and its `<!-- /output -->`."""
    if name == "renderer":
        return f"`{outputs['renderer'].stdout}`\n"
    got = outputs[rule.run]
    text = abridge(got.stdout + (("\n" + got.stderr) if rule.stderr and got.stderr else ""), rule).strip("\n")
    if rule.prompt:
        text = f"$ signalchain {' '.join(RUNS[rule.run][0])}\n{text}"
    return "```\n" + text + "\n```\n"


def rules(readme: str) -> dict[str, Rule]:
    """Every marked block's rule, by its name (a name is used once)."""
    found: dict[str, Rule] = {}
    for m in _MARK.finditer(readme):
        if m["name"] in found:
            raise ValueError(f"README.md marks the output block {m['name']!r} twice")
        found[m["name"]] = Rule.parse(m["rule"])
    return found


def rewrite(readme: str, outputs: Mapping[str, Output]) -> str:
    """`readme` with every marked block replaced by what its run printed, abridged by its rule."""
    return _MARK.sub(lambda m: (f"<!-- output:{m['name']}{m['rule']} -->\n"
                                f"{block(m['name'], Rule.parse(m['rule']), outputs)}<!-- /output -->\n"), readme)


_SPACES = re.compile(r" +")
_NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(?:e[-+]?\d+)?")


def _close(a: re.Match[str], b: re.Match[str]) -> bool:
    """Two printed numbers that one kernel or another could print: equal to one unit in the committed
    number's last place, or within 0.1 % (a figure of float arithmetic, not a different result)."""
    x, y = float(a[0]), float(b[0])
    ulp = 10.0 ** -len(a[1] or "") if "e" not in a[0] else abs(x) * 1e-3
    return abs(x - y) <= max(ulp, 1e-3 * max(abs(x), abs(y)))


def agree(committed: str, produced: str) -> bool:
    """The README holds what the runs printed: the same text, line by line, and numbers equal up to
    the last printed digit (CPUs with other SIMD kernels may round a float's last digit otherwise)."""
    a_lines, b_lines = committed.splitlines(), produced.splitlines()
    if len(a_lines) != len(b_lines):
        return False
    for a, b in zip(a_lines, b_lines):
        if a == b:
            continue
        na, nb = list(_NUMBER.finditer(a)), list(_NUMBER.finditer(b))
        if _SPACES.sub(" ", _NUMBER.sub("#", a)).rstrip() != _SPACES.sub(" ", _NUMBER.sub("#", b)).rstrip() \
                or len(na) != len(nb):
            return False  # (a number's width may shift a table edge: compared without the padding)
        if not all(_close(x, y) for x, y in zip(na, nb)):
            return False
    return True


def diff(committed: str, produced: str, limit: int = 40) -> str:
    """A short unified diff (at most `limit` lines), empty when the two agree."""
    lines = list(difflib.unified_diff(committed.splitlines(), produced.splitlines(), "README.md (committed)",
                                      "README.md (make docs)", n=1, lineterm=""))
    return "\n".join(lines[:limit] + ([f"… {len(lines) - limit} more diff lines"] if len(lines) > limit else []))


def needed_runs(readme: str) -> list[str]:
    return sorted({r.run for r in rules(readme).values()})


def main(argv: Sequence[str] = ()) -> int:
    check = "--check" in argv
    readme = README.read_text(encoding="utf-8")
    runs = needed_runs(readme)
    outputs = run_all(runs)
    readme = README.read_text(encoding="utf-8")  # again: the runs take minutes, and the file may have been edited
    missing = sorted(set(needed_runs(readme)) - set(outputs))
    if missing:
        raise SystemExit(f"README.md changed during the runs and now needs {missing}: run again")
    produced = rewrite(readme, outputs)
    if check:
        text = "" if agree(readme, produced) else diff(readme, produced)
        if text:
            print(f"README.md differs from what tools/readme_blocks.py produces (run `make docs`):\n{text}")
            return 1
        print(f"README.md: {len(rules(readme))} output blocks match their runs")
        return 0
    if produced != readme:
        README.write_text(produced, encoding="utf-8")
    print(f"README.md: {len(rules(readme))} output blocks written from {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
