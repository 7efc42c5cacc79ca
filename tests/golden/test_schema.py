"""The manifest is untrusted data: strict JSON, a self-checksum, a strict schema, true claims.

Each crafted case is tried twice: as a hand edit (refused as tampering by the self-checksum) and
resealed, as a forger who knows the format would do (refused by the schema or the checks behind
it, naming the field). Either way: a `GoldenFileError` naming manifest.json, never another error.
"""

import copy
import hashlib
import json
import shutil

import pytest

from signalchain import GoldenFileError, load_golden
from signalchain.golden import manifest_checksum


def _stage(m, i=0, **kw):
    m["stages"][i].update(kw)


def _value(m, i=0, **kw):
    m["stages"][i]["value"].update(kw)


# (id, edit of the manifest dict, regex the resealed refusal must match after "manifest.json: ")
CRAFTED = [
    ("files_list", lambda m: m.update(files=list(m["files"])), r"field files: Input should be a valid dictionary"),
    ("stages_null", lambda m: m.update(stages=None), r"field stages: Input should be a valid list"),
    ("stage_without_name", lambda m: m["stages"][0].pop("name"), r"field stages\[0\]\.name: Field required"),
    ("order_abc", lambda m: _stage(m, order="abc"), r"field stages\[0\]\.order: Input should be a valid integer"),
    ("order_bool", lambda m: _stage(m, order=False), r"field stages\[0\]\.order: Input should be a valid integer"),
    (
        "sha_number",
        lambda m: _value(m, sha256=123),
        r"field stages\[0\]\.value\..*sha256: Input should be a valid string",
    ),
    ("sha_not_hex", lambda m: _value(m, sha256="xyz"), r"field stages\[0\]\.value\..*sha256: String should match"),
    ("summary_x", lambda m: _stage(m, summary="x"), r"field stages\[0\]\.summary: Input should be a valid dictionary"),
    (
        "schema_version_true",
        lambda m: m.update(schema_version=True),
        r"field schema_version is True; expected an integer",
    ),
    ("schema_version_str", lambda m: m.update(schema_version="2"), r"field schema_version is '2'; expected an integer"),
    ("shape_negative", lambda m: _stage(m, shape=[-1]), r"field stages\[0\]\.shape\[0\]: .*greater than or equal to 0"),
    ("shape_text", lambda m: _stage(m, shape="abc"), r"field stages\[0\]\.shape: Input should be a valid list"),
    ("kind_unknown", lambda m: _stage(m, kind="pickle"), r"field stages\[0\]\.kind: Input should be 'tensor'"),
    ("meta_null", lambda m: _stage(m, meta=None), r"field stages\[0\]\.meta: Input should be a valid dictionary"),
    ("value_missing", lambda m: m["stages"][0].pop("value"), r"field stages\[0\]\.value: Field required"),
    (
        "storage_pickle",
        lambda m: _stage(m, value={"storage": "pickle", "path": "x.pkl"}),
        r"field stages\[0\]\.value: .*'pickle'",
    ),
    ("provenance_list", lambda m: m.update(provenance=[1]), r"field provenance: Input should be a valid dictionary"),
    (
        "seed_bool",
        lambda m: m["provenance"].update(seed=True),
        r"field provenance\.seed: Input should be a valid integer",
    ),
    (
        "spec_number",
        lambda m: m["provenance"].update(pipeline_spec=7),
        r"field provenance\.pipeline_spec: Input should be a valid string",
    ),
    ("extra_field", lambda m: m.update(extra=1), r"field extra: Extra inputs are not permitted"),
    (
        "stage_is_text",
        lambda m: m["stages"].__setitem__(0, "x"),
        r"field stages\[0\]: Input should be a valid dictionary",
    ),
    ("dtype_path", lambda m: _stage(m, dtype="a/b"), r"field stages\[0\]\.dtype: String should match pattern"),
    (
        "sample_rate_text",
        lambda m: m["stages"][0]["meta"].update(sample_rate="abc"),
        r"field stages\[0\]\.meta\.sample_rate: Input should be a valid number",
    ),
    (
        "sample_rate_bool",
        lambda m: m["stages"][0]["meta"].update(sample_rate=True),
        r"field stages\[0\]\.meta\.sample_rate: Input should be a valid number",
    ),
    (
        "scalar_dict",
        lambda m: _value(m, -1, data={"a": 1}),
        r"field stages\[6\]\.value\.data: a scalar stage holds a number",
    ),
    (
        "scalar_text",
        lambda m: _value(m, -1, data="1e308"),
        r"field stages\[6\]\.value\.data: a scalar stage holds a number",
    ),
    (
        "text_numbers",
        lambda m: _value(m, 1, data=[1, 2]),
        r"field stages\[1\]\.value\.data: a text stage holds a list of strings",
    ),
    ("problems_text", lambda m: m.update(problems="x"), r"field problems: Input should be a valid list"),
    (
        "files_missing_values",
        lambda m: m["files"].pop("values.safetensors"),
        r"field files: does not list 'values\.safetensors'",
    ),
    (
        "duplicate_stage",
        lambda m: m["stages"].__setitem__(1, copy.deepcopy(m["stages"][0])),
        r"field stages\[1\]\.name: stage 'audio\.original' appears twice",
    ),
    ("order_shuffled", lambda m: _stage(m, 1, order=5), r"field stages\[1\]\.order: 5 is not the stage's place"),
    (
        "storage_swapped",
        lambda m: _stage(m, 1, kind="tensor"),
        r"field stages\[1\]\.value\.storage: a tensor stage is stored safetensors",
    ),
    (
        "summary_hash_changed",
        lambda m: m["stages"][1]["summary"].update(hash="0" * 64),
        r"field stages\[1\]\.summary\.hash: does not match",
    ),
    (
        "wav_on_text_stage",
        lambda m: m["stages"][1]["meta"].update(wav=m["stages"][0]["meta"]["wav"]),
        r"field stages\[1\]\.meta\.wav",
    ),
]


@pytest.fixture
def craft(tiny, tmp_path, forge):
    """Apply an edit to a copy of the tiny golden; return the folder (resealed or not)."""
    src, _ = tiny

    def make(edit, reseal):
        folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        shutil.copytree(src, folder)
        m = forge.read(folder)
        edit(m)
        forge.write(folder, m, reseal=reseal)
        return folder

    return make


@pytest.mark.parametrize("edit,expected", [c[1:] for c in CRAFTED], ids=[c[0] for c in CRAFTED])
def test_crafted_manifest_is_refused_naming_the_field(craft, edit, expected):
    folder = craft(edit, reseal=True)
    with pytest.raises(GoldenFileError, match=r"manifest\.json: " + expected):
        load_golden(folder)


@pytest.mark.parametrize("edit", [c[1] for c in CRAFTED if not c[0].startswith("schema_version")],
                         ids=[c[0] for c in CRAFTED if not c[0].startswith("schema_version")])
def test_hand_edit_is_refused_as_tampering(craft, edit):
    folder = craft(edit, reseal=False)
    with pytest.raises(GoldenFileError, match=r"manifest\.json: was changed after capture .* refused as tampering"):
        load_golden(folder)


def test_checksum_is_sha256_of_the_canonical_json_without_itself(tiny):
    folder, _ = tiny
    m = json.loads((folder / "manifest.json").read_text())
    body = {k: v for k, v in m.items() if k != "manifest_sha256"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert m["manifest_sha256"] == hashlib.sha256(canon).hexdigest() == manifest_checksum(m)


def test_reformatting_the_manifest_keeps_it_loadable(tiny):
    """The checksum is over the content, not the bytes: whitespace and key order do not matter."""
    folder, trace = tiny
    m = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps(dict(reversed(list(m.items()))), indent=7))
    assert load_golden(folder).trace.names() == trace.names()


def test_removed_checksum_is_refused(tiny, forge):
    folder, _ = tiny
    m = forge.read(folder)
    del m["manifest_sha256"]
    forge.write(folder, m, reseal=False)
    with pytest.raises(GoldenFileError, match=r"manifest\.json: lacks its self-checksum 'manifest_sha256'"):
        load_golden(folder)


def test_version_1_golden_is_refused_with_a_recapture_message(tiny, forge):
    folder, _ = tiny
    m = forge.read(folder)
    del m["manifest_sha256"]
    m["schema_version"] = 1
    forge.write(folder, m, reseal=False)
    with pytest.raises(
        GoldenFileError, match=r"manifest\.json: schema version 1 .* re-capture it with `signalchain capture --out"
    ):
        load_golden(folder)


RAW = [
    (
        "integer_5000_digits",
        lambda t: t.replace('"order": 0', '"order": ' + "9" * 5000, 1),
        r"is not valid JSON .*digits",
    ),
    (
        "nesting_100000",
        lambda t: t.replace('"meta": {', '"meta": {"deep": ' + "[" * 100_000 + "]" * 100_000 + ", ", 1),
        r"is not valid JSON \(nested too deeply",
    ),
    (
        "nesting_200",
        lambda t: t.replace('"meta": {', '"meta": {"deep": ' + "[" * 200 + "]" * 200 + ", ", 1),
        r"field stages\[0\]\.meta\.deep\[0\].* nests deeper than 64 levels",
    ),
    (
        "lone_surrogate",
        lambda t: t.replace('"a low drone"', '"a low \\ud800 drone"', 1),
        r"field stages\[1\]\.value\.data\[0\] holds a lone surrogate",
    ),
    ("lone_surrogate_key", lambda t: t.replace('"bpm"', '"\\udfff"', 1), r"field .* holds a lone surrogate"),
    ("nan_literal", lambda t: t.replace('"order": 0', '"order": NaN', 1), r"is not valid JSON \(NaN is not JSON\)"),
    (
        "infinity_by_overflow",
        lambda t: t.replace('"order": 0', '"order": 1e999', 1),
        r"field stages\[0\]\.order is inf, not a finite number",
    ),
    (
        "duplicate_key",
        lambda t: t.replace('"order": 0', '"order": 0, "order": 0', 1),
        r"is not valid JSON \(key 'order' appears twice",
    ),
    ("truncated", lambda t: t[: len(t) // 2], r"is not valid JSON"),
    ("empty", lambda t: "", r"is not valid JSON"),
    ("not_an_object", lambda t: "[1, 2, 3]", r"is not a signalchain golden manifest \(a JSON list"),
    ("other_schema", lambda t: '{"schema": "x"}', r"is not a signalchain golden manifest \(schema 'x'"),
]


@pytest.mark.parametrize("edit,expected", [c[1:] for c in RAW], ids=[c[0] for c in RAW])
def test_malformed_json_is_a_golden_file_error_naming_the_file(tiny, edit, expected):
    folder, _ = tiny
    mpath = folder / "manifest.json"
    mpath.write_text(edit(mpath.read_text()), encoding="utf-8")
    with pytest.raises(GoldenFileError, match=r"manifest\.json: " + expected):
        load_golden(folder)


def test_bytes_that_are_not_utf8_are_refused(tiny):
    folder, _ = tiny
    mpath = folder / "manifest.json"
    mpath.write_bytes(mpath.read_bytes().replace(b"a low drone", b"a low \xff\xfe drone"))
    with pytest.raises(GoldenFileError, match=r"manifest\.json: is not valid JSON \(not UTF-8"):
        load_golden(folder)


@pytest.mark.parametrize(
    "stage,field,value,expected",
    [
        (
            "audio.original",
            "dtype",
            "float64",
            r"stages\[0\]\.dtype: stage 'audio\.original' is recorded as 'float64', "
            r"but its array in values\.safetensors is float32",
        ),
        ("audio.original", "dtype", "bool", r"stages\[0\]\.kind: stage 'audio\.original' of dtype 'bool' is not audio"),
        (
            "audio.original",
            "dtype",
            "bfloat16",
            r"stages\[0\]\.dtype: .* its float32 values in values\.safetensors are not all bfloat16 values",
        ),
        ("tokens", "dtype", "int32", r"stages\[3\]\.dtype: stage 'tokens' is recorded as 'int32'.* is int64"),
        ("logits", "dtype", "float32", r"stages\[5\]\.dtype: .* is float16"),
        (
            "tokens",
            "shape",
            [2, 4, 2],
            r"stages\[3\]\.shape: stage 'tokens' is recorded with shape \[2, 4, 2\], but its array .* \[2, 2, 4\]",
        ),
        ("mask.loss", "shape", [16], r"stages\[4\]\.shape"),
    ],
)
def test_recorded_dtype_and_shape_are_checked_against_the_array(tiny, forge, stage, field, value, expected):
    folder, _ = tiny
    m = forge.read(folder)
    st = next(s for s in m["stages"] if s["name"] == stage)
    st[field] = value
    st["summary"][field] = value  # a careful forger edits the summary too
    forge.write(folder, m)
    with pytest.raises(GoldenFileError, match=r"manifest\.json: field " + expected):
        load_golden(folder)


def test_bfloat16_stage_is_kept_as_float32_and_loads(tmp_path):
    torch = pytest.importorskip("torch")
    from signalchain import record, save_golden, tap

    with record(values=True) as t:
        tap("logits", torch.ones(2, 3, dtype=torch.bfloat16))
    g = load_golden(save_golden(tmp_path / "g", t, {}))
    assert g.trace["logits"].dtype == "bfloat16" and g.trace.value("logits").dtype.name == "float32"
