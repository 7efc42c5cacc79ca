"""The zoo members whose data follow real dataset conventions (`zoo/datasets.py`): each has the data it
claims, and the doctor's data, conditioning and splits families say of it only what is true (the
pieces of one recording share its caption; a small split comes back epoch after epoch): info, never
a warning."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from itertools import islice

import pytest

pytest.importorskip("transformers")

from signalchain.experiments.doctor import run_doctor  # noqa: E402
from signalchain.pipeline import ProtocolView  # noqa: E402
from signalchain.reference import zoo  # noqa: E402
from signalchain.reference.zoo import hf as zoo_hf  # noqa: E402

NAMES = ("ref-segments", "hf-chunks", "hf-ft-small")


@pytest.fixture(autouse=True)
def short_pretraining(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "zoo-cache"))
    monkeypatch.setattr(zoo_hf, "HF_PRETRAIN", replace(zoo_hf.HF_PRETRAIN, steps=2))


def test_segments_carry_their_files_musicinfo_and_seek():
    p = zoo.build("ref-segments")
    batches = list(islice(p.loader("train", 0), 3)) + [p.golden_batch(0)]
    by_file = defaultdict(set)
    for b in batches:
        for caption, info in zip(b.captions, b.metadata):
            assert set(info) >= {"description", "genre", "moods", "keywords", "bpm", "meta", "seek_time"}
            assert "source_id" not in info and caption == info["description"]
            by_file[info["meta"]["path"]].add(caption)
    assert all(len(c) == 1 for c in by_file.values())  # a file's segments share its caption
    assert sum(len(b) for b in batches) > 2 * len(by_file)  # many segments, few files
    assert {len(v) for v in p.splits().values()} == {10, 3}


def test_chunks_keep_their_takes_caption_and_split():
    p = zoo.build("hf-chunks")
    takes = defaultdict(set)
    for split, examples in p.splits().items():
        for e in examples:
            assert set(e.metadata) == {"file_name", "text"} and e.source_id is None
            takes[e.metadata["file_name"].split("/")[1].split("_chunk")[0]].add((split, e.caption))
    assert len(takes) == 7 and all(len(v) == 1 for v in takes.values())  # one caption, one split a take


def test_the_small_split_is_drawn_for_several_epochs():
    p = zoo.build("hf-ft-small")
    train = p.splits()["train"]
    drawn = [id(e) for b in islice(p.loader("train", 0), 8) for e in b.examples]
    assert len(train) == 10 and len(drawn) == 32 and len(set(drawn)) == 10


@pytest.mark.parametrize("name", NAMES)
def test_the_conventions_get_info_not_warnings(name):
    r = run_doctor(ProtocolView(zoo.build(name)), families=["data", "conditioning", "splits"], budget="economy")
    loud = [(f.id, f.stage) for f in r.findings if f.severity.value != "info"]
    assert loud == []
    said = {f.id: f for f in r.findings if f.id in ("loader.repeats", "condition.metadata_missing",
                                                     "caption.duplicate")}
    if name == "ref-segments":  # ten files, many segments: their captions are the files'
        assert said["condition.metadata_missing"].evidence["recordings"] <= 10
    if name == "hf-chunks":
        assert "pieces of one recording" in said["caption.duplicate"].message
    if name == "hf-ft-small":
        ev = said["loader.repeats"].evidence
        assert ev["train_size"] == 10 and ev["examples"] > ev["train_size"] and ev["distinct"] >= 10
