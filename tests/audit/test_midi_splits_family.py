"""The doctor's splits family on a symbolic pipeline whose `splits()` records carry notes tables:
transposed, tempo-changed and duplicated pieces across splits are found at the "split" stage with the
MIDI audit's ids; clean splits stay silent; audio pipelines keep the audio path (audit_notes is not used)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from signalchain.audit.memory import ClipAudit
from signalchain.audit.midi_memory import audit_notes, has_notes
from signalchain.experiments.doctor import run_doctor
from signalchain.findings import Finding
from signalchain.pipeline import ProtocolView
from signalchain.symbolic.random_pieces import random_piece, stretched, transposed

sys.path.insert(0, str(Path(__file__).parent.parent))
from toy_pipeline import ToyPipeline  # noqa: E402


def _pieces(seed: int, n: int) -> list[tuple[np.ndarray, float]]:
    rng = np.random.default_rng(seed)
    return [random_piece(rng) for _ in range(n)]


class SymbolicSplits(ToyPipeline):
    """The toy pipeline with symbolic split lists: records {"notes", "tempo", "caption", "name"}."""

    def __init__(self, leak: bool):
        super().__init__()
        train = _pieces(0, 24)
        test = _pieces(1, 6)
        if leak:
            test[0] = (transposed(train[3][0], 5), train[3][1])
            test[1] = (stretched(train[4][0], 0.9), train[4][1])
            test[2] = train[5]
        self._splits = {s: [{"notes": rows, "tempo": tempo, "caption": f"{s} piece {i}", "name": f"{s}{i}.mid"}
                            for i, (rows, tempo) in enumerate(ps)] for s, ps in (("train", train), ("test", test))}

    def splits(self) -> dict[str, list[Any]]:
        return self._splits


def _loud(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity.value in ("warning", "error")]


def test_symbolic_leaks_are_found_at_the_split_stage() -> None:
    found = _loud(run_doctor(ProtocolView(SymbolicSplits(leak=True)), families=["splits"], seed=0,
                             budget="economy").findings)
    by_id = {f.id: f for f in found}
    assert {"split.transposed_copy", "split.alternate_version", "split.duplicate"} <= set(by_id), \
        [(f.id, f.message[:100]) for f in found]
    assert all(by_id[i].stage == "split" for i in ("split.transposed_copy", "split.alternate_version",
                                                   "split.duplicate"))
    assert "test[0] test0.mid ~ train[3] train3.mid (+5 semitones" in by_id["split.transposed_copy"].message
    assert "tempo ×1.111" in by_id["split.alternate_version"].message


def test_clean_symbolic_splits_stay_silent() -> None:
    found = _loud(run_doctor(ProtocolView(SymbolicSplits(leak=False)), families=["splits"], seed=0,
                             budget="economy").findings)
    assert [f for f in found if f.id.startswith(("split.", "symbolic.", "file."))] == []


def test_audit_notes_judges_each_record() -> None:
    rows, tempo = random_piece(np.random.default_rng(2))
    splits = {"train": [{"notes": rows, "tempo": tempo}, {"notes": np.zeros((0, 7), np.float32)}],
              "test": [{"notes": np.ones((3, 4))}, {"notes": transposed(rows, -2), "metadata": {"bpm": tempo}}]}
    assert has_notes(splits) and not has_notes({"train": [{"audio": np.zeros(8), "notes": rows}]})
    audit = audit_notes(splits)
    assert isinstance(audit, ClipAudit) and not audit.has_audio and audit.matches == []
    ids = sorted(f.id for f in audit.findings)
    assert ids == ["file.unreadable", "split.transposed_copy", "symbolic.empty"]
    bad = next(f for f in audit.findings if f.id == "file.unreadable")
    assert bad.message.startswith("test[0]: the record's notes cannot be read (notes must be a notes table [N, 7]")
    (m,) = audit.note_matches
    assert m.shift == -2 and m.kind == "transposed"


@pytest.mark.parametrize("records", [[], [{"caption": "metadata only"}]])
def test_records_without_notes_keep_the_audio_path(records: list) -> None:
    assert not has_notes({"train": records})


def test_three_splits_report_each_pair_once_from_the_evaluation_side() -> None:
    pieces = _pieces(4, 12)
    rows, tempo = pieces[0]
    splits = {"train": [{"notes": r, "tempo": t} for r, t in pieces[:10]],
              "valid": [{"notes": transposed(rows, 2), "tempo": tempo}, {"notes": pieces[10][0], "tempo": 90.0}],
              "test": [{"notes": transposed(rows, 3), "tempo": tempo}, {"notes": pieces[11][0], "tempo": 90.0}]}
    audit = audit_notes(splits)
    pairs = sorted((audit.entries[m.a].ref, audit.entries[m.b].ref, m.shift) for m in audit.note_matches)
    assert pairs == [("test[0]", "train[0]", 3), ("test[0]", "valid[0]", 1), ("valid[0]", "train[0]", 2)]
    # one finding per evaluation split: test[0] is quoted with its best partner
    assert {f.id for f in audit.findings} == {"split.transposed_copy"} and len(audit.findings) == 2
