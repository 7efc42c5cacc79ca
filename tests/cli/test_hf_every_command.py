"""A saved HF MusicGen on every command that takes a pipeline: `--hf-musicgen DIR --data DS` on capture,
compare, verify and bisect --checkpoints, or `hf_musicgen`/`data` in the project configuration; and
`HFMusicgenPipeline.from_pretrained`, which finds the folder's processor or tokenizer."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

pytest.importorskip("transformers")

from signalchain.cli import cli  # noqa: E402
from signalchain.integrations.hf_musicgen import HFMusicgenPipeline  # noqa: E402
from signalchain.reference.hf.export import write_audiofolder, write_model  # noqa: E402

SET = ("--hf-set", "segment_seconds=1.5")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-every")
    return write_model(root / "model"), write_audiofolder(root / "data", n=10)


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_compare_reruns_a_saved_model_named_on_the_command_line(saved, tmp_path) -> None:
    model, data = saved
    hf = ("--hf-musicgen", str(model), "--data", str(data), *SET)
    res = _run("capture", *hf, "--out", str(tmp_path / "golden"))
    assert res.exit_code == 0, res.output
    res = _run("compare", str(tmp_path / "golden"), *hf, "--json", str(tmp_path / "c.json"))
    assert res.exit_code == 0, res.output
    assert f"re-running pipeline --hf-musicgen {model} (from --hf-musicgen)" in res.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["comparison"]["identical"] and doc["pipeline"]["spec"] == f"--hf-musicgen {model}"
    # a different setting is a different run: the comparison sees it
    res = _run("compare", str(tmp_path / "golden"), "--hf-musicgen", str(model), "--data", str(data),
               "--hf-set", "segment_seconds=1.0")
    assert res.exit_code == 1, res.output


def test_the_project_configuration_names_the_saved_model(saved, tmp_path, monkeypatch) -> None:
    model, data = saved
    (tmp_path / "signalchain.toml").write_text(
        f'hf_musicgen = "{model}"\ndata = ["{data}"]\nhf_set = {{segment_seconds = 1.5}}\nout = "golden"\n')
    monkeypatch.chdir(tmp_path)
    res = _run("capture")
    assert res.exit_code == 0, res.output
    assert "(from signalchain.toml)" in res.output
    res = _run("compare", "golden", "--json", "c.json")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "c.json").read_text())["pipeline"]["source"] == "signalchain.toml"


def test_usage_errors_of_the_new_options(saved, tmp_path) -> None:
    model, data = saved
    for argv, needle in ((("compare", str(tmp_path), str(tmp_path), "--hf-musicgen", str(model)), "not both"),
                         (("verify", "--family", "data", "--before", "x.py:p", "--hf-musicgen", str(model)),
                          "not both"),
                         (("compare", str(tmp_path), "--data", str(data)), "go with --hf-musicgen")):
        res = _run(*argv)
        assert res.exit_code == 2 and needle in res.stderr, res.output
        assert res.stderr.count("\n") == 1


@pytest.mark.slow
def test_verify_runs_both_states_on_the_saved_model(saved, tmp_path) -> None:
    model, data = saved
    res = _run("verify", "--hf-musicgen", str(model), "--data", str(data), *SET, "--family", "data", "--seeds", "1",
               "--control", "none", "--json", str(tmp_path / "v.json"))
    assert res.exit_code in (0, 1, 3), res.output  # a clean model has no failure to fix: the verdict says so
    assert f"before: pipeline --hf-musicgen {model} (from the command line)" in res.output
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["pipelines"]["before"]["spec"] == doc["pipelines"]["after"]["spec"] == f"--hf-musicgen {model}"


@pytest.mark.slow
def test_bisect_checkpoints_of_the_saved_model(saved, tmp_path) -> None:
    from safetensors.torch import save_model
    from transformers import MusicgenForConditionalGeneration

    model, data = saved
    hf = ("--hf-musicgen", str(model), "--data", str(data), *SET)
    assert _run("capture", *hf, "--out", str(tmp_path / "golden")).exit_code == 0
    weights = MusicgenForConditionalGeneration.from_pretrained(str(model))
    save_model(weights, str(tmp_path / "ckpt-1.safetensors"))  # both drop the tied copy of T5's embedding
    weights.save_pretrained(str(tmp_path / "checkpoint-2"))
    res = _run("bisect", str(tmp_path / "golden"), "--checkpoints", str(tmp_path / "c*"), *hf,
               "--json", str(tmp_path / "b.json"))
    assert res.exit_code == 0, res.output  # two healthy ends: nothing to bisect, said as a warning
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["pipeline"]["source"] == "--hf-musicgen" and doc["pipeline"]["spec"] == f"--hf-musicgen {model}"
    assert all(p["loaded"] for p in doc["bisect"]["probes"])


def test_from_pretrained_finds_the_saved_tokenizer(saved) -> None:
    model, data = saved
    pipe = HFMusicgenPipeline.from_pretrained(model, data=data, segment_seconds=1.5, lr=3e-4)
    assert pipe.tokenizer is not None and pipe.lr == 3e-4 and pipe.name == f"hf-musicgen:{model.name}"
    assert pipe.golden_batch(0).captions == pipe.golden_batch(0).captions  # a pipeline, ready to run
    with pytest.raises(ValueError, match=r"HFMusicgenPipeline\.from_pretrained\(folder, data=\.\.\.\)"):
        HFMusicgenPipeline(str(model), data=data)
    with pytest.raises(Exception, match="no config.json"):
        HFMusicgenPipeline.from_pretrained(data, data=data)
