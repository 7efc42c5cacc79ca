"""emit(): the tail every command shares prints, writes and picks the exit code as DESIGN §5 says."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from signalchain.cli._common import emit
from signalchain.findings import Finding, Severity


def _con() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=120, color_system=None), buf


class _Page:
    def __init__(self) -> None:
        self.written: list[str] = []

    def write(self, path: str) -> None:
        self.written.append(path)
        Path(path).write_text("<html></html>")


def test_error_finding_is_exit_1_and_json_holds_findings_and_fields(tmp_path: Path) -> None:
    con, buf = _con()
    bad = Finding("x.bad", Severity.ERROR, "stage", "it broke", check="t")
    code = emit(con, [bad], title="T", show=["after the table"], json_path=str(tmp_path / "r.json"),
                fields={"extra": 3}, html_path=None)
    assert code == 1
    text = buf.getvalue()
    assert "x.bad" in text and text.index("x.bad") < text.index("after the table")
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["extra"] == 3 and [f["id"] for f in payload["findings"]] == ["x.bad"]


def test_no_title_prints_no_table_and_the_page_is_written_and_named(tmp_path: Path) -> None:
    con, buf = _con()
    page = _Page()
    html = str(tmp_path / "r.html")
    code = emit(con, [Finding("x.note", Severity.WARNING, None, "a note", check="t")], json_path=None,
                html_path=html, page=lambda: page)
    assert code == 0 and page.written == [html]
    assert buf.getvalue() == f"report: {html}\n"


def test_code_overrides_and_no_html_never_builds_the_page() -> None:
    con, buf = _con()
    built = []
    assert emit(con, [], json_path=None, html_path=None, page=lambda: built.append(1), code=1) == 1  # type: ignore[arg-type, return-value]
    assert built == [] and buf.getvalue() == ""
