"""Everything a user reads refers to documents inside the repository.

- Every link of README.md and docs/*.md (`[text](target)`, images too) resolves to a file inside
  the repository, and every `#anchor` to a heading of its file; every `something.md` they name in
  backticks is a file of the repository.
- No string a user can see names the project's design notes (`DESIGN §n`, `DESIGN.md`), which are
  not part of the repository: no string literal of `src/signalchain` outside docstrings (messages,
  findings, hints, help), no `--help` text of a command, no docstring of the public API.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "signalchain"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OUTSIDE = re.compile(r"DESIGN(?: §|\.md)|\.\./shared/")

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_TICKED_MD = re.compile(r"`([\w./-]+\.md)`")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _inside(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


def test_links_of_the_readme_and_docs_resolve_inside_the_repository():
    bad = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in _LINK.finditer(text):
            target = m[1]
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not a document of the repository
            file_part, _, anchor = target.partition("#")
            path = (doc.parent / file_part) if file_part else doc
            if not (_inside(path) and path.exists()):
                bad.append(f"{doc.relative_to(ROOT)}: ({target}) is no file of the repository")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                bad.append(f"{doc.relative_to(ROOT)}: ({target}) names no heading of {path.name}")
        for m in _TICKED_MD.finditer(text):
            name = m[1]
            if not any(_inside(p) and p.is_file() for p in (ROOT / name, doc.parent / name)):
                bad.append(f"{doc.relative_to(ROOT)}: `{name}` is no file of the repository")
    assert not bad, "\n".join(bad)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_no_message_names_the_design_notes():
    """Messages, findings, hints and option help are string literals (f-strings' parts included)."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and OUTSIDE.search(node.value)):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:80]!r}")
    assert not bad, "\n".join(bad)


def test_no_help_text_or_public_docstring_names_the_design_notes():
    from signalchain.cli import cli

    bad = [f"signalchain {name} --help" for name, cmd in cli.commands.items()
           if OUTSIDE.search(" ".join(filter(None, [cmd.help, cmd.epilog,
                                                    *(getattr(p, "help", None) for p in cmd.params)])))]
    for module in ("signalchain", "signalchain.pipeline", "signalchain.testing", "signalchain.monitor",
                   "signalchain.integrations.golden_assert", "signalchain.reference"):
        mod = importlib.import_module(module)
        if OUTSIDE.search(mod.__doc__ or ""):
            bad.append(f"{module} (module docstring)")
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if obj is not None and not isinstance(obj, (str, int, float, tuple, dict)) \
                    and OUTSIDE.search(inspect.getdoc(obj) or ""):
                bad.append(f"{module}.{name}")
    assert not bad, "these name the design notes, which are not in the repository: " + ", ".join(bad)
