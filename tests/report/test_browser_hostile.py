"""Hostile text in every slot a report prints, loaded in headless Chromium: no code from the data
runs, nothing outside the page is reached, every page is still written, and the text shows as
the user wrote it.

A payload goes through the page primitives (title, subtitle, section title and anchor, finding
id/stage/message/hint, table header and cell, player label, image alt), the doctor page (findings,
every metric kind, family names, timings) and the faults page (fault rows, control findings), and,
as file names, through `signalchain listen` and `signalchain audit`. A payload that ran would set
`window.__signalchain_pwned`; `_chromium.Page.problems` checks that and the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from _chromium import load
from click.testing import CliRunner

from signalchain.audio._files import display_path
from signalchain.cli import cli
from signalchain.experiments.scoring import FaultRow, Score
from signalchain.findings import Finding
from signalchain.report import render_doctor, render_faults
from signalchain.report.html import HtmlReport, audio_player, findings_table, image_tag, table
from signalchain.report.plots import bar_figure

PAYLOADS = (
    '<script>window.__signalchain_pwned="script"</script>',
    '"><img src=x onerror="window.__signalchain_pwned=\'img\'">',
    "'><svg onload=\"window.__signalchain_pwned='svg'\">",
    '</title><script>window.__signalchain_pwned="title"</script>',
    '</style><script>window.__signalchain_pwned="style"</script>',
    "<iframe src=\"javascript:parent.__signalchain_pwned='iframe'\"></iframe>",
    "javascript:window.__signalchain_pwned='href'",
    '<a href="http://example.invalid/">a link</a>',
    '<base href="http://example.invalid/">',
    '<meta http-equiv="refresh" content="0;url=http://example.invalid/">',
    "<!-- the rest of the page hidden",
    "&lt;script&gt; already escaped &amp; twice",
    "<body onload=\"window.__signalchain_pwned='body'\">",
    '<object data="http://example.invalid/x"></object>',
    "<audio src=x onerror=\"window.__signalchain_pwned='audio'\"></audio>",
    "<style>body{background:url(http://example.invalid/bg.png)}</style>",
    "<textarea>the rest swallowed",
    "$$ and $\\frac{$ (matplotlib mathtext)",
    "\u202e reversed \u00a0 音楽 🎵 \t tab",
)
SR = 16000
_TONE = (0.3 * np.sin(2 * np.pi * 440 * np.arange(SR // 2) / SR)).astype(np.float32)


def _finding(p: str) -> Finding:
    return Finding(id=p, severity="error", stage=p, message=p, hint=p, evidence={"path": p})


def _primitives(p: str) -> tuple[HtmlReport, int]:
    """A page with `p` in every slot of the primitives; also how many of them show it as text."""
    page = HtmlReport(p, p)
    page.section(p, findings_table([_finding(p)]) + table([[p, p]], [p, p]) +
                 audio_player(_TONE, SR, p) + image_tag(bar_figure({p: 1.0}, p, p), p), anchor=p)
    return page, 12  # h1, subtitle, nav link, h2; id, stage, message, hint; two headers, two cells


def _doctor(p: str) -> HtmlReport:
    metrics = {
        "fam.audio": {
            "kind": "audio",
            "title": p,
            "sample_rate": SR,
            "clips": [{"label": p, "audio": _TONE, "note": p}],
        },
        "fam.table": {"kind": "table", "title": p, "headers": [p], "rows": [[p]]},
        "fam.text": {"kind": "text", "title": p, "text": p},
        "fam.bars": {"kind": "bars", "title": p, "values": {p: 1.0, "other": 2.0}, "x_label": p},
        "fam.stack": {"kind": "stack", "title": p, "segments": [[p, 1.0, p], ["other", 2.0, "g"]], "groups": [p, "g"],
                      "x_label": p},
        "fam.curves": {"kind": "curves", "title": p, "series": {p: [[0, 1], [1.0, 2.0]]}, "x_label": p, "y_label": p},
        p: {"kind": "text", "title": "a family named by the payload", "text": "ok"},
    }
    return render_doctor([_finding(p)], metrics, [p], [p], {p: 1.0}, p)


def _faults(p: str) -> HtmlReport:
    row = FaultRow(name=p, family=p, cause=p, expected_ids=[p], expected_stage=p, symptom=p, found_ids=[p],
                   detected=True, localised=False)
    control = [{"seed": 0, "findings": [{"id": p, "severity": "warning", "stage": p, "message": p}]}]
    return render_faults(Score([row], [0], control, seconds=1.0).to_dict())


def _clean(page: Any) -> None:
    assert not page.problems(), "\n".join(page.problems())
    assert page.pwned is None and page.scripts == 0


def _shows(text: str, p: str) -> int:
    """How often `p` shows in the page's text (innerText folds runs of white space)."""
    return " ".join(text.split()).count(" ".join(p.split()))


@pytest.mark.slow
@pytest.mark.parametrize("p", PAYLOADS, ids=range(len(PAYLOADS)))
def test_hostile_text_in_every_slot_is_shown_not_run(browser: Any, tmp_path: Path, p: str) -> None:
    page, visible = _primitives(p)
    shown = load(browser, page.write(tmp_path / "primitives.html"))
    _clean(shown)
    assert " ".join(shown.title.split()) == " ".join(p.split())
    assert _shows(shown.text, p) >= visible
    assert [a["label"] for a in shown.audio] == [p] and [i["alt"] for i in shown.images] == [p]
    doctor = load(browser, _doctor(p).write(tmp_path / "doctor.html"))
    _clean(doctor)
    assert len(doctor.audio) == 1 and len(doctor.images) == 3 and _shows(doctor.text, p) >= 10
    faults = load(browser, _faults(p).write(tmp_path / "faults.html"))
    _clean(faults)
    assert _shows(faults.text, p) >= 8


# File names may hold anything but "/" and NUL; reports show them as `display_path` writes them
# (control characters as \xNN).
NAMES = [p.replace("/", "\u2215") for p in PAYLOADS]


@pytest.mark.slow
def test_hostile_file_names_through_listen_and_audit(browser: Any, tmp_path: Path) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    for i, name in enumerate(NAMES):
        sf.write(folder / f"{name}.wav", _TONE * (0.5 + i / 40), SR)
    res = CliRunner().invoke(cli, ["listen", str(folder), "--html", str(tmp_path / "listen.html")])
    assert res.exit_code in (0, 1), res.output
    page = load(browser, tmp_path / "listen.html")
    _clean(page)
    assert len(page.audio) == len(NAMES) and len(page.images) == len(NAMES)
    assert all(_shows(page.text, display_path(folder / f"{name}.wav")) >= 1 for name in NAMES)

    root = tmp_path / "dataset"
    for split in ("train", "valid"):
        (root / split).mkdir(parents=True)
    for i, name in enumerate(NAMES[:6]):
        t = np.arange(2 * SR) / SR
        sf.write(root / "train" / f"{name}.wav", (0.3 * np.sin(2 * np.pi * (200 + 90 * i) * t)).astype(np.float32), SR)
    (root / "valid" / f"{NAMES[0]} copy.wav").write_bytes((root / "train" / f"{NAMES[0]}.wav").read_bytes())
    res = CliRunner().invoke(cli, ["audit", str(root), "--no-cache", "--html", str(tmp_path / "audit.html")])
    assert res.exit_code == 1, res.output  # the copy across splits
    page = load(browser, tmp_path / "audit.html")
    _clean(page)
    assert len(page.audio) >= 2
    assert all(_shows(page.text, display_path(root / "train" / f"{name}.wav")) >= 1 for name in NAMES[:6])
