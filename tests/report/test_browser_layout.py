"""Nothing on a report lies over anything else, at every width from 1100 to 1920 px, and every page
opens with its verdict banner. Headless Chromium reads the boxes (`_layout.py`); skips without it.

The pages are the demo's five (`make demo`): inspect, compare with a crop fault, doctor, doctor with a
fault, and the symbolic inspect page, made by the CLI as a user makes them, on the economy budget
and a few families so that the test stays within minutes on two cores. On the page before this
test, the golden side's players and table lay over the faulty side's table at every width (11
overlaps at 1400 px), hiding its RMS, peak and DC: the checker must see that kind of page fail, and
does (`test_the_checker_fails_a_page_built_to_overlap`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from _chromium import load
from _layout import measure, overlaps
from click.testing import CliRunner

from signalchain.cli import cli
from signalchain.report.html import HtmlReport, audio_player, columns, table

WIDTHS = (1100, 1400, 1920)
PAGES = ("inspect", "compare-fault", "doctor", "doctor-fault", "symbolic-inspect")


def _run(*args: str) -> None:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code in (0, 1), result.output  # 1 is the verdict on the faulty runs


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pages")
    g, s = str(d / "golden"), str(d / "symbolic-golden")
    _run("capture", "--out", g, "--seed", "0")
    _run("inspect", g, "--html", str(d / "inspect.html"))
    _run("compare", g, "--fault", "crop_in_padding", "--html", str(d / "compare-fault.html"))
    _run("doctor", "--family", "output", "--family", "generation", "--budget", "economy",
         "--html", str(d / "doctor.html"))
    _run("doctor", "--family", "optimisation", "--fault", "zero_grad_before_step", "--budget", "economy",
         "--html", str(d / "doctor-fault.html"))
    _run("capture", "symbolic-bed", "--out", s, "--seed", "0")
    _run("inspect", s, "--html", str(d / "symbolic-inspect.html"))
    return {name: d / f"{name}.html" for name in PAGES}


@pytest.mark.slow
@pytest.mark.parametrize("name", PAGES)
def test_demo_page_has_no_overlap_at_any_width(browser: Any, pages: dict[str, Path], name: str) -> None:
    page = load(browser, pages[name])
    assert not page.problems(), "\n".join(page.problems())
    found = [line for width in WIDTHS for line in overlaps(browser, width)]
    assert not found, "\n".join(found)
    assert measure(browser, 1400).blocks >= 10  # the page was measured, not an empty shell
    # the banner, right under the title: the counts, and the first error on a failing run
    head = page.text[:600]
    assert re.search(r"\n\d+ errors?, \d+ warnings?", head), head
    if name in ("compare-fault", "doctor-fault"):
        assert re.search(r"\n[1-9]\d* errors?, .*first error: \S+", head), head


def _overlapping_page(tmp_path: Path) -> Path:
    """The old compare page's fault, rebuilt: two flex columns that may shrink, the first holding a
    table wider than its column, which spills over the second column's table."""
    wide = "<table style='white-space:nowrap'><tr>" + "".join(f"<td>value {i} wide cell</td>" for i in range(14)) + \
        "</tr></table>"
    cells = "<table><tr><td>RMS dBFS</td><td>peak</td><td>DC</td></tr></table>"
    body = (f"<div style='display:flex;gap:1em'><div style='flex:1;min-width:0'>{wide}</div>"
            f"<div style='flex:1;min-width:0'>{cells}</div></div>")
    page = HtmlReport("signalchain overlap")
    page.section("Overlap", body)
    return page.write(tmp_path / "overlap.html")


@pytest.mark.slow
def test_the_checker_fails_a_page_built_to_overlap(browser: Any, tmp_path: Path) -> None:
    load(browser, _overlapping_page(tmp_path))
    for width in WIDTHS:
        found = overlaps(browser, width)
        assert any("overlaps" in line and "RMS dBFS" in line for line in found), (width, found)


@pytest.mark.slow
def test_the_checker_ignores_nesting_and_what_scrolls_out_of_sight(browser: Any, tmp_path: Path) -> None:
    """A player inside a table cell is inside that table, not over it; a table wider than its column
    scrolls in its own box (`table()`), beside the other column, and is not over it either."""
    import numpy as np

    player = audio_player(np.zeros(16000, np.float32), 16000, "silence")
    wide = table([[f"value_{i}_in_one_unbreakable_word" for i in range(14)] + [player]], [f"c{i}" for i in range(15)],
                 raw=True)
    page = HtmlReport("signalchain nested", findings=[])
    page.section("Columns", columns(wide, table([["RMS dBFS", "peak", "DC"]], ["a", "b", "c"])))
    load(browser, page.write(tmp_path / "nested.html"))
    for width in WIDTHS:
        m = measure(browser, width)
        assert m.blocks >= 4 and m.problems() == [], m.problems()
    scrolls = browser.execute_script("const s = document.querySelector('.scroll');"
                                     "return s.scrollWidth > s.clientWidth")
    assert scrolls  # the wide table was wider than its column: the case the clipping is for
