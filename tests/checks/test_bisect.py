"""The bisect judge on hand-built outcomes: one verdict finding per status, skips said, JSON shape."""

from __future__ import annotations

import json

import pytest

from signalchain.checks.bisect import judge_bisect
from signalchain.findings import exit_code
from signalchain.records.bisect import BisectOutcome, BisectProbe

CROP = {"stage": "crop", "kind": "tensor", "equal": False,
        "detail": {"mismatches": 2, "fraction": 0.5, "first_index": [0, 0], "golden_value": 100, "new_value": 107}}


def _probe(i: int, verdict: str, role: str = "", **kw) -> BisectProbe:
    return BisectProbe(item=f"c{i}", verdict=verdict, index=i, role=role, extra={"commit": f"sha{i}",
                       "subject": f"commit {i}"}, **kw)


def _outcome(status: str, probes: list[BisectProbe], **kw) -> BisectOutcome:
    return BisectOutcome(mode="commits", status=status, good="c0", bad="c7", n_items=8, probes=probes, **kw)


def test_found_is_one_error_at_the_symptom_stage_with_the_numbers():
    probes = [_probe(0, "good", "good end"), _probe(7, "bad", "bad end", first_divergence="crop", detail=CROP),
              _probe(3, "skip", reason="SyntaxError: invalid syntax"), _probe(4, "bad", first_divergence="crop",
                                                                              detail=CROP)]
    o = _outcome("found", probes, symptom="crop", last_good="c2", runs=3, cached=1, candidates=["c4"],
                 first_bad={"item": "c4", "sha": "sha4", "subject": "commit 4", "diffstat": "x.py | 2 +-",
                            "stage": "crop", "detail": CROP["detail"]})
    found, skipped = judge_bisect(o)
    assert found.id == "bisect.first_bad_commit" and found.stage == "crop" and exit_code([found]) == 1
    assert "c4" in found.message and "'commit 4'" in found.message and "100 → 107" in found.message
    assert "4 golden runs" in found.message and "1 from cache" in found.message
    assert found.evidence["diffstat"] == "x.py | 2 +-" and found.evidence["runs"] == 3
    assert skipped.id == "bisect.skipped" and skipped.severity.value == "info" and "SyntaxError" in skipped.message
    doc = o.to_dict()
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert [p["commit"] for p in doc["skipped"]] == ["sha3"] and doc["probes"][1]["role"] == "bad end"


@pytest.mark.parametrize("status", ["flaky_good", "flaky_bad"])
def test_a_flaky_end_is_a_warning_naming_the_end(status):
    end = "good" if status == "flaky_good" else "bad"
    probes = [_probe(0, "bad" if end == "good" else "good", "good end", reason="diverges at 'crop'"),
              _probe(7, "good", "bad end", reason="identical to the golden")]
    (f,) = judge_bisect(_outcome(status, probes))
    assert f.id == "bisect.flaky" and f.severity.value == "warning" and f.evidence["end"] == end
    assert f"the {end} end" in f.message and exit_code([f]) == 0


def test_ambiguous_lists_the_candidates():
    probes = [_probe(0, "good", "good end"), _probe(7, "bad", "bad end", first_divergence="crop"),
              _probe(3, "good"), _probe(5, "bad", first_divergence="crop"), _probe(4, "skip", reason="ImportError")]
    (f, skip) = judge_bisect(_outcome("ambiguous", probes, candidates=["c4", "c5"], last_good="c3", symptom="crop"))
    assert f.id == "bisect.ambiguous" and f.severity.value == "warning" and "c4, c5" in f.message
    assert f.evidence["candidates"] == ["c4", "c5"] and skip.id == "bisect.skipped"


def test_an_unrunnable_end_is_said_once():
    probes = [_probe(0, "skip", "good end", reason="cannot load pipeline: SyntaxError"), _probe(7, "bad", "bad end")]
    (f,) = judge_bisect(_outcome("unrunnable_end", probes))
    assert f.id == "bisect.unrunnable_end" and "good end c0" in f.message and "SyntaxError" in f.message


def test_checkpoint_outcomes_read_as_checkpoints():
    o = BisectOutcome(mode="checkpoints", status="found", good="step-0", bad="step-9", n_items=4,
                      probes=[BisectProbe("step-3", "bad", first_divergence="logits")], last_good="step-2",
                      first_bad={"item": "step-3", "stage": "logits"}, runs=3)
    (f,) = judge_bisect(o)
    assert f.id == "bisect.first_bad_checkpoint" and "first bad checkpoint step-3" in f.message
