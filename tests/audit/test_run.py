"""The file audit on a dataset with every defect planted (each found with its id and path), on a
clean one (no error), and its reliability: broken inputs, the cache, parallel workers."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from audit_datasets import PLANTED, SR  # type: ignore[import-not-found]

from signalchain.audit.run import run_audit
from signalchain.findings import Finding
from signalchain.reference.data import generate_clip, write_audiocraft_dataset


def _paths(f: Finding) -> set[str]:
    """Every file a finding names (its own path, or the pairs of a split finding)."""
    ev = f.evidence
    out = {Path(ev["path"]).stem} if ev.get("path") else set()
    out |= {Path(p).stem for p in ev.get("paths", [])}
    for pair in ev.get("pairs", []):
        out |= {Path(pair["a"]).stem, Path(pair["b"]).stem}
    return out


@pytest.fixture(scope="module")
def planted_audit(planted: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = planted["root"]
    all_stats = _stats(root, ("train", "valid"))
    stats = tmp_path_factory.mktemp("opts") / "stats.json"
    stats.write_text(json.dumps({"audio": {"mean": all_stats[0], "std": all_stats[1]}}))
    sampler = stats.with_name("sampler.txt")
    sampler.write_text("\n".join([str(root / "train/audio/t-00.wav"), str(root / "valid/audio/v-03.wav")]))
    return run_audit(splits=[("train", str(planted["train"])), ("valid", str(planted["valid"]))],
                     max_caption_tokens=40, stats_file=str(stats), sampler_file=str(sampler), cache_path=None)


def _stats(root: Path, splits: tuple[str, ...]) -> tuple[float, float]:
    """Mean and std of the mono samples of every readable WAV in these splits: what a pipeline
    that fits its statistics before splitting computes."""
    xs = []
    for split in splits:
        for wav in sorted((root / split / "audio").glob("*.*")):
            try:
                x, _ = sf.read(wav, dtype="float32", always_2d=True)
            except Exception:
                continue
            if x.size and np.isfinite(x).all():
                xs.append(x.mean(axis=1).astype(np.float64))
    x = np.concatenate(xs)
    return float(x.mean()), float(x.std())


@pytest.mark.parametrize("defect", sorted(PLANTED))
def test_each_planted_defect_is_found_with_its_id_and_path(planted_audit: Any, defect: str) -> None:
    fid, stem = PLANTED[defect]
    hits = [f for f in planted_audit.findings if f.id == fid and stem in _paths(f)]
    assert hits, (
        f"{defect}: no {fid} naming {stem}; found {[(f.id, sorted(_paths(f))) for f in planted_audit.findings]}"
    )
    assert all(f.stage == ("split" if fid.startswith("split.") else "dataset") for f in hits)
    assert all(f.severity.value in ("warning", "error") for f in hits)


def test_near_duplicates_are_not_called_overlaps_nor_the_reverse(planted_audit: Any) -> None:
    kinds = {Path(m["a"]).stem: m["kind"] for m in planted_audit.matches}
    assert {kinds[s] for s in ("v-gain", "v-resampled", "v-mp3", "v-crop", "v-noise")} == {"near"}
    assert kinds["v-window"] == "overlap" and kinds["v-exact"] == "exact"
    assert not any(s.startswith("v-0") for s in kinds), "an unrelated valid clip was matched"


def test_manifest_lines_that_cannot_be_read_are_named_and_the_rest_is_audited(
    planted_audit: Any, planted: dict
) -> None:
    bad = [f for f in planted_audit.findings if f.id == "manifest.invalid"]
    lines = sorted(f.evidence["line"] for f in bad)
    first = planted["train_lines"] + 1
    assert lines == [first, first + 1, first + 2]
    assert any("not UTF-8" in f.message for f in bad) and any("invalid JSON" in f.message for f in bad)
    readable = [f for f in planted_audit.files if f["split"] == "train" and not f["problem"]]
    assert len(readable) == planted["train_lines"] - 3  # missing, corrupt and empty files excepted


def test_stats_fitted_on_all_splits_and_sampler_with_eval_items(planted_audit: Any) -> None:
    norm = [f for f in planted_audit.findings if f.id == "split.norm_fitted_on_all"]
    assert norm and norm[0].severity.value == "warning" and "mean" in norm[0].evidence["matched"]
    sampler = [f for f in planted_audit.findings if f.id == "split.sampler_includes_eval"]
    assert sampler and sampler[0].evidence["refs"][0].endswith("v-03.wav")


def test_clean_dataset_has_no_error_nor_warning(clean: dict[str, Any], tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    mean, std = _stats(clean["root"], ("train",))
    stats.write_text(json.dumps({"mean": mean, "std": std}))
    sampler = tmp_path / "sampler.json"
    sampler.write_text(json.dumps(list(range(24))))
    res = run_audit(
        [str(clean["root"])], stats_file=str(stats), sampler_file=str(sampler), cache_path=tmp_path / "c.db"
    )
    assert [s["split"] for s in res.sources] == ["train", "valid"]
    loud = [f for f in res.findings if f.severity.value != "info"]
    assert not loud, [f.message for f in loud]
    assert len(res.files) == 32 and not res.matches


def test_cache_rerun_decodes_only_changed_files(clean: dict[str, Any], tmp_path: Path) -> None:
    cache = tmp_path / "fp.sqlite"
    first = run_audit([str(clean["root"])], cache_path=cache)
    again = run_audit([str(clean["root"])], cache_path=cache)
    assert (first.cache["measured"], again.cache["hits"], again.cache["measured"]) == (32, 32, 0)
    assert [f.to_dict() for f in again.findings] == [f.to_dict() for f in first.findings]
    wav = next((clean["root"] / "valid" / "audio").glob("*.wav"))
    x, _ = sf.read(wav, dtype="float32", always_2d=True)
    sf.write(wav, x, SR)  # rewritten: same content, new mtime
    os.utime(wav, ns=(os.stat(wav).st_atime_ns, os.stat(wav).st_mtime_ns + 10**9))
    third = run_audit([str(clean["root"])], cache_path=cache)
    assert third.cache["measured"] == 1


def test_a_damaged_cache_is_set_aside_not_trusted(clean: dict[str, Any], tmp_path: Path) -> None:
    cache = tmp_path / "fp.sqlite"
    cache.write_bytes(b"this is not a database" * 100)
    res = run_audit([str(clean["root"])], cache_path=cache)
    assert any(f.id == "audit.cache" for f in res.findings)
    assert (tmp_path / "fp.sqlite.damaged").exists()
    assert not [f for f in res.findings if f.severity.value == "error"]


def test_parallel_workers_give_the_same_findings(planted: dict[str, Any], planted_audit: Any) -> None:
    par = run_audit(splits=[("train", str(planted["train"])), ("valid", str(planted["valid"]))], workers=2,
                    max_caption_tokens=40, cache_path=None)
    ids = lambda r: sorted(  # noqa: E731
        (f.id, f.message) for f in r.findings if not f.id.startswith(("split.norm", "split.sampler"))
    )
    assert ids(par) == ids(planted_audit)


def test_truncated_gzip_manifest_keeps_what_was_read(tmp_path: Path) -> None:
    clips = [generate_clip(i, 5, 16000, seconds=2.0) for i in range(3)]
    manifest = write_audiocraft_dataset(clips, tmp_path / "d")
    data = gzip.compress(manifest.read_bytes())
    gz = manifest.with_name("data.jsonl.gz")
    gz.write_bytes(data[: len(data) - 12])  # the end of the stream is lost
    res = run_audit([str(gz)], cache_path=None)
    assert any(f.id == "manifest.invalid" and "cannot be read to the end" in f.message for f in res.findings)
    assert len(res.files) >= 1


def test_audiofolder_with_split_folders_and_bad_rows(tmp_path: Path) -> None:
    root = tmp_path / "hf"
    clip = generate_clip(3, 6, 16000, seconds=2.5)
    for split, names in (("train", ["a", "b"]), ("test", ["c", "d"])):
        (root / split).mkdir(parents=True)
        for n in names:
            audio = clip.audio if n in ("a", "c") else generate_clip(ord(n), 6, 16000, seconds=2.5).audio
            sf.write(root / split / f"{n}.wav", audio.T, 16000)
    (root / "train" / "metadata.csv").write_bytes(
        b"file_name,text\na.wav,warm organ\nb.wav,caf\xe9 music\nz.wav,gone\n"
    )
    (root / "test" / "metadata.csv").write_bytes(b"file_name,text\nc.wav,bright lead\n")
    res = run_audit([str(root)], cache_path=None)
    found = {(f.id, Path(f.evidence.get("path") or f.evidence.get("manifest") or "").name) for f in res.findings}
    assert ("manifest.invalid", "metadata.csv") in found  # the non-UTF-8 row, named with its line
    assert ("file.missing", "z.wav") in found
    assert ("metadata.missing", "d.wav") in found  # a file without a row
    assert any(f.id == "split.duplicate" and f.evidence["splits"] == ["test", "train"] for f in res.findings)


def test_plain_folder_with_text_captions(tmp_path: Path) -> None:
    for i in range(3):
        c = generate_clip(i, 8, 16000, seconds=2.0)
        sf.write(tmp_path / f"{i}.wav", c.audio.T, 16000)
        (tmp_path / f"{i}.txt").write_bytes(c.caption.encode() if i else b"\xff\xfe caption")
    res = run_audit([str(tmp_path)], cache_path=None)
    bad = [f for f in res.findings if f.id == "metadata.missing"]
    assert len(bad) == 1 and bad[0].evidence["path"].endswith("0.wav") and "UTF-8" in bad[0].message
    assert [f["caption"] for f in res.files if f["path"].endswith("1.wav")] == [
        generate_clip(1, 8, 16000, seconds=2.0).caption
    ]


def test_many_files_with_one_problem_are_listed_then_summarised(tmp_path: Path) -> None:
    for i in range(30):
        sf.write(tmp_path / f"quiet{i:02d}.wav", np.zeros(8000, np.float32), 16000)
    res = run_audit([str(tmp_path)], cache_path=None)
    silent = [f for f in res.findings if f.id == "audio.silent"]
    assert len(silent) == 26 and len(silent[-1].evidence["paths"]) == 5  # 25 one by one, then the rest in one
    assert len(res.files) == 30


def test_cache_rerun_of_the_planted_set_decodes_nothing_and_says_the_same(planted: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    """Silent, clipped and unreadable files are kept too: an unchanged file is never decoded twice."""
    cache = tmp_path / "fp.sqlite"
    splits = [("train", str(planted["train"])), ("valid", str(planted["valid"]))]
    first = run_audit(splits=splits, cache_path=cache)
    again = run_audit(splits=splits, cache_path=cache)
    present = first.cache["measured"]
    assert again.cache["measured"] == 1 and again.cache["hits"] == present - 1  # the non-finite file is read again
    key = [(f.id, f.stage, f.message) for f in first.findings]
    assert [(f.id, f.stage, f.message) for f in again.findings] == key


def test_a_float_file_at_integer_scale_is_a_scale_error_not_clipping(tmp_path: Path) -> None:
    x = np.asarray(generate_clip(4, 0, SR).audio, dtype=np.float32).T
    sf.write(tmp_path / "int-scale.wav", x * 32768.0, SR, subtype="FLOAT")  # int16 values written as float
    sf.write(tmp_path / "fine.wav", x, SR, subtype="FLOAT")
    res = run_audit([str(tmp_path)], cache_path=None)
    loud = {
        (f.id, Path(f.evidence["path"]).name)
        for f in res.findings
        if f.severity.value != "info" and "path" in f.evidence
    }
    assert ("audio.scale", "int-scale.wav") in loud
    assert not any(name == "fine.wav" for _, name in loud) and ("audio.clipped", "int-scale.wav") not in loud
