"""`signalchain doctor --hf-musicgen MODEL_DIR --data DATA`: a saved HF MusicGen, no Python written."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

pytest.importorskip("transformers")

from signalchain.cli import cli as main  # noqa: E402
from signalchain.reference.hf.export import write_audiofolder, write_model  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return write_model(root / "model"), write_audiofolder(root / "data", n=10)


def test_doctor_runs_on_a_saved_model_and_an_audiofolder(saved, tmp_path) -> None:
    model, data = saved
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["doctor", "--hf-musicgen", str(model), "--data", str(data), "--family", "data",
                                    "--hf-set", "segment_seconds=1.5", "--json", str(out)])
    assert res.exit_code in (0, 1), res.output
    report = json.loads(out.read_text())
    assert report["pipeline"] == f"--hf-musicgen {model}"
    assert not [f for f in report["findings"] if f["id"] == "internal.check_failed"]


def test_usage_errors_name_what_is_missing(saved) -> None:
    model, data = saved
    r = CliRunner().invoke(main, ["doctor", "--hf-musicgen", str(model)])
    assert r.exit_code == 2 and "--hf-musicgen needs --data" in r.output
    r = CliRunner().invoke(main, ["doctor", "--hf-musicgen", str(model), "--data", str(data), "--hf-set", "lr=fast"])
    assert r.exit_code == 2 and "'fast' is not a float" in r.output
    r = CliRunner().invoke(main, ["doctor", "--hf-musicgen", str(data), "--data", str(data)])
    assert r.exit_code == 2 and "no config.json" in r.output
