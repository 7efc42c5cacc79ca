"""`tolerances.json`: written beside a golden's files, read strictly, every refusal naming file and field."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from signalchain import GoldenFileError, Tolerance, load_golden, record, save_golden, tap
from signalchain.golden import TOLERANCES, read_tolerances, write_tolerances


def golden_trace():
    with record(values=True) as t:
        tap("tokens", np.arange(8).reshape(2, 4))
        tap("logits", np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    return t


GOOD = {"schema": "signalchain.tolerances", "schema_version": 1, "runs": 3, "margin": 10.0,
        "stages": {"logits": {"rtol": 1e-5, "atol": 1e-4}}}


def write(folder, text):
    folder.mkdir(exist_ok=True)
    (folder / TOLERANCES).write_text(text, encoding="utf-8")
    return folder


def test_round_trip_and_absence(tmp_path):
    assert read_tolerances(tmp_path) is None
    path = write_tolerances(tmp_path, {"logits": Tolerance(2e-5, 3e-4)}, runs=4, margin=10)
    assert path == tmp_path / TOLERANCES
    assert json.loads(path.read_text())["runs"] == 4
    assert read_tolerances(tmp_path, golden_trace()) == {"logits": Tolerance(2e-5, 3e-4)}


def test_a_golden_may_be_recaptured_over_its_tolerances_file(tmp_path):
    folder = tmp_path / "g"
    save_golden(folder, golden_trace(), {})
    write_tolerances(folder, {"logits": Tolerance(2e-5, 3e-4)}, runs=2, margin=1)
    load_golden(folder)  # the loader does not mind the file
    save_golden(folder, golden_trace(), {})  # and capture does not refuse it as foreign


def _edit(**changes):
    doc = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if value is KeyError:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc)


@pytest.mark.parametrize("text, match", [
    ("[]", r"is a JSON list, expected an object with fields schema, schema_version"),
    ("{", r"is not valid JSON"),
    (_edit(margin=float("nan")), r"is not valid JSON \(NaN is not JSON\)"),
    ('{"schema": 1, "schema": 2}', r"key 'schema' appears twice"),
    (_edit(extra=1), r"field 'extra' is unknown"),
    (_edit(runs=KeyError), r"field 'runs' is missing"),
    (_edit(schema="other"), r"field schema is 'other', expected 'signalchain.tolerances'"),
    (_edit(schema_version=True), r"field schema_version is True, expected 1"),
    (_edit(runs=1), r"field runs is 1, expected an integer >= 2"),
    (_edit(margin="10"), r"field margin is '10', expected a finite number >= 1"),
    (_edit(stages=[]), r"field stages is a list, expected an object"),
    (_edit(stages={"logits": {"rtol": 1e-5}}), r"field stages.logits is \{\"rtol\": 1e-05\}, expected exactly"),
    (_edit(stages={"logits": {"rtol": -1, "atol": 0}}), r"field stages.logits.rtol is -1, expected a finite"),
    (_edit(stages={"logits": {"rtol": 0, "atol": False}}), r"field stages.logits.atol is False, expected a finite"),
    (_edit(stages={"logit": {"rtol": 0, "atol": 0}}), r"field stages: suggested tolerance for stage 'logit', which"),
    (_edit(stages={"tokens": {"rtol": 0, "atol": 0}}), r"field stages: .*'tokens', which is tensor of int64 and is"),
])
def test_refusals_name_the_file_and_field(tmp_path, text, match):
    folder = write(tmp_path / "g", text)
    with pytest.raises(GoldenFileError, match=match) as err:
        read_tolerances(folder, golden_trace())
    assert str(err.value).startswith(f"{folder / TOLERANCES}: ")


def test_links_folders_and_huge_files_are_refused(tmp_path):
    target = write(tmp_path / "real", json.dumps(GOOD)) / TOLERANCES
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(target, linked / TOLERANCES)
    with pytest.raises(GoldenFileError, match="is not a regular file"):
        read_tolerances(linked)
    folder = tmp_path / "dir"
    (folder / TOLERANCES).mkdir(parents=True)
    with pytest.raises(GoldenFileError, match="is not a regular file"):
        read_tolerances(folder)
    big = write(tmp_path / "big", " " * (1 << 20) + json.dumps(GOOD))
    with pytest.raises(GoldenFileError, match="more than a tolerances file may hold"):
        read_tolerances(big)
