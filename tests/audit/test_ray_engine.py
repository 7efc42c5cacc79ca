"""The audit on a real local Ray (`engine="ray"`; no mock): the same findings as the local engine, and
a worker's death or a hung decoder costing only its file.

One Ray of 2 CPUs serves the module (starting one takes seconds); `run_audit` joins it and leaves it
running. Faults are put into the workers with SIGNALCHAIN_AUDIT_INJECT, which the driver passes to
each task: the worker really dies (SIGKILL) or really hangs, and Ray reports it as it would any death.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from signalchain.audit import ray_engine
from signalchain.audit.run import AuditResult, run_audit
from signalchain.errors import UsageError

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow


# These two first: the module fixture below keeps a Ray joined until the module ends.
def test_without_ray_the_engine_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as when it is absent
    with pytest.raises(UsageError, match=r"pip install 'signalchain\[ray\]'"):
        ray_engine.connect(None, 1)


def test_an_unreachable_cluster_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    if ray.is_initialized():
        pytest.skip("a Ray is joined in this process")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(UsageError, match="cannot start or join the Ray cluster at 127.0.0.1:9"):
        ray_engine.connect("127.0.0.1:9", 1)
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


def _splits(planted: dict[str, Any]) -> list[tuple[str, str]]:
    return [("train", str(planted["train"])), ("valid", str(planted["valid"]))]


def _facts(r: AuditResult) -> tuple[Any, ...]:
    """Everything an audit reports about the data (not how long it took, nor where it ran)."""
    return ([f.to_dict() for f in r.findings], r.files, r.matches, r.splits, r.search, r.sources)


@pytest.fixture(scope="module")
def local_result(planted: dict[str, Any]) -> AuditResult:
    return run_audit(splits=_splits(planted), max_caption_tokens=40, workers=2, cache_path=None)


def test_ray_gives_the_local_engines_findings_files_and_matches(local_ray: Any, planted: dict[str, Any],
                                                                local_result: AuditResult) -> None:
    res = run_audit(splits=_splits(planted), max_caption_tokens=40, workers=2, cache_path=None, engine="ray")
    assert _facts(res) == _facts(local_result)
    assert res.engine["engine"] == "ray" and res.engine["cpus"] == 2 and res.engine["files"] == len(res.files)
    assert res.engine["worker_deaths"] == 0 and not res.engine["lost"]
    assert ray.is_initialized()  # a Ray the caller had joined is left running


def test_a_sharded_search_on_ray_finds_what_one_index_finds(local_ray: Any, planted: dict[str, Any],
                                                            local_result: AuditResult) -> None:
    """50 vectors a shard: the planted set's ~300 windows are searched as 6 shard tasks, merged."""
    res = run_audit(splits=_splits(planted), max_caption_tokens=40, workers=2, cache_path=None, engine="ray",
                    shard_vectors=50)
    assert local_result.matches and _facts(res) == _facts(local_result)


def test_a_file_that_kills_its_worker_every_time_is_the_only_file_lost(
        local_ray: Any, planted: dict[str, Any], local_result: AuditResult, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ray_engine.INJECT_ENV, "kill:t-clipped.wav")
    res = run_audit(splits=_splits(planted), max_caption_tokens=40, workers=2, cache_path=None, engine="ray",
                    retries=1)
    lost = [f for f in res.findings if f.id == "file.lost"]
    assert [Path(f.evidence["path"]).name for f in lost] == ["t-clipped.wav"]
    assert "died twice" in lost[0].message and lost[0].severity.value == "error"
    # its chunk died (maybe more than once, as the files before it stream back late), then it alone twice
    assert res.engine["worker_deaths"] >= 3 and res.engine["lost"] == [lost[0].evidence["path"]]
    # Every other file was measured, and the report says of them what the local engine says.
    assert [f["path"] for f in res.files] == [f["path"] for f in local_result.files]
    victim = lost[0].evidence["path"]

    def about_others(r: AuditResult) -> list[tuple[str, str]]:
        return [(f.id, f.message) for f in r.findings if victim not in str(f.evidence) and f.id != "file.lost"]

    assert about_others(res) == about_others(local_result)
    assert [f for f in res.files if f["path"] != victim] == [f for f in local_result.files if f["path"] != victim]


def test_a_file_that_hangs_its_decoder_is_stopped_and_named(local_ray: Any, planted: dict[str, Any],
                                                            local_result: AuditResult,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ray_engine.INJECT_ENV, "hang:v-gain.wav")
    res = run_audit(splits=_splits(planted), max_caption_tokens=40, workers=2, cache_path=None, engine="ray",
                    file_timeout=8.0)
    lost = [f for f in res.findings if f.id == "file.lost"]
    assert [Path(f.evidence["path"]).name for f in lost] == ["v-gain.wav"]
    assert "did not finish in 8 s" in lost[0].message and lost[0].severity.value == "warning"  # one slow try
    assert res.engine["hung"] == [lost[0].evidence["path"]]
    assert len(res.files) == len(local_result.files)
    # The copy it was is not reported (it was never measured); every other planted copy still is.
    pairs = {(Path(m["a"]).name, Path(m["b"]).name) for m in res.matches}
    expected = {(Path(m["a"]).name, Path(m["b"]).name) for m in local_result.matches}
    assert pairs == {p for p in expected if "v-gain.wav" not in p}


def test_a_lost_file_is_not_cached_and_is_measured_again(local_ray: Any, planted: dict[str, Any], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "fp.sqlite"
    monkeypatch.setenv(ray_engine.INJECT_ENV, "kill:t-dc.wav")
    first = run_audit(splits=_splits(planted), cache_path=cache, engine="ray", retries=0)
    assert [Path(f.evidence["path"]).name for f in first.findings if f.id == "file.lost"] == ["t-dc.wav"]
    monkeypatch.delenv(ray_engine.INJECT_ENV)
    again = run_audit(splits=_splits(planted), cache_path=cache, engine="ray")
    assert again.cache["measured"] == 2  # the lost file, and the non-finite one (never cached either)
    assert not [f for f in again.findings if f.id == "file.lost"]
    assert any(f.id == "audio.dc_offset" and f.evidence["path"].endswith("t-dc.wav") for f in again.findings)


def test_the_clean_dataset_stays_clean_on_ray(local_ray: Any, clean: dict[str, Any]) -> None:
    local = run_audit([str(clean["root"])], workers=2, cache_path=None)
    res = run_audit([str(clean["root"])], workers=2, cache_path=None, engine="ray")
    assert not [f for f in res.findings if f.severity.value != "info"]
    assert _facts(res) == _facts(local) and len(res.files) == 32


def test_the_python_api_takes_the_engine(local_ray: Any, planted: dict[str, Any],
                                         local_result: AuditResult) -> None:
    import json

    import signalchain

    rep = signalchain.audit(splits={"train": str(planted["train"]), "valid": str(planted["valid"])},
                            max_caption_tokens=40, cache=False, engine="ray")
    doc = json.loads(rep.to_json())
    assert doc["engine"]["engine"] == "ray" and not rep.ok
    assert [(f["id"], f["message"]) for f in doc["findings"]] == [(f.id, f.message) for f in local_result.findings]
    with pytest.raises(UsageError, match="apply to engine='ray'"):  # file_timeout= too
        signalchain.audit(str(planted["train"]), address="127.0.0.1:1")
