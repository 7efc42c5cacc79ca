"""Hostile bytes: bit flips and truncations of every file of a golden.

Every case must end in a clean load of exactly the original content (a flip that leaves the JSON
meaning unchanged) or a `GoldenFileError` naming the file - never another exception, never a
tampered value shown as true (`golden_helpers.judge`). "Resealed" cases play a forger who points
the manifest at the damaged file's new sha256 and recomputes the manifest's own checksum, so the
checks behind the checksums are exercised too.
"""

import json
import shutil
import struct
from collections import Counter

import pytest
from golden_helpers import judge, put, read_manifest, refresh_file, report, tiny_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signalchain import save_golden

WAV = "audio/audio.original.wav"
TRACE = tiny_trace()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    folder = save_golden(tmp_path_factory.mktemp("hostile") / "g", TRACE, {"seed": 0})
    original = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    return folder, original, read_manifest(folder)


def _restore(folder, original, *rels):
    """Put back the files a case changed (all of them when none is named)."""
    if not rels:
        shutil.rmtree(folder)
    for rel in rels or original:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        put(folder / rel, original[rel])


def _flip(data: bytes, pos: int, bit: int) -> bytes:
    out = bytearray(data)
    out[pos] ^= 1 << bit
    return bytes(out)


def _try(folder, original, manifest, rel, data, reseal=False):
    put(folder / rel, data)
    try:
        if reseal:
            refresh_file(folder, rel)
        return judge(folder, manifest, TRACE, resealed=reseal)
    finally:
        _restore(folder, original, rel, "manifest.json")


def test_every_byte_of_the_manifest_with_one_bit_flipped(pristine):
    folder, original, manifest = pristine
    raw, counts = original["manifest.json"], Counter()
    for pos in range(len(raw)):
        put(folder / "manifest.json", _flip(raw, pos, pos % 8))
        counts[judge(folder, manifest, TRACE)] += 1
    put(folder / "manifest.json", raw)
    report("manifest.json single-bit flips (every byte, bit = position mod 8)", counts)
    assert sum(counts.values()) == len(raw) > 4000 and counts["refused"] >= len(raw) - 10


@pytest.mark.slow
def test_every_bit_of_the_manifest_flipped(pristine):
    folder, original, manifest = pristine
    raw, counts = original["manifest.json"], Counter()
    for pos in range(len(raw)):
        for bit in range(8):
            put(folder / "manifest.json", _flip(raw, pos, bit))
            counts[judge(folder, manifest, TRACE)] += 1
    put(folder / "manifest.json", raw)
    report("manifest.json single-bit flips (every bit)", counts)
    assert sum(counts.values()) == 8 * len(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=2, max_size=12))
def test_several_flips_anywhere_in_the_manifest(pristine, flips):
    folder, original, manifest = pristine
    data = original["manifest.json"]
    for pos, bit in flips:
        data = _flip(data, pos % len(data), bit)
    put(folder / "manifest.json", data)
    try:
        judge(folder, manifest, TRACE)
    finally:
        put(folder / "manifest.json", original["manifest.json"])


@pytest.mark.parametrize(
    "reseal,bits",
    [(False, "one"), (True, "one"), pytest.param(True, "all", marks=pytest.mark.slow)],
    ids=["as_damaged", "resealed", "resealed_every_bit"],
)
def test_every_byte_of_the_safetensors_header_flipped(pristine, reseal, bits):
    folder, original, manifest = pristine
    raw = original["values.safetensors"]
    header_end = 8 + struct.unpack("<Q", raw[:8])[0]
    assert json.loads(raw[8:header_end])["__metadata__"] == {"schema": "signalchain.golden"}
    counts = Counter()
    for pos in range(header_end):
        for bit in range(8) if bits == "all" else (pos % 8,):
            counts[_try(folder, original, manifest, "values.safetensors", _flip(raw, pos, bit), reseal)] += 1
    report(
        f"values.safetensors header flips ({'resealed' if reseal else 'as damaged'}, {bits} bit(s) per byte)", counts
    )
    assert counts["refused"] == sum(counts.values()) >= header_end


@settings(
    max_examples=150, deadline=None, print_blob=False, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pos=st.integers(0, 10**6),
    bit=st.integers(0, 7),
    reseal=st.booleans(),
    target=st.sampled_from(["values.safetensors", WAV]),
)
def test_a_flip_anywhere_in_values_or_wav(pristine, pos, bit, reseal, target):
    """Refused - or, resealed, loaded only when what the file means is unchanged (a WAV's PEAK chunk)."""
    folder, original, manifest = pristine
    raw = original[target]
    outcome = _try(folder, original, manifest, target, _flip(raw, pos % len(raw), bit), reseal)
    assert outcome == "refused" or (reseal and target == WAV)


def _lengths(size: int, every: bool) -> list[int]:
    """Every length, or a dense sample: the first and last 64 bytes and every 7th length between."""
    if every:
        return list(range(size))
    return sorted(set(range(min(64, size))) | set(range(max(0, size - 64), size)) | set(range(0, size, 7)))


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["dense", "every_length"])
@pytest.mark.parametrize("reseal", [False, True], ids=["as_damaged", "resealed"])
@pytest.mark.parametrize("rel", ["manifest.json", "values.safetensors", WAV])
def test_truncations_of_every_file(pristine, rel, reseal, every):
    if rel == "manifest.json" and reseal:
        pytest.skip("a truncated manifest is not JSON: there is nothing to reseal")
    folder, original, manifest = pristine
    raw, counts = original[rel], Counter()
    lengths = _lengths(len(raw), every)
    for length in lengths:
        counts[_try(folder, original, manifest, rel, raw[:length], reseal)] += 1
    report(
        f"{rel} truncations ({'resealed' if reseal else 'as damaged'}, {'every length' if every else 'dense sample'})",
        counts,
    )
    assert counts == {"refused": len(lengths)}


@pytest.mark.parametrize("rel", ["manifest.json", "values.safetensors", WAV])
def test_a_missing_file_is_refused_naming_it(pristine, rel):
    folder, original, manifest = pristine
    (folder / rel).unlink()
    try:
        from signalchain import GoldenFileError, load_golden

        with pytest.raises(
            GoldenFileError, match=rel.replace(".", r"\.") + ": (is listed in manifest.json but )?missing"
        ):
            load_golden(folder)
    finally:
        _restore(folder, original)


@pytest.mark.parametrize("reseal", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["as_damaged", "resealed"])
@pytest.mark.parametrize("rel", ["values.safetensors", WAV])
def test_every_byte_of_values_and_wav_with_one_bit_flipped(pristine, rel, reseal):
    folder, original, manifest = pristine
    raw, counts, loaded_at = original[rel], Counter(), []
    for pos in range(len(raw)):
        outcome = _try(folder, original, manifest, rel, _flip(raw, pos, pos % 8), reseal)
        counts[outcome] += 1
        if outcome == "identical":
            loaded_at.append(pos)
    report(f"{rel} single-bit flips ({'resealed' if reseal else 'as damaged'}, every byte)", counts)
    assert sum(counts.values()) == len(raw)
    # only a resealed WAV header may change without changing the audio (chunk sizes, PEAK, fact)
    header = raw.index(b"data") + 8 if rel == WAV else 0
    assert all(pos < header for pos in loaded_at) and (reseal or not loaded_at), loaded_at
