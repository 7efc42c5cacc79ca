"""The inspect page of a symbolic golden in headless Chromium: it loads, needs nothing outside itself,
every piano roll is an image that loads, and every player of a rendering has a source that decodes
to the length of its example's rendering (skips without chromium, chromedriver or selenium)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _chromium import load
from _symbolic_golden import symbolic_golden

from signalchain.golden import load_golden
from signalchain.report import render_inspect
from signalchain.symbolic import render as R


@pytest.mark.slow
@pytest.mark.parametrize("fluidsynth", [False, True], ids=["fallback", "fluidsynth"])
def test_symbolic_inspect_page_plays_and_draws(browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               fluidsynth: bool) -> None:
    if fluidsynth and (R.find_fluidsynth() is None or R.find_soundfont()[0] is None):
        pytest.skip("no fluidsynth or no General MIDI soundfont here")
    if not fluidsynth:
        monkeypatch.setattr(R, "find_fluidsynth", lambda: None)
    g = load_golden(symbolic_golden(tmp_path / "g"))
    page = load(browser, render_inspect(g).write(tmp_path / "inspect.html"))
    assert not page.problems(), "\n".join(page.problems())
    rolls = [i for i in page.images if i["alt"].startswith("piano roll of ")]
    assert len(rolls) >= 6 and all(i["width"] > 200 for i in rolls)
    players = {a["label"]: a for a in page.audio if a["label"].endswith(" rendered")}
    assert {"midi.source #0 rendered", "notes.augmented #1 rendered", "notes.decoded #0 rendered"} <= set(players)
    for label, a in players.items():
        assert a["mime"].startswith("data:audio/"), a
        stage, i = label.removesuffix(" rendered").split(" #")
        r = g.renderings[stage]
        lo, hi = r.segments[int(i)]
        assert math.isclose(float(a["duration"]), (hi - lo) / r.sample_rate, rel_tol=0.05, abs_tol=0.06), (label, a)
    assert ("rendered by fluidsynth" in page.text) == fluidsynth
