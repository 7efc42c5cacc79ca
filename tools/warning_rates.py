"""Every finding id the doctor or the audit can emit as a warning, and how often it fires on clean runs.

    python tools/warning_rates.py --zoo zoo.json [--zoo zoo-timed.json] --controls ref.json --controls hf.json \
        [--strangers bed.json] [--audit clean-audit.json ...] [--markdown] [--fired-only]

The ids come from the code, not from the runs: every `make(id, severity, …)`-style call in a module
the doctor's families or the audit import (followed through their imports, `reference/` left out),
whose severity can be "warning" (a literal, a conditional holding it, `Severity.WARNING`, or a
variable set in a function that names "warning"). Ids that fired as warnings in the runs are added
if the scan missed them (an id built at run time).

The clean runs: `signalchain zoo --json` (its `runs`), `signalchain faults --json` (the clean control:
one run per seed; give one file per bed), the strangers' bed (`tests/strangers/run_bed.py --json`: a
list of runs with `findings`), and `signalchain audit --json` of clean datasets (one run each). A
rate is the share of runs where the id fired as a warning; an id above 10 % on any column is marked.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "signalchain"
#: Where the doctor and the audit start: every family module, and the audit's two runners.
ENTRIES = ("experiments/families", "audit/run.py", "audit/midi_run.py")
ID = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
LIMIT = 0.10
#: Warning ids whose call names them through a variable (the scan cannot see them): the crash guard's
#: id, and the numerics state scan's "absurd magnitude" findings.
DYNAMIC = {"internal.check_failed": "signalchain/findings.py", "nonfinite.state": "signalchain/checks/numerics.py",
           "nonfinite.optimizer_state": "signalchain/checks/numerics.py"}


def _module_file(name: str) -> Path | None:
    rel = name.removeprefix("signalchain").lstrip(".").replace(".", "/")
    for cand in (ROOT / rel / "__init__.py", ROOT / f"{rel}.py"):
        if cand.is_file():
            return cand
    return None


def _imports(path: Path) -> Iterable[Path]:
    pkg = ".".join(("signalchain", *path.relative_to(ROOT).with_suffix("").parts))
    if path.name == "__init__.py":
        pkg = pkg.removesuffix(".__init__") + ".__init__"
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: -node.level]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for n in names:
            if n.startswith("signalchain") and ".reference" not in n:
                f = _module_file(n)
                if f is not None:
                    yield f


def reachable() -> set[Path]:
    """Modules the doctor's families and the audit runners import, transitively (no `reference/`)."""
    todo = []
    for entry in ENTRIES:
        p = ROOT / entry
        todo += sorted(p.glob("*.py")) if p.is_dir() else [p]
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo += [g for g in _imports(f) if g not in seen]
    return seen


def _names_warning(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and n.value == "warning":
            return True
        if isinstance(n, ast.Attribute) and n.attr == "WARNING":
            return True
    return False


def warning_ids(files: Iterable[Path]) -> dict[str, str]:
    """id → the module that can emit it as a warning."""
    out: dict[str, str] = {}
    for f in sorted(files):
        tree = ast.parse(f.read_text())
        scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for scope in [tree, *scopes]:
            body_warns = _names_warning(scope)
            for node in ast.walk(scope):
                if not (isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str) and ID.match(node.args[0].value)):
                    continue
                sev = node.args[1]
                literal = {n.value for n in ast.walk(sev) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                warns = _names_warning(sev) or (isinstance(sev, ast.Name) and body_warns and not literal)
                if warns:
                    out.setdefault(node.args[0].value, str(f.relative_to(ROOT.parent)))
    return out


def _runs(kind: str, path: Path) -> list[list[dict]]:
    """The findings of each clean run in a report."""
    data = json.loads(path.read_text())
    if kind == "zoo":
        return [r["findings"] for r in data["runs"]]
    if kind == "controls":
        seeds = data["control"]["seeds"]
        return [[f for f in data["control"]["findings"] if f.get("seed") == s] for s in seeds]
    if kind == "strangers":
        return [r["findings"] for r in (data if isinstance(data, list) else data["runs"])]
    return [data["findings"]]  # an audit report: one run


def _merged_zoo(paths: list[Path]) -> list[list[dict]]:
    """One run per member × seed over several zoo reports (one zoo run in parts: `--families` of the
    untimed families, then the timed ones), their findings together."""
    merged: dict[tuple[str, int], list[dict]] = {}
    for path in paths:
        if path.suffix == ".jsonl":  # a zoo's run log (`<json>.runs.jsonl`), read while the zoo still runs
            logged = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            runs = [r.get("run", r) for r in logged]
        else:
            runs = json.loads(path.read_text())["runs"]
        for r in runs:
            merged.setdefault((r["member"], r["seed"]), []).extend(r["findings"])
    return list(merged.values())


def rates(runs: list[list[dict]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for findings in runs:
        for fid in {f["id"] for f in findings if f["severity"] == "warning"}:
            out[fid] = out.get(fid, 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for kind in ("zoo", "controls", "strangers", "audit"):
        ap.add_argument(f"--{kind}", type=Path, action="append", default=[], metavar="JSON")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table (docs/families.md)")
    ap.add_argument("--fired-only", action="store_true",
                    help="rows only for ids that fired on some clean run; the rest are named in one line")
    args = ap.parse_args(argv)
    ids = {**warning_ids(reachable()), **DYNAMIC}
    columns: list[tuple[str, int, dict[str, int]]] = []
    for kind in ("zoo", "controls", "strangers", "audit"):
        paths = getattr(args, kind)
        if paths:
            runs = _merged_zoo(paths) if kind == "zoo" else [r for p in paths for r in _runs(kind, p)]
            columns.append((kind, len(runs), rates(runs)))
    for _, _, fired in columns:
        for fid in fired:
            ids.setdefault(fid, "(seen in the runs)")
    head = ["id", *(f"{k} ({n} runs)" for k, n, _ in columns), "emitted by"]
    rows = []
    silent = sorted(fid for fid in ids if not any(fired.get(fid) for _, _, fired in columns))
    for fid in sorted(ids):
        if args.fired_only and fid in silent:
            continue
        cells = [f"{fired.get(fid, 0)}/{n}" + (f" ({100 * fired[fid] / n:.0f} %)" if fired.get(fid) else "")
                 for _, n, fired in columns]
        over = any(n and fired.get(fid, 0) / n > LIMIT for _, n, fired in columns)
        rows.append([f"`{fid}`" + (" **> 10 %**" if over else "") if args.markdown else fid + (" >10%" if over else ""),
                     *cells, ids[fid]])
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
        for r in [head, *rows]:
            print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    if args.fired_only:
        print(f"\n{len(silent)} other warning ids fired on no clean run: " + ", ".join(f"`{s}`" for s in silent))
    print(f"\n{len(ids)} warning ids; runs: " + ", ".join(f"{k} {n}" for k, n, _ in columns), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
