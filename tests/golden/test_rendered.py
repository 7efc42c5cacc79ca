"""Notes stages in a golden batch: rendered to audio/<stage>.wav at capture, listed and checksummed in
the manifest, checked and decoded on load; a forged or damaged rendering is refused like any file."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import golden_helpers as h  # noqa: E402

from signalchain import record, tap  # noqa: E402
from signalchain.errors import GoldenFileError  # noqa: E402
from signalchain.golden import compare_traces, load_golden, save_golden  # noqa: E402
from signalchain.golden.rendered import RENDER_GAP_SECONDS  # noqa: E402
from signalchain.symbolic import NOTE_COLUMNS, notes_table  # noqa: E402
from signalchain.symbolic import render as R  # noqa: E402


@pytest.fixture(autouse=True)
def fallback_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The additive renderer: fast, and the same on every machine (FluidSynth is tested in test_render)."""
    monkeypatch.setattr(R, "find_fluidsynth", lambda: None)


def _source() -> np.ndarray:
    rows = [(0, 60 + i, 0.5 * i, 0.5, 60 + 8 * i, 0, 0) for i in range(8)]
    rows += [(1, 48 + i, float(i), 1.0, 90, 33, 0) for i in range(3)] + [(1, 36, 0.0, 0.25, 100, 0, 1)]
    return notes_table(rows)  # example 2 has no notes: an empty crop still gets its (silent) segment


def _symbolic_trace(decoded: np.ndarray | None = None):
    notes_meta = dict(columns=NOTE_COLUMNS, unit="beat", tempos=[120.0, 90.0, 100.0],
                      time_signatures=[[4, 4], [3, 4], [4, 4]], files=["a.mid", "b.mid", "c.mid"])
    with record(values=True) as t:
        tap("midi.source", _source(), **notes_meta)
        tap("caption", ["a piano scale", "a bass line and a kick in 3/4", "nothing at all"])
        tap("tokens", np.arange(30).reshape(3, 10), kind="symbolic", tokenizer="REMI", cardinality=30,
            vocab=[f"Pitch_{i}" for i in range(30)])
        tap("notes.decoded", _source() if decoded is None else decoded, **notes_meta)
        tap("loss", 3.2)
    return t


@pytest.fixture
def golden(tmp_path: Path) -> tuple[Path, object]:
    trace = _symbolic_trace()
    return save_golden(tmp_path / "g", trace, {"pipeline": "tiny-symbolic", "seed": 0}), trace


def test_each_notes_stage_is_rendered_and_listed(golden) -> None:
    path, _ = golden
    m = h.read_manifest(path)
    assert set(m["files"]) == {"values.safetensors", "audio/midi.source.wav", "audio/notes.decoded.wav"}
    stages = {s["name"]: s for s in m["stages"]}
    ref = stages["midi.source"]["meta"]["rendered"]
    assert ref["path"] == "audio/midi.source.wav" and len(ref["segments"]) == 3
    assert ref["renderer"] == "additive fallback (no fluidsynth on PATH)"
    assert "rendered" not in stages["tokens"]["meta"] and "rendered" not in stages["caption"]["meta"]
    for rel, sha in m["files"].items():
        assert h.file_sha(path / rel) == sha


def test_load_decodes_each_example_where_its_segment_says(golden) -> None:
    path, trace = golden
    g = load_golden(path)
    assert set(g.renderings) == {"midi.source", "notes.decoded"}
    r = g.renderings["midi.source"]
    assert r.audio.shape[0] == 1 and r.sample_rate == R.RENDER_RATE
    (a0, a1), (b0, b1), (c0, c1) = r.segments
    assert a0 == 0 and b0 - a1 == c0 - b1 == round(RENDER_GAP_SECONDS * r.sample_rate)
    assert a1 - a0 >= 2.0 * r.sample_rate  # four beats at 120 bpm
    assert c1 == c0  # the example without notes is an empty segment
    assert np.abs(r.example(0)).max() > 0.01 and r.example(2).shape == (1, 0) and r.example(3) is None
    # the rendering is of the notes as captured: a decoded table equal to its source sounds the same
    assert np.array_equal(g.renderings["notes.decoded"].audio, r.audio)
    assert compare_traces(trace, g.trace).identical  # the rendering is for the ear, not compared


def test_a_changed_rendering_is_refused(golden) -> None:
    path, _ = golden
    wav = path / "audio" / "midi.source.wav"
    data = bytearray(wav.read_bytes())
    data[-2:] = b"\x7f\x7f"
    wav.write_bytes(bytes(data))
    with pytest.raises(GoldenFileError, match=r"midi\.source\.wav: sha256 .* does not match the manifest"):
        load_golden(path)


def test_a_rendering_the_manifest_does_not_describe_is_refused(golden, forge) -> None:
    path, _ = golden
    m = forge.read(path)
    notes = next(s for s in m["stages"] if s["name"] == "midi.source")
    notes["meta"]["rendered"]["segments"] = notes["meta"]["rendered"]["segments"][:2]
    forge.write(path, m)
    with pytest.raises(GoldenFileError, match=r"2 segments for the 3 examples of stage 'midi\.source'"):
        load_golden(path)


def test_segments_past_the_end_of_the_file_are_refused(golden, forge) -> None:
    path, _ = golden
    m = forge.read(path)
    notes = next(s for s in m["stages"] if s["name"] == "midi.source")
    lo, hi = notes["meta"]["rendered"]["segments"][-1]
    notes["meta"]["rendered"]["segments"][-1] = [lo, hi + 10**7]
    forge.write(path, m)
    with pytest.raises(GoldenFileError, match=r"midi\.source\.wav: holds \d+ frames at 22050 Hz, not the rendering"):
        load_golden(path)


@pytest.mark.parametrize("segments, words", [([[5, 2]], "is not an interval"), ([[0, 9], [4, 12]], "is not an")])
def test_disordered_segments_are_refused(golden, forge, segments, words) -> None:
    path, _ = golden
    m = forge.read(path)
    next(s for s in m["stages"] if s["name"] == "midi.source")["meta"]["rendered"]["segments"] = segments
    forge.write(path, m)
    with pytest.raises(GoldenFileError, match=rf"meta\.rendered\.segments: .* {words}"):
        load_golden(path)


def test_a_rendering_on_a_stage_that_holds_no_notes_is_refused(golden, forge) -> None:
    path, _ = golden
    m = forge.read(path)
    stages = {s["name"]: s for s in m["stages"]}
    stages["tokens"]["meta"]["rendered"] = stages["midi.source"]["meta"].pop("rendered")
    forge.write(path, m)
    with pytest.raises(GoldenFileError, match=r"stage 'tokens' is not a notes table"):
        load_golden(path)


@pytest.mark.parametrize("rel", ["../outside.wav", "audio/../../x.wav", "/etc/passwd", "audio/a b.wav"])
def test_a_rendering_outside_the_audio_folder_is_refused(golden, forge, rel) -> None:
    path, _ = golden
    m = forge.read(path)
    next(s for s in m["stages"] if s["name"] == "midi.source")["meta"]["rendered"]["path"] = rel
    forge.write(path, m)
    with pytest.raises(GoldenFileError, match=r"meta\.rendered\.path: .* is not a file of the golden's audio/"):
        load_golden(path)


def test_two_stages_cannot_share_a_rendering(golden, forge) -> None:
    path, _ = golden
    m = forge.read(path)
    stages = {s["name"]: s for s in m["stages"]}
    stages["notes.decoded"]["meta"]["rendered"]["path"] = "audio/midi.source.wav"
    del m["files"]["audio/notes.decoded.wav"]
    forge.write(path, m)
    with pytest.raises(GoldenFileError, match=r"'audio/midi\.source\.wav' is also the WAV of stage 'midi\.source'"):
        load_golden(path)


def test_a_rendering_the_files_list_omits_is_refused(golden, forge) -> None:
    path, _ = golden
    m = forge.read(path)
    del m["files"]["audio/notes.decoded.wav"]
    forge.write(path, m)
    with pytest.raises(GoldenFileError, match=r"files: does not list 'audio/notes\.decoded\.wav'"):
        load_golden(path)


def test_a_symlinked_rendering_is_refused(golden) -> None:
    path, _ = golden
    wav = path / "audio" / "notes.decoded.wav"
    target = path.parent / "elsewhere.wav"
    target.write_bytes(wav.read_bytes())
    wav.unlink()
    wav.symlink_to(target)
    with pytest.raises(GoldenFileError, match=r"notes\.decoded\.wav: is a symbolic link"):
        load_golden(path)


def test_a_tap_cannot_plant_its_own_rendering(tmp_path: Path) -> None:
    with record(values=True) as t:
        tap("midi.source", _source(), columns=NOTE_COLUMNS, rendered={"path": "audio/../../x.wav"})
    g = load_golden(save_golden(tmp_path / "g", t, {}))
    assert g.trace.get("midi.source").meta["rendered"]["path"] == "audio/midi.source.wav"


def test_without_wavs_nothing_is_rendered(tmp_path: Path) -> None:
    path = save_golden(tmp_path / "g", _symbolic_trace(), {}, write_wavs=False)
    assert set(h.read_manifest(path)["files"]) == {"values.safetensors"}
    assert load_golden(path).renderings == {}


def test_a_notes_stage_without_per_example_meta_is_rendered_by_its_rows(tmp_path: Path) -> None:
    with record(values=True) as t:
        tap("notes.generated", _source(), columns=list(NOTE_COLUMNS))  # any stage with the notes columns
        tap("not.notes", np.ones((4, 7), np.float32), columns=["a", "b", "c", "d", "e", "f", "g"])
    g = load_golden(save_golden(tmp_path / "g", t, {}))
    assert set(g.renderings) == {"notes.generated"} and len(g.renderings["notes.generated"].segments) == 2


def test_a_renderer_that_fails_never_stops_a_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "find_fluidsynth", lambda: "/nonexistent/fluidsynth")
    monkeypatch.setenv(R.SOUNDFONT_ENV, str(Path(h.__file__)))  # a file, not a soundfont: never read
    g = load_golden(save_golden(tmp_path / "g", _symbolic_trace(), {}))
    assert g.renderings["midi.source"].renderer.startswith("additive fallback (fluidsynth failed")


def test_a_large_batch_renders_its_first_examples_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from signalchain.golden import rendered

    monkeypatch.setattr(rendered, "MAX_RENDERED_EXAMPLES", 2)
    g = load_golden(save_golden(tmp_path / "g", _symbolic_trace(), {}))
    assert len(g.renderings["midi.source"].segments) == 2
