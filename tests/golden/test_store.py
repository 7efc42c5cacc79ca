import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from signalchain import GoldenFileError, compare_traces, load_golden, save_golden
from signalchain.experiments import run_golden
from signalchain.golden import SCHEMA_VERSION, collect_provenance
from signalchain.golden import store as store_mod


@pytest.fixture
def golden_dir(tmp_path, toy):
    run = run_golden(toy, seed=3)
    path = save_golden(tmp_path / "g", run.trace, collect_provenance(toy, spec="toy_pipeline:make", seed=3))
    return path, run


def test_save_load_compare_identity(golden_dir):
    path, run = golden_dir
    g = load_golden(path)
    assert g.trace.names() == run.trace.names()
    assert compare_traces(g.trace, run.trace).identical
    for a, b in zip(g.trace, run.trace):
        assert a.kind == b.kind and a.dtype == b.dtype and a.shape == b.shape and a.summary == b.summary
        if isinstance(a.value, np.ndarray):
            assert a.value.dtype == b.value.dtype and np.array_equal(a.value, b.value, equal_nan=True)
        else:
            assert a.value == b.value
    assert g.provenance["seed"] == 3 and g.provenance["pipeline"] == "toy"
    assert g.provenance["packages"]["python"]


def test_layout_manifest_values_and_one_wav_per_audio_stage(golden_dir):
    path, run = golden_dir
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION
    audio_stages = [r.name for r in run.trace if r.kind == "audio"]
    wavs = sorted(p.name for p in (path / "audio").iterdir())
    assert wavs == sorted(f"{s}.wav" for s in audio_stages)
    for st in manifest["stages"]:
        assert len(st["value"]["sha256"]) == 64
    import soundfile as sf

    info = sf.info(str(path / "audio" / "audio.original.wav"))
    assert info.samplerate == 8000 and info.channels == 2


def test_values_keep_dtypes_including_bool_and_nonfinite_scalars(tmp_path):
    from signalchain import record, tap

    with record(values=True) as t:
        tap("mask.loss", np.array([[True, False]]))
        tap("loss", float("nan"))
        tap("half", np.ones(3, dtype=np.float16))
    g = load_golden(save_golden(tmp_path / "g", t, {}))
    assert g.trace.value("mask.loss").dtype == np.bool_
    assert np.isnan(g.trace.value("loss"))
    assert g.trace.value("half").dtype == np.float16


def test_truncated_values_file_is_refused(golden_dir):
    path, _ = golden_dir
    f = path / "values.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(GoldenFileError, match=r"values\.safetensors: sha256 .* does not match"):
        load_golden(path)


def test_bit_flip_is_refused(golden_dir):
    path, _ = golden_dir
    f = path / "values.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(GoldenFileError, match="values.safetensors.*changed or damaged"):
        load_golden(path)


def test_tampered_value_with_refreshed_file_hash_is_refused(golden_dir, forge):
    path, _ = golden_dir
    from safetensors.numpy import load_file

    arrays = load_file(str(path / "values.safetensors"))
    arrays["tokens"] = arrays["tokens"] + 1
    save_file(arrays, str(path / "values.safetensors"))
    forge.refresh_file(path, "values.safetensors")  # file hash refreshed and the manifest resealed
    with pytest.raises(GoldenFileError, match="value of stage 'tokens' does not match its sha256"):
        load_golden(path)


def test_wrong_schema_version_is_refused(golden_dir):
    path, _ = golden_dir
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["schema_version"] = 99
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GoldenFileError, match=r"manifest\.json: schema version 99 is not supported"):
        load_golden(path)


def test_damaged_manifest_is_refused(golden_dir):
    path, _ = golden_dir
    m = path / "manifest.json"
    m.write_text(m.read_text()[:200])
    with pytest.raises(GoldenFileError, match=r"manifest\.json: is not valid JSON"):
        load_golden(path)


def test_pickle_instead_of_safetensors_is_refused_without_unpickling(golden_dir, monkeypatch, forge):
    path, _ = golden_dir
    f = path / "values.safetensors"
    f.write_bytes(pickle.dumps({"tokens": np.zeros(3)}, protocol=4))
    forge.refresh_file(path, "values.safetensors")
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled!"))
    with pytest.raises(GoldenFileError, match="values.safetensors: holds a pickle"):
        load_golden(path)


def test_a_safetensors_header_that_begins_like_a_pickle_is_read() -> None:
    """A header of 896 bytes is written b"\\x80\\x03\\0\\0\\0\\0\\0\\0{": pickle protocol 3's magic, then JSON."""
    from signalchain.golden._files import refuse_code

    refuse_code(Path("values.safetensors"), (896).to_bytes(8, "little") + b'{"a"')  # no error
    with pytest.raises(GoldenFileError, match="holds a pickle"):
        refuse_code(Path("values.safetensors"), pickle.dumps({"tokens": [0] * 3}, protocol=3)[:9])


def test_torch_save_archive_is_refused(golden_dir):
    path, _ = golden_dir
    f = path / "values.safetensors"
    torch.save({"tokens": torch.zeros(3)}, str(f))
    with pytest.raises(GoldenFileError, match="pickle"):
        load_golden(path)


def test_pickle_storage_in_manifest_is_refused(golden_dir, forge):
    path, _ = golden_dir
    manifest = forge.read(path)
    manifest["stages"][0]["value"] = {"storage": "pickle", "path": "x.pkl"}
    forge.write(path, manifest)  # resealed: the schema itself refuses it
    with pytest.raises(
        GoldenFileError, match=r"manifest\.json: field stages\[0\]\.value: .*'pickle'.*'safetensors', 'inline'"
    ):
        load_golden(path)


def test_missing_files_and_folders(golden_dir, tmp_path):
    path, _ = golden_dir
    (path / "audio" / "audio.mono.wav").unlink()
    with pytest.raises(GoldenFileError, match=r"audio\.mono\.wav: is listed in manifest\.json but missing"):
        load_golden(path)
    with pytest.raises(GoldenFileError, match="no golden batch here"):
        load_golden(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GoldenFileError, match=r"manifest\.json: missing"):
        load_golden(tmp_path / "empty")


def test_crash_mid_save_leaves_the_earlier_golden_loadable(golden_dir, monkeypatch, toy):
    path, run = golden_dir
    before = load_golden(path).trace

    def crash(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(store_mod, "save_file", crash)
    with pytest.raises(GoldenFileError, match="could not be written.*simulated.*earlier golden, if any, is intact"):
        save_golden(path, run_golden(toy, seed=4).trace, {})
    after = load_golden(path)
    assert compare_traces(before, after.trace).identical
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind


def test_interrupted_swap_falls_back_to_the_previous_version(golden_dir):
    path, _ = golden_dir
    prev = path.with_name(path.name + ".previous")
    shutil.move(str(path), str(prev))  # as if the process died between the two renames
    assert load_golden(path).path == prev


def test_overwrite_replaces_the_golden(golden_dir, toy):
    path, _ = golden_dir
    new = run_golden(toy, seed=5).trace
    save_golden(path, new, {})
    assert compare_traces(load_golden(path).trace, new).identical


def test_saving_a_summary_only_trace_is_refused(tmp_path):
    from signalchain import record, tap

    with record() as t:
        tap("loss", 1.0)
    with pytest.raises(GoldenFileError, match="recorded without values"):
        save_golden(tmp_path / "g", t, {})
