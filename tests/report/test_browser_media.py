"""The HTML building blocks in a real browser: players decode at every rate, length and channel
count a report can be handed, and the checks of `_chromium.Page` do fail on a broken page.

Each test loads one page into the session's headless Chromium (conftest.py); the tests skip when
chromium, chromedriver or selenium is absent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _chromium import load, screenshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signalchain.report.html import (
    MAX_PLAYER_SECONDS,
    PLAYABLE_RATES,
    HtmlReport,
    audio_player,
    image_tag,
)
from signalchain.report.plots import audio_figure

# Rates around what browsers decode (Chromium refuses a WAV under 3000 Hz), MP3's own rates, and
# far outside; lengths around one MP3 frame (1152 samples); channel counts MP3 cannot hold.
RATES = (1, 100, 2999, 7999, 8000, 11025, 16000, 22050, 44100, 48000, 96000, 192000, 384000, 1_000_000)
LENGTHS = (0, 1, 10, 1151, 1152, 4000)
CHANNELS = (1, 2, 6)
CONTENT = ("noise", "zeros", "nan", "inf", "huge")


def _audio(kind: str, channels: int, n: int, rng: np.random.Generator) -> np.ndarray:
    x = 0.3 * rng.standard_normal((channels, n)).astype(np.float32)
    if kind == "zeros":
        x[:] = 0.0
    elif kind == "nan" and n:
        x[:, ::3] = np.nan
    elif kind == "inf" and n:
        x[:, ::2] = np.inf
        x[:, 1::2] = -np.inf
    elif kind == "huge":
        x *= 1e30
    return x


def _player_page(tmp: Path, cases: list[tuple[int, int, int, str]], seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    cards = [f'<div class="example">{audio_player(_audio(kind, c, n, rng), sr, f"case {i}")}</div>'
             for i, (sr, n, c, kind) in enumerate(cases)]
    page = HtmlReport("signalchain players")
    page.section("players", "".join(cards))
    return page.write(tmp / "players.html")


def _expect(page: Any, cases: list[tuple[int, int, int, str]]) -> None:
    """Every case with at least one sample's worth of sound at the player's rate has a player that
    decodes to the audio's own duration (MP3 pads a little; a player holds at most
    MAX_PLAYER_SECONDS); the others say why there is none."""
    by_label = {a["label"]: a for a in page.audio}
    assert not page.problems(), page.problems()
    lo, hi = PLAYABLE_RATES
    for i, (sr, n, _c, _kind) in enumerate(cases):
        seconds = min(n / sr, MAX_PLAYER_SECONDS)
        played_rate = sr if lo <= sr <= hi else (lo if sr < lo else 48000)
        if seconds * played_rate < 1:  # under one sample at the player's rate: a note, or a click
            continue
        assert f"case {i}" in by_label, (sr, n, "no player")
        duration = float(by_label[f"case {i}"]["duration"])
        assert math.isclose(duration, seconds, rel_tol=0.05, abs_tol=0.03), (sr, n, duration, seconds)
    assert page.text.count("nothing to play") == len(cases) - len(page.audio)


@pytest.mark.slow
def test_players_decode_at_every_rate_length_and_channel_count(browser: Any, tmp_path: Path) -> None:
    # every rate meets every length; channel counts and contents take turns (hypothesis mixes them)
    cases = [(sr, n, CHANNELS[(i + j) % len(CHANNELS)], CONTENT[(i + j) % len(CONTENT)])
             for i, sr in enumerate(RATES) for j, n in enumerate(LENGTHS)]
    page = load(browser, _player_page(tmp_path, cases))
    assert len(page.audio) >= len(cases) // 2  # the grid is mostly playable: the checks saw players
    _expect(page, cases)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(st.tuples(st.one_of(st.sampled_from(RATES), st.integers(1, 400_000)), st.integers(0, 9000),
                                st.integers(1, 8), st.sampled_from(CONTENT)), min_size=1, max_size=6),
       seed=st.integers(0, 2**16))
def test_any_audio_a_report_is_handed_plays_for_its_duration(
    browser: Any, tmp_path_factory: pytest.TempPathFactory, cases: list[tuple[int, int, int, str]], seed: int
) -> None:
    _expect(load(browser, _player_page(tmp_path_factory.mktemp("players"), cases, seed)), cases)


@pytest.mark.slow
def test_audio_figure_of_empty_or_odd_audio_is_a_picture(browser: Any, tmp_path: Path) -> None:
    """The listen page draws each file; a file with no samples once stopped the whole page."""
    odd = [np.zeros((1, 0)), np.zeros((2, 0)), np.zeros(1), np.full((1, 100), np.nan), np.full((2, 50), np.inf)]
    page = HtmlReport("signalchain figures")
    page.section("figures", "".join(image_tag(audio_figure(x, sr, f"odd {i}"), f"odd {i}")
                                    for i, x in enumerate(odd) for sr in (16000, None)))
    shown = load(browser, page.write(tmp_path / "figures.html"))
    assert len(shown.images) == 2 * len(odd)
    assert not shown.problems(), shown.problems()


def test_the_checks_fail_on_a_broken_page(browser: Any, tmp_path: Path) -> None:
    """Each kind of breakage is seen: the page checks are not vacuous."""
    broken = tmp_path / "broken.html"
    broken.write_text(
        "<!DOCTYPE html><html><head><title>broken</title></head><body>"
        '<img alt="bad png" src="data:image/png;base64,iVBORw0KGgoAAAA=">'
        '<audio title="bad wav" controls preload="none" src="data:audio/wav;base64,UklGRgAAAABXQVZF"></audio>'
        '<audio title="no samples" controls preload="none" src="data:audio/wav;base64,'
        'UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA="></audio>'
        '<img alt="far" src="http://example.invalid/x.png">'
        "<script>window.__signalchain_pwned = 'script'; throw new Error('boom');</script>"
        "</body></html>")
    page = load(browser, broken)
    assert [i["alt"] for i in page.broken_images] == ["bad png", "far"]
    assert [a["label"] for a in page.silent_players] == ["bad wav", "no samples"]
    assert any("boom" in e["message"] for e in page.console_errors)
    assert "http://example.invalid/x.png" in page.outside_refs
    assert page.scripts == 1 and page.pwned == "script"
    assert len(page.problems()) >= 7


def test_a_missing_report_is_an_error_not_the_browsers_error_page(browser: Any, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no report at"):
        load(browser, tmp_path / "never-written.html")


def test_screenshot_is_a_png_of_the_viewport_or_the_whole_page(browser: Any, tmp_path: Path) -> None:
    from PIL import Image

    page = HtmlReport("signalchain screenshot")
    page.section("tall", "<p>line</p>" * 200)  # taller than the viewport
    load(browser, page.write(tmp_path / "tall.html"))
    view = screenshot(browser, tmp_path / "view.png", 800, 600)
    whole = screenshot(browser, tmp_path / "whole.png", 800, 600, full_page=True)
    with Image.open(view) as v, Image.open(whole) as w:
        assert v.format == "PNG" and v.size == (800, 600)
        assert w.size[0] == 800 and w.size[1] > 2000


def test_without_chromium_or_its_driver_the_reason_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What the `browser` fixture skips with (no browser needed for this one)."""
    import _chromium

    monkeypatch.setattr(_chromium.shutil, "which", lambda name: None)
    monkeypatch.setattr(_chromium, "CHROMIUM_DEFAULT", str(tmp_path / "no-chromium"))
    monkeypatch.setattr(_chromium, "CHROMEDRIVER_DEFAULT", str(tmp_path / "no-driver"))
    assert "apt-get install -y chromium" in _chromium.find_browser()
    (tmp_path / "no-chromium").write_text("")
    assert "apt-get install -y chromium-driver" in _chromium.find_browser()
    (tmp_path / "no-driver").write_text("")
    assert _chromium.find_browser() == (str(tmp_path / "no-chromium"), str(tmp_path / "no-driver"))
