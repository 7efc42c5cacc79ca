"""The local engine's worker processes: a worker that dies breaks the pool, and the audit goes on.

The fault is real: SIGNALCHAIN_AUDIT_INJECT makes the spawned worker that reaches the named file
SIGKILL itself, as a decoder's segfault or the out-of-memory killer would. The chunks in flight die
with the pool; their files are measured again alone, and only the file that kills its worker alone
is named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from signalchain.audit.measure import INJECT_ENV
from signalchain.audit.run import AuditResult, run_audit

pytestmark = pytest.mark.slow


def _splits(planted: dict[str, Any]) -> list[tuple[str, str]]:
    return [("train", str(planted["train"])), ("valid", str(planted["valid"]))]


@pytest.fixture(scope="module")
def pool_result(planted: dict[str, Any]) -> AuditResult:
    return run_audit(splits=_splits(planted), max_caption_tokens=40, workers=2, cache_path=None)


def test_a_file_that_kills_its_worker_process_is_the_only_file_lost(
        planted: dict[str, Any], pool_result: AuditResult, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_ENV, "kill:t-cancel.wav")
    res = run_audit(splits=_splits(planted), max_caption_tokens=40, workers=2, cache_path=None, retries=1)
    lost = [f for f in res.findings if f.id == "file.lost"]
    assert [Path(f.evidence["path"]).name for f in lost] == ["t-cancel.wav"]
    assert "died 2 times while measuring it alone" in lost[0].message
    assert res.engine["lost"] == [lost[0].evidence["path"]] and res.engine["worker_deaths"] >= 3
    victim = lost[0].evidence["path"]
    assert [f["path"] for f in res.files] == [f["path"] for f in pool_result.files]
    assert [f for f in res.files if f["path"] != victim] == [f for f in pool_result.files if f["path"] != victim]

    def about_others(r: AuditResult) -> list[tuple[str, str]]:
        return [(f.id, f.message) for f in r.findings if victim not in str(f.evidence) and f.id != "file.lost"]

    assert about_others(res) == about_others(pool_result)


def test_without_faults_the_pool_reports_no_deaths(pool_result: AuditResult) -> None:
    assert pool_result.engine == {"engine": "local", "workers": 2, "worker_deaths": 0, "lost": []}
