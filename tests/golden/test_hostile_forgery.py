"""Hostile content: schema-valid nonsense, code in every file slot, path tricks, symlinks.

A forger here knows the format: manifests are resealed (their self-checksum recomputed), so only
the checks behind the checksum stand between them and a golden that lies. Every case must be
refused with a `GoldenFileError` naming a file of the golden, or (a mutation that changed
nothing) load exactly the original; no pickle is ever loaded and no canary code ever runs.
"""

import copy
import io
import os
import pickle
import shutil
from collections import Counter

import pytest
from golden_helpers import (
    file_sha,
    judge,
    put,
    read_manifest,
    report,
    reseal,
    tiny_trace,
    write_manifest,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from _strategies import json_values
from signalchain import save_golden

WAV = "audio/audio.original.wav"
TRACE = tiny_trace()
ARRAYS, INLINE = [0, 3, 4, 5], [1, 2, 6]  # audio.original, tokens, mask.loss, logits | caption, metadata, loss
HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
WORD = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789._#-"), min_size=1, max_size=16)
DTYPES = st.sampled_from(["float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool", "bfloat16",
                          "float8_e4m3fn", "complex64", "str", "list", "dict", "float"])
JSON = json_values(ints=10**6, text=8, keys=4, items=3, leaves=8)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    folder = save_golden(tmp_path_factory.mktemp("forgery") / "g", TRACE, {"seed": 0})
    return folder, (folder / "manifest.json").read_bytes(), read_manifest(folder)


def _stage(m, d, among):
    return m["stages"][d.draw(st.sampled_from(among))]


def _dtype(m, d):
    s = _stage(m, d, ARRAYS + [1])
    s["dtype"] = d.draw(DTYPES)
    if d.draw(st.booleans()):
        s["summary"]["dtype"] = s["dtype"]


def _shape(m, d):
    s = _stage(m, d, ARRAYS + INLINE)
    s["shape"] = d.draw(st.lists(st.integers(0, 300), max_size=5))
    if "shape" in s["summary"] and d.draw(st.booleans()):  # arrays' summaries record their shape too
        s["summary"]["shape"] = s["shape"]


def _wav_path(m, d):
    wav = m["stages"][0]["meta"]["wav"]
    new = "audio/" + d.draw(WORD) + ".wav"
    if d.draw(st.booleans()):  # keep the file list consistent with it
        m["files"][new] = m["files"].pop(wav["path"])
    wav["path"] = new


def _storage(m, d):
    s = _stage(m, d, ARRAYS + INLINE)
    sha = s["value"]["sha256"]
    s["value"] = ({"storage": "inline", "data": d.draw(JSON), "sha256": sha} if s["value"]["storage"] == "safetensors"
                  else {"storage": "safetensors", "key": s["name"], "sha256": sha})


def _duplicate(m, d):
    i, j = d.draw(st.integers(0, 6)), d.draw(st.integers(0, 7))
    m["stages"].insert(j, copy.deepcopy(m["stages"][i]))


MUTATIONS = {
    "value sha256": lambda m, d: _stage(m, d, ARRAYS + INLINE)["value"].update(sha256=d.draw(HEX)),
    "summary hash": lambda m, d: _stage(m, d, ARRAYS + INLINE)["summary"].update(hash=d.draw(HEX)),
    "file sha256": lambda m, d: m["files"].update({d.draw(st.sampled_from(sorted(m["files"]))): d.draw(HEX)}),
    "array stage renamed": lambda m, d: _stage(m, d, ARRAYS).update(name=d.draw(WORD)),
    "array stage and key renamed": lambda m, d: (lambda s, n: (s.update(name=n), s["value"].update(key=n)))(
        _stage(m, d, ARRAYS), d.draw(WORD)
    ),
    "key changed": lambda m, d: _stage(m, d, ARRAYS)["value"].update(key=d.draw(WORD)),
    "stage renamed onto another": lambda m, d: _stage(m, d, INLINE).update(
        name=m["stages"][d.draw(st.sampled_from([0, 3, 5]))]["name"]
    ),
    "dtype": _dtype,
    "shape": _shape,
    "kind": lambda m, d: _stage(m, d, ARRAYS + INLINE).update(
        kind=d.draw(st.sampled_from(["tensor", "audio", "text", "json", "scalar"]))
    ),
    "order": lambda m, d: _stage(m, d, ARRAYS + INLINE).update(order=d.draw(st.integers(0, 20))),
    "wav path": _wav_path,
    "wav segments": lambda m, d: m["stages"][0]["meta"]["wav"].update(
        segments=d.draw(st.lists(st.lists(st.integers(0, 999), min_size=2, max_size=2), max_size=3))
    ),
    "sample rate": lambda m, d: m["stages"][0]["meta"].update(sample_rate=d.draw(st.integers(1, 96000))),
    "inline data": lambda m, d: _stage(m, d, INLINE)["value"].update(data=d.draw(JSON)),
    "file added": lambda m, d: m["files"].update({"audio/" + d.draw(WORD) + ".wav": d.draw(HEX)}),
    "file dropped": lambda m, d: m["files"].pop(d.draw(st.sampled_from(sorted(m["files"])))),
    "storage swapped": _storage,
    "stage duplicated": _duplicate,
}


def test_schema_valid_nonsense_is_refused(pristine):
    folder, raw, manifest = pristine
    tried: Counter = Counter()

    @settings(max_examples=400, deadline=None, print_blob=False)
    @given(d=st.data(), kind=st.sampled_from(sorted(MUTATIONS)))
    def case(d, kind):
        m = copy.deepcopy(manifest)
        MUTATIONS[kind](m, d)
        write_manifest(folder, m)  # resealed
        try:
            outcome = judge(folder, manifest, TRACE)
        finally:
            put(folder / "manifest.json", raw)
        tried[(kind, outcome)] += 1
        assert outcome == "refused" or reseal(m) == reseal(manifest)  # loads only when nothing changed

    case()
    report("schema-valid nonsense (resealed, hypothesis)", Counter({f"{k}: {o}": n for (k, o), n in tried.items()}))
    assert {k for k, _ in tried} == set(MUTATIONS)


@pytest.mark.parametrize("stage, key, value", [
    (1, "dtype", "str"),          # a text stage's summary gains a claim its text cannot back (found by hypothesis)
    (1, "chars_mean", 99.0),      # a text statistic that is not its text's
    (2, "dtype", "float32"),      # a json stage's summary gains a key
    (6, "abs_max", 3.0),          # so does a scalar's
])
def test_an_inline_summary_that_its_value_does_not_give_is_refused(pristine, stage, key, value):
    folder, raw, manifest = pristine
    m = copy.deepcopy(manifest)
    m["stages"][stage]["summary"][key] = value
    write_manifest(folder, m)  # resealed
    try:
        assert judge(folder, manifest, TRACE) == "refused"
    finally:
        put(folder / "manifest.json", raw)


class Canary:
    """Unpickling this runs code that writes a marker file. It must never run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('code from a golden ran')",))


def _payloads(marker):
    torch = pytest.importorskip("torch")
    out = {f"pickle protocol {p}": pickle.dumps(Canary(marker), protocol=p) for p in range(6)}
    for name, obj in (("torch.save canary", Canary(marker)), ("torch.save tensors", {"tokens": torch.zeros(3)})):
        buf = io.BytesIO()
        torch.save(obj, buf)
        out[name] = buf.getvalue()
    return out


@pytest.fixture
def no_unpickling(monkeypatch):
    torch = pytest.importorskip("torch")

    def refuse(*a, **k):
        raise AssertionError("signalchain tried to unpickle")

    for owner, name in ((pickle, "load"), (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(owner, name, refuse)


def test_pickles_and_torch_archives_in_every_file_slot(pristine, tmp_path, no_unpickling):
    folder, raw, manifest = pristine
    marker, counts = tmp_path / "pwned", Counter()
    originals = {rel: (folder / rel).read_bytes() for rel in ("manifest.json", "values.safetensors", WAV)}
    for name, payload in _payloads(marker).items():
        for rel in originals:
            for resealed in (False, True) if rel != "manifest.json" else (False,):
                put(folder / rel, payload)
                if resealed:
                    m = read_manifest(folder)
                    m["files"][rel] = file_sha(folder / rel)
                    write_manifest(folder, m)
                try:
                    outcome = judge(folder, manifest, TRACE, resealed=resealed)
                finally:
                    for r, data in originals.items():
                        put(folder / r, data)
                assert outcome == "refused", (name, rel, resealed)
                counts[f"{rel}{' resealed' if resealed else ''}"] += 1
    report("pickles and torch archives in file slots (8 payloads)", counts)
    assert not marker.exists() and sum(counts.values()) == 8 * 5


NAME_TRICKS = ["../../x", "/etc/passwd", "a\\b", "a\x00b", " audio.original", "audio/../values", "..", "a/b"]
PATH_TRICKS = ["audio/../../outside.wav", "/tmp/outside.wav", "audio\\x.wav", "audio/./a.wav", "audio//a.wav",
               "audio/sub/a.wav", "AUDIO/a.wav", "audio/a\u2215b.wav", "audio/../values.safetensors", "../outside.wav",
               "audio/a.wav/", "audio/a.wav\x00.txt"]


def test_path_tricks_in_names_and_file_lists(pristine, tmp_path):
    folder, raw, manifest = pristine
    outside = folder.parent / "outside.wav"
    shutil.copy(folder / WAV, outside)  # a real file with the right bytes, just not in the golden
    counts = Counter()
    cases = [("stage name", lambda m, t: m["stages"][1].update(name=t)) for _ in [0]] + [
        (
            "array stage name and key",
            lambda m, t: (m["stages"][0].update(name=t), m["stages"][0]["value"].update(key=t)),
        )
    ]
    for label, edit in cases:
        for trick in NAME_TRICKS:
            m = copy.deepcopy(manifest)
            edit(m, trick)
            counts[(label, _refused(folder, raw, manifest, m))] += 1
    for trick in PATH_TRICKS:
        for consistent in (False, True):
            m = copy.deepcopy(manifest)
            m["stages"][0]["meta"]["wav"]["path"] = trick
            if consistent:
                m["files"][trick] = m["files"].pop(WAV)
            counts[("wav path" + (" and file list" if consistent else ""), _refused(folder, raw, manifest, m))] += 1
        m = copy.deepcopy(manifest)
        m["files"][trick] = file_sha(outside)
        counts[("extra file listed", _refused(folder, raw, manifest, m))] += 1
    report("path tricks (resealed)", Counter({f"{k}: {o}": n for (k, o), n in counts.items()}))
    assert all(o == "refused" for _, o in counts) and sum(counts.values()) == 2 * len(NAME_TRICKS) + 3 * len(
        PATH_TRICKS
    )


def _refused(folder, raw, manifest, m):
    write_manifest(folder, m)
    try:
        return judge(folder, manifest, TRACE)
    finally:
        put(folder / "manifest.json", raw)


@pytest.mark.skipif(os.name == "nt", reason="POSIX links")
def test_symlinks_in_every_slot_to_every_kind_of_target(tiny, tmp_path):
    src, _ = tiny
    manifest, counts = read_manifest(src), Counter()
    slots = ["manifest.json", "values.safetensors", WAV, "audio", "notes.txt", "."]
    for n, (slot, target) in enumerate(
        (s, t) for s in slots for t in ("copy", "/dev/zero", "dangling", "folder", "loop")
    ):
        if True:
            folder = tmp_path / f"{n}" / "g"
            shutil.copytree(src, folder)
            place = folder if slot == "." else folder / slot
            copy_of = tmp_path / f"copy{n}"
            if slot != "notes.txt":
                shutil.move(str(place), str(copy_of))
            where = {"copy": copy_of, "/dev/zero": "/dev/zero", "dangling": tmp_path / "nothing", "folder": tmp_path,
                     "loop": place}[target]
            os.symlink(where, place)
            counts[judge(folder, manifest, TRACE)] += 1
    report("symlinks (6 slots x 5 targets)", counts)
    assert counts == {"refused": len(slots) * 5}
