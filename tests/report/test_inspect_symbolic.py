"""The inspect page of a symbolic golden: a piano roll of each notes stage beside each caption, the
player of its rendering, symbolic tokens as vocabulary strings with the decoded notes' roll."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from _symbolic_golden import CAPTIONS, source_notes, symbolic_golden
from click.testing import CliRunner

from signalchain.cli import cli
from signalchain.golden import load_golden
from signalchain.report import render_inspect
from signalchain.symbolic import render as R


@pytest.fixture(autouse=True)
def fallback_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "find_fluidsynth", lambda: None)


def _page(folder: Path, **kw) -> str:
    return render_inspect(load_golden(symbolic_golden(folder, **kw))).render()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The page of the full symbolic golden, drawn once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(R, "find_fluidsynth", lambda: None)
        return _page(tmp_path_factory.mktemp("symbolic") / "g")


def _card(page: str, i: int) -> str:
    return page.split(f"<b>example {i}</b>")[1].split('<div class="example">')[0].split("</section>")[0]


def test_each_example_card_has_its_caption_piano_rolls_and_players(page: str) -> None:
    for i, caption in enumerate(CAPTIONS):
        card = _card(page, i)
        assert caption in card
        stages = ("midi.source", "notes.augmented", "notes.decoded")
        assert f'alt="piano roll of example {i}: {", ".join(stages)}" src="data:image/png;base64,' in card
        for stage in stages:
            assert f'title="{stage} #{i} rendered"' in card or i == 2  # the empty crop has nothing to play
        assert "rendered by additive fallback (no fluidsynth on PATH)" in card
    assert _card(page, 2).count("nothing to play") == 3


def test_the_players_hold_audio(page: str) -> None:
    players = re.findall(r'<audio controls preload="none" title="([^"]+) rendered" src="data:audio/(\w+);base64,', page)
    assert ("midi.source #0", "mpeg") in players and ("notes.decoded #1", "mpeg") in players


def test_notes_stage_sections_list_the_examples_and_draw_example_0(page: str) -> None:
    section = page.split('id="stage-midi.source"')[1].split("<section")[0]
    assert "scale.mid" in section and "3/4" in section and "8 notes over 4.00 beats" in section
    assert "6 drum notes" in section and "program 33 (bass)" in section
    assert section.count("<audio") == 2 and 'alt="piano roll of midi.source #0"' in section
    assert "'rendered'" not in section  # where the WAV lies is shown as players, not as numbers


def test_symbolic_tokens_show_their_words_and_the_decoded_roll(page: str) -> None:
    section = page.split('id="stage-tokens"')[1].split("<section")[0]
    assert "REMI tokens, 44 in the vocabulary" in section
    assert "BOS_None EOS_None Bar_None Position_0" in section
    # the vocabulary summarised in the meta table's row, not printed whole nor as a Python list
    assert "<code>vocab</code></td><td>44 items: PAD_None, BOS_None, EOS_None, Bar_None, …</td>" in section
    assert "stage notes.decoded" in section and 'alt="piano roll of notes.decoded #0"' in section


def test_without_a_decoded_stage_the_page_says_tokens_are_not_decoded_here(tmp_path: Path) -> None:
    section = _page(tmp_path / "g", decoded=False).split('id="stage-tokens"')[1].split("<section")[0]
    assert "a report cannot decode tokens" in section and "piano roll" not in section


@pytest.mark.slow
def test_a_garbage_notes_table_still_draws(tmp_path: Path) -> None:
    notes = source_notes().copy()
    notes[0, 2] = np.nan
    notes[1, 3] = -4.0
    notes[2, 1] = 1e6
    notes[3, 2] = 1e7
    page = _page(tmp_path / "g", notes=notes)
    assert page.count('alt="piano roll of example ') == 3 and page.count('alt="piano roll of midi.source #0"') == 1


@pytest.mark.slow
def test_cli_inspect_of_a_symbolic_golden(tmp_path: Path) -> None:
    folder = symbolic_golden(tmp_path / "g")
    res = CliRunner().invoke(cli, ["inspect", str(folder), "--html", str(tmp_path / "i.html"),
                                   "--json", str(tmp_path / "i.json")])
    assert res.exit_code == 0, res.output
    assert "inspect.no_audio" not in (tmp_path / "i.json").read_text()  # its notes are heard
    assert 'alt="piano roll of midi.source #0"' in (tmp_path / "i.html").read_text()
