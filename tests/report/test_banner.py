"""report/banner: the verdict banner at the top of every page counts errors and warnings, names the
first error (id, stage, message), and takes its colour from the worst severity."""

from __future__ import annotations

import re

import pytest

from signalchain.findings import Finding, Severity
from signalchain.report.banner import verdict_banner, verdict_of
from signalchain.report.html import HtmlReport


def _f(fid: str, severity: str, stage: str | None = None, message: str = "m") -> Finding:
    return Finding(id=fid, severity=Severity(severity), stage=stage, message=message)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip()


def test_counts_and_first_error_in_the_order_given() -> None:
    findings = [_f("loss.flat", "warning", "loss"), _f("generation.verdict", "info"),
                _f("mask.empty", "error", "mask.loss", "loss mask keeps 0 of 4096 target positions"),
                _f("crop.in_padding", "error", "crop"), _f("audio.dc_offset", "warning", "audio.original")]
    v = verdict_of(findings)
    assert (v.errors, v.warnings, v.infos, v.worst) == (2, 2, 1, "error")
    assert v.first == ("error", "mask.empty", "mask.loss", "loss mask keeps 0 of 4096 target positions")
    text = _text(verdict_banner(findings))
    assert text.startswith("2 errors, 2 warnings, 1 info")
    assert "first error: mask.empty at stage mask.loss: loss mask keeps 0 of 4096 target positions" in text
    assert 'class="banner banner-error"' in verdict_banner(findings)


def test_warnings_only_name_the_first_warning_and_colour_the_banner_amber() -> None:
    html = verdict_banner([_f("generation.verdict", "info"), _f("loss.flat", "warning", None, "flat")])
    assert "banner-warning" in html
    assert _text(html) == "0 errors, 1 warning, 1 info first warning: loss.flat: flat"


@pytest.mark.parametrize("findings, said", [([], "0 errors, 0 warnings no findings"),
                                            ([_f("generation.verdict", "info")],
                                             "0 errors, 0 warnings, 1 info nothing wrong found")])
def test_no_errors_or_warnings_is_a_green_banner(findings: list[Finding], said: str) -> None:
    html = verdict_banner(findings)
    assert "banner-ok" in html and _text(html).startswith(said)
    assert verdict_of(findings).first is None
    assert _text(verdict_banner(findings, "the clean control")).endswith("· the clean control")


def test_the_json_form_of_findings_counts_the_same() -> None:
    objs = [_f("a.b", "error", "crop", "x"), _f("c.d", "warning")]
    dicts = [{"id": f.id, "severity": f.severity.value, "stage": f.stage, "message": f.message} for f in objs]
    assert verdict_of(dicts) == verdict_of(objs)


def test_user_text_in_the_banner_is_escaped() -> None:
    html = verdict_banner([_f("x.y", "error", "<b>stage</b>", "<script>alert(1)</script>")])
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;stage" in html


def test_the_page_opens_with_the_banner_right_under_its_title() -> None:
    page = HtmlReport("signalchain doctor", "families: all", findings=[_f("mask.empty", "error", "mask.loss")])
    page.section("Findings", "<p>table</p>")
    html = page.render()
    assert html.index("<h1>") < html.index('class="banner') < html.index("<section")
    assert 'class="banner' not in HtmlReport("no verdict").render()
