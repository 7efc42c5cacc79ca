"""The MIDI audit's detector on a planted set (fixed seed): transposed (±1…6 semitones), tempo-changed
and time-stretched (±10 %) and re-voiced copies of training pieces in the test split, among pieces
that are no copy (unrelated ones, and other tunes over a training piece's chords). Recall ≥ 0.95 and
precision ≥ 0.99, each copy found with its partner, its kind and its shift or tempo ratio."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain.audit.leakage import Entry
from signalchain.audit.midi_judge import judge_note_matches
from signalchain.audit.midi_search import NoteMatch, find_note_matches
from signalchain.symbolic.fingerprint import fingerprint_notes
from signalchain.symbolic.random_pieces import planted_set

TRAIN, PER_KIND, DISTRACTORS = 300, 15, 60


@pytest.fixture(scope="module")
def planted() -> tuple[list[Entry], list, dict[int, tuple[int, str]], list[NoteMatch]]:
    splits, truth = planted_set(np.random.default_rng(16), TRAIN, PER_KIND, DISTRACTORS)
    entries, fps = [], []
    for split, pieces in splits.items():
        for i, (rows, tempo) in enumerate(pieces):
            entries.append(Entry(split, f"{split}/{i}.mid", f"{split}/{i}.mid"))
            fps.append(fingerprint_notes(rows, tempo))
    for e, fp in zip(entries, fps):
        e.audio_hash = fp.exact
    matches, _ = find_note_matches(entries, fps)
    return entries, splits["test"], truth, matches


def test_recall_and_precision_on_the_planted_set(planted: tuple) -> None:
    entries, test, truth, matches = planted
    found = {m.a - TRAIN: m for m in matches}  # test entries follow the training ones
    right = [j for j, (src, kind) in truth.items() if j in found and found[j].b == src and found[j].kind == kind]
    recall = len(right) / len(truth)
    precision = len(right) / max(len(found), 1)
    assert len(test) == 4 * PER_KIND + DISTRACTORS
    assert recall >= 0.95, f"recall {recall:.3f}: missed {sorted(set(truth) - set(right))}"
    assert precision >= 0.99, f"precision {precision:.3f}: false {sorted(set(found) - set(right))}"


def test_the_shift_and_the_tempo_ratio_are_recovered(planted: tuple) -> None:
    entries, test, truth, matches = planted
    found = {m.a - TRAIN: m for m in matches}
    transposed = [found[j] for j, (_, kind) in truth.items() if kind == "transposed" and j in found]
    assert {m.shift for m in transposed} <= set(range(-6, 7)) - {0} and len({m.shift for m in transposed}) >= 10
    tempo = [found[j] for j in truth if j in found and abs(found[j].tempo_ratio - 1) > 0.02]
    assert len(tempo) >= 2 * PER_KIND * 0.95
    assert all(0.89 <= m.tempo_ratio <= 1.12 for m in tempo)


def test_the_findings_name_both_files_with_shift_and_similarity(planted: tuple) -> None:
    entries, _, _, matches = planted
    findings = {f.id: f for f in judge_note_matches(entries, matches)}
    assert set(findings) == {"split.transposed_copy", "split.alternate_version"}
    t = findings["split.transposed_copy"]
    assert t.stage == "split" and t.severity.value == "error" and t.evidence["splits"] == ["test", "train"]
    pair = t.evidence["pairs"][0]
    assert pair["a"].startswith("test/") and pair["b"].startswith("train/") and pair["shift"] != 0
    assert "semitone" in t.message and "similarity" in t.message
    a = findings["split.alternate_version"]
    assert a.severity.value == "warning" and "tempo ×" in a.message
    assert any(p["revoiced"] for p in a.evidence["pairs"]) and any(p["tempo_ratio"] != 1 for p in a.evidence["pairs"])
