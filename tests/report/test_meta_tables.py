"""report/meta_tables: a stage's metadata and a json stage's records are HTML tables, never a Python
dict's repr."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np

from signalchain.report.meta_tables import cell_text, mapping_table, records_table


class _Cells(HTMLParser):
    """The text of each <th> and <td> of a table, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _rows(html: str) -> list[list[str]]:
    p = _Cells()
    p.feed(html)
    return p.rows


def test_a_mapping_is_one_row_per_key_with_readable_values() -> None:
    meta = {"sample_rate": 16000, "lengths": [87040, 105920], "requires_grad": False, "grad_fn": None,
            "frame_rate": 50.0, "nested": {"a": 1, "b": [1, 2]}}
    rows = _rows(mapping_table(meta))
    assert rows[0] == ["key", "value"]
    assert dict(rows[1:]) == {"sample_rate": "16000", "lengths": "87040, 105920", "requires_grad": "false",
                              "grad_fn": "—", "frame_rate": "50", "nested": "a: 1; b: 1, 2"}
    assert not re.search(r"[{}']", mapping_table(meta))  # no dict repr left


def test_records_get_a_column_per_key_in_the_order_first_met() -> None:
    records = [{"source_id": "s0", "bpm": 120, "moods": ["calm", "warm"]}, {"source_id": "s1", "key": "C major"}]
    rows = _rows(records_table(records, limit=8))
    assert rows == [["#", "source_id", "bpm", "moods", "key"],
                    ["0", "s0", "120", "calm, warm", ""],
                    ["1", "s1", "", "", "C major"]]


def test_records_past_the_limit_are_counted_not_shown() -> None:
    html = records_table([{"i": i} for i in range(10)], limit=3)
    assert len(_rows(html)) == 4 and "7 more not shown" in html
    assert _rows(records_table(["a", 3], limit=8)) == [["#", "record"], ["0", "a"], ["1", "3"]]


def test_values_are_escaped_and_long_lists_summarised() -> None:
    html = mapping_table({"<k>": "<script>x</script>", "vocab": [f"tok{i}" for i in range(300)]})
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;k&gt;" in html
    assert cell_text([f"tok{i}" for i in range(300)]) == "300 items: tok0, tok1, tok2, tok3, …"
    assert cell_text(np.array([1.5, 2.0])) == "1.5, 2" and cell_text(float("nan")) == "nan"
    assert cell_text([[4, 4], [3, 4]]) == "[4, 4], [3, 4]"  # one meter per example
