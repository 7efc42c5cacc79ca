"""Hostile manifests and metadata: deep nesting, huge integers, NaN/Infinity literals, wrong types
per field, lone surrogates, very long lines, binary garbage, missing fields. Every line is an
example or a finding naming its line, the lines around it are read, and the audit finishes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf
from click.testing import CliRunner
from hostile_cases import SR, TRIED, alarm, tone  # type: ignore[import-not-found]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signalchain.audit import rows
from signalchain.audit.sources import Source, read_items
from signalchain.cli import cli
from signalchain.findings import Finding
from signalchain.records.audit import Item

LONG = 4096  # the line limit while these tests run (the real one is 16 MiB)

# kind -> what the line must give: "finding" (manifest.invalid naming the line), "item" (an
# example), or "both" (an example whose bad field is a finding)
EXPECT = {"deep": "finding", "huge_int": "finding", "float_overflow": "both", "nan": "both", "infinity": "both",
          "path_wrong_type": "finding", "duration_wrong_type": "both", "caption_wrong_type": "item",
          "surrogate_path": "item", "surrogate_caption": "both", "surrogate_key": "both", "long": "finding",
          "garbage": "finding", "missing_path": "finding", "not_object": "finding", "nul_path": "item",
          "negative": "both"}


def _line(kind: str, value: Any, good: str) -> bytes:
    """One hostile manifest line of `kind`, parameterised by `value` (drawn by hypothesis)."""
    if kind == "deep":
        return (("[" * value) + ("]" * value)).encode() if value % 2 else ('{"a":' * value + "1" + "}" * value).encode()
    if kind == "huge_int":
        return f'{{"path": "{good}", "duration": {"7" * value}}}'.encode()
    if kind == "float_overflow":
        return f'{{"path": "{good}", "sample_rate": 1{"0" * value}}}'.encode()
    if kind in ("nan", "infinity"):
        literal = "NaN" if kind == "nan" else ("-Infinity" if value % 2 else "Infinity")
        return f'{{"path": "{good}", "{("duration", "sample_rate", "channels")[value % 3]}": {literal}}}'.encode()
    if kind == "path_wrong_type":
        return json.dumps({"path": [3, None, {"x": 1}, ["a"], True, "", 1.5][value % 7]}).encode()
    if kind == "duration_wrong_type":
        return json.dumps({"path": good, "duration": ["3.5", [1], {"s": 2}, True, "inf"][value % 5]}).encode()
    if kind == "negative":
        return json.dumps({"path": good, ("duration", "sample_rate", "channels")[value % 3]: -value or 0}).encode()
    if kind == "caption_wrong_type":
        return json.dumps({"path": good, "description": [["a", 1], {"b": [2]}, 3.5, None, [[[]]]][value % 5]}).encode()
    if kind == "surrogate_path":
        return json.dumps({"path": f"gone-\udcff{value}.wav"}).encode()
    if kind == "surrogate_caption":
        return json.dumps({"path": good, "description": f"warm \ud800 organ {value}"}).encode()
    if kind == "surrogate_key":
        return json.dumps({"path": good, f"mood\udc80{value}": "calm"}).encode()
    if kind == "long":
        return json.dumps({"path": good, "description": "x" * (LONG + value)}).encode()
    if kind == "garbage":
        return b"\x00" + bytes((b % 255) + 1 if b == 10 else b for b in value)  # no newline inside
    if kind == "missing_path":
        return json.dumps([{}, {"duration": 3.0}, {"file": good}][value % 3]).encode()
    if kind == "not_object":
        return [b"[1, 2]", b"3", b'"path"', b"null", b"true"][value % 5]
    if kind == "nul_path":
        return json.dumps({"path": f"a\u0000b{value}.wav"}).encode()
    raise AssertionError(kind)


_VALUES = {
    "deep": st.integers(1001, 60_000),
    "huge_int": st.integers(4301, 6000),
    "float_overflow": st.integers(309, 900),
    "garbage": st.binary(min_size=1, max_size=300),
    "long": st.integers(0, 3 * LONG),
}


@st.composite
def _lines(draw: st.DrawFn) -> list[tuple[str, Any]]:
    kinds = draw(st.lists(st.sampled_from(sorted(EXPECT)), min_size=1, max_size=8))
    return [(k, draw(_VALUES.get(k, st.integers(0, 50)))) for k in kinds]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("manifests")
    for i in range(2):
        sf.write(root / f"good{i}.wav", tone(i), SR)
    return root


def _check_lines(results: list[Item | Finding], plan: dict[int, str], manifest: Path) -> None:
    items = {x.line: x for x in results if isinstance(x, Item)}
    invalid = {x.evidence["line"] for x in results if isinstance(x, Finding) and x.id == "manifest.invalid"}
    assert all(isinstance(x, Item) or x.evidence.get("manifest") == str(manifest) for x in results)
    for line, kind in plan.items():
        want = EXPECT.get(kind, "item")
        if want in ("finding", "both"):
            assert line in invalid, f"line {line} ({kind}): no manifest.invalid"
        if want in ("item", "both"):
            assert line in items, f"line {line} ({kind}): no example"
        if kind == "good":
            assert line not in invalid and items[line].path.endswith(".wav")
        TRIED[f"manifest:{kind}"] += 1


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plan=_lines())
def test_every_hostile_manifest_line_is_an_example_or_a_finding(folder: Path, plan: list[tuple[str, Any]],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "LINE_LIMIT", LONG)
    lines, kinds = [json.dumps({"path": "good0.wav"}).encode()], {1: "good"}
    for kind, value in plan:
        lines.append(_line(kind, value, "good1.wav"))
        kinds[len(lines)] = kind
        lines.append(json.dumps({"path": "good1.wav"}).encode())  # a good line after every bad one
        kinds[len(lines)] = "good"
    manifest = folder / "data.jsonl"
    manifest.write_bytes(b"\n".join(lines) + b"\n")
    with alarm(60):
        results = list(read_items(Source("train", manifest, "audiocraft")))
    _check_lines(results, kinds, manifest)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plan=_lines())
def test_every_hostile_audiofolder_row_is_an_example_or_a_finding(folder: Path, plan: list[tuple[str, Any]],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "LINE_LIMIT", LONG)
    sub = folder / "hf"
    sub.mkdir(exist_ok=True)
    lines, kinds = [], {}
    for kind, value in plan:  # the same hostile lines, with HF's file_name key
        raw = _line(kind, value, "../good1.wav").replace(b'"path"', b'"file_name"')
        lines.append(raw)
        kinds[len(lines)] = kind if kind not in ("nan", "infinity", "duration_wrong_type", "negative",
                                                 "float_overflow") else "item"  # HF rows declare no duration
    meta = sub / "metadata.jsonl"
    meta.write_bytes(b"\n".join(lines) + b"\n")
    with alarm(60):
        results = list(read_items(Source("train", sub, "audiofolder")))
    _check_lines(results, kinds, meta)


def test_hostile_metadata_csv_rows_are_each_a_finding_and_the_rest_is_read(folder: Path) -> None:
    sub = folder / "hfcsv"
    sub.mkdir()
    for i in range(3):
        sf.write(sub / f"c{i}.wav", tone(20 + i), SR)
    body = [b"file_name,text", b"c0.wav,a warm organ",
            b"c1.wav," + b"x" * 200_000,  # past csv's field size limit
            b"c2.wav,caf\xe9 au lait",  # not UTF-8
            b"c0.wav,a\x00b", b'"c1.wav,unterminated quote', b""]
    (sub / "metadata.csv").write_bytes(b"\n".join(body))
    with alarm(60):
        results = list(read_items(Source("train", sub, "audiofolder")))
    bad = sorted(x.evidence["line"] for x in results if isinstance(x, Finding) and x.id == "manifest.invalid")
    items = [x for x in results if isinstance(x, Item)]
    assert 3 in bad and 4 in bad  # the giant field, the non-UTF-8 caption
    assert [i.caption for i in items if i.line == 2] == ["a warm organ"]
    assert any(i.line == 5 for i in items)  # a NUL inside a caption is still a row
    TRIED["metadata.csv rows"] += len(body) - 2


def test_a_manifest_of_every_hostile_kind_is_audited_to_the_end(folder: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "LINE_LIMIT", LONG)
    lines = [json.dumps({"path": str(folder / "good0.wav")}).encode()]
    for i, kind in enumerate(sorted(EXPECT)):
        value = {"deep": 100_001, "huge_int": 5000, "float_overflow": 400, "garbage": b"\xff\xfe\x00junk",
                 "long": LONG}.get(kind, i)
        lines.append(_line(kind, value, str(folder / "good1.wav")))
    manifest = tmp_path / "data.jsonl"
    manifest.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "r.json"
    with alarm(120):
        run = CliRunner().invoke(cli, ["audit", str(manifest), "--no-cache", "--json", str(out)])
    assert run.exit_code == 1, run.output[-3000:]
    report = json.loads(out.read_text())
    assert not [f for f in report["findings"] if f["id"] == "internal.check_failed"]
    reported = {Path(f["path"]).name: f["problem"] for f in report["files"]}
    assert reported["good0.wav"] is None and reported["good1.wav"] is None
    invalid = {f["evidence"]["line"] for f in report["findings"] if f["id"] == "manifest.invalid"}
    for n, kind in enumerate(sorted(EXPECT), start=2):
        if EXPECT[kind] != "item":
            assert n in invalid, kind
    nul = [f for f in report["findings"] if f["id"] == "file.unreadable" and "a\\x00b" in f["message"]]
    assert nul, "a NUL in a path is that line's unreadable file"
    assert os.path.exists(out)
