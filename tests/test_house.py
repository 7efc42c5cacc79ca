"""The house rules of signalchain's layers, checked by reading the source (AST), not by running it.

1. Torch probes live in `probes/`: no other module (`reference/` is user code, exempt) subclasses a
   torch mode or registers a module, tensor or optimizer hook.
2. Records live in `records/`: no `from ...checks... import` brings in a name `records/` defines.
3. The runner owns the orchestration: no family calls `ctx.timed`, `ctx.attempt`, `run_check` or
   `missing_capability` itself.
4. Records are plain data: nothing in `records/` imports torch.

Every failure lists the offending file:line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "signalchain"
TESTS = ROOT / "tests"

MODES = {"TorchDispatchMode", "TorchFunctionMode"}
HOOKS = {"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
         "register_full_backward_pre_hook", "register_backward_hook", "register_step_pre_hook",
         "register_step_post_hook", "register_hook", "register_module_forward_hook",
         "register_module_forward_pre_hook", "register_optimizer_step_pre_hook",
         "register_optimizer_step_post_hook", "register_prehook",
         "register_post_accumulate_grad_hook"}
FAMILY_CALLS = {"timed", "attempt", "run_check", "missing_capability"}


def _modules(root: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _called(node: ast.Call) -> str:
    return _base_name(node.func)


def test_no_probe_outside_probes() -> None:
    offending = []
    for path, tree in _modules(PKG):
        rel = path.relative_to(PKG).parts
        if rel[0] in ("probes", "reference"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                offending += [f"{_where(path, node)} subclasses {_base_name(b)}"
                              for b in node.bases if _base_name(b) in MODES]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in HOOKS):
                offending.append(f"{_where(path, node)} calls .{node.func.attr}(")
    assert not offending, "torch probes belong in signalchain/probes/:\n" + "\n".join(offending)


def _records_names() -> set[str]:
    names: set[str] = set()
    for _, tree in _modules(PKG / "records"):
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names - {"__all__"}


def test_no_record_imported_from_checks() -> None:
    records = _records_names()
    assert records, "records/ defines no names: the scan is looking in the wrong place"
    offending = []
    for root in (SRC, TESTS):
        for path, tree in _modules(root):
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and "checks" in (node.module or "").split("."):
                    offending += [f"{_where(path, node)} imports {a.name} from {'.' * node.level}{node.module}"
                                  for a in node.names if a.name in records]
    assert not offending, "import records from signalchain.records, not checks:\n" + "\n".join(offending)


def test_families_leave_orchestration_to_the_runner() -> None:
    offending = []
    for path, tree in _modules(PKG / "experiments" / "families"):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _called(node)
            on_ctx = isinstance(node.func, ast.Attribute) and _base_name(node.func.value) == "ctx"
            if name in ("run_check", "missing_capability") or (on_ctx and name in ("timed", "attempt")):
                offending.append(f"{_where(path, node)} calls {name}")
    assert not offending, "the doctor's runner owns these calls; declare a Step:\n" + "\n".join(offending)


def test_records_do_not_import_torch() -> None:
    offending = []
    for path, tree in _modules(PKG / "records"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                offending += [f"{_where(path, node)} imports {a.name}"
                              for a in node.names if a.name.split(".")[0] == "torch"]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "torch":
                offending.append(f"{_where(path, node)} imports from {node.module}")
    assert not offending, "records are plain data, torch stays in probes/ and experiments/:\n" + "\n".join(offending)


def test_the_scans_see_what_they_look_for() -> None:
    """The scans above would pass on an empty tree; they find the probes' own hooks and modes."""
    hooks = modes = 0
    for _, tree in _modules(PKG / "probes"):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                modes += sum(_base_name(b) in MODES for b in node.bases)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in HOOKS:
                hooks += 1
    assert hooks > 0 and modes > 0
    assert any(True for _ in _modules(PKG / "experiments" / "families"))


def test_no_merge_conflict_markers_are_committed() -> None:
    """A merge left unresolved in a doc or a source file (it happened once, in docs/architecture.md)."""
    marks = ("<" * 7 + " ", ">" * 7 + " ")
    found = []
    for path in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *SRC.rglob("*.py"), *TESTS.rglob("*.py"),
                 ROOT / "Makefile", ROOT / "pyproject.toml"]:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if line.startswith(marks):
                found.append(f"{path.relative_to(ROOT)}:{n}")
    assert found == []
