"""A sample of the hostile cases through the command line: exit 2 and one line naming the file,
or (content unchanged) exit 0 - never a traceback, never a comparison from tampered data."""

import copy
import os
import pickle
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from click.testing import CliRunner
from golden_helpers import file_sha, judge, put, read_manifest, report, tiny_trace, write_manifest

from signalchain import save_golden
from signalchain.cli import cli

WAV = "audio/audio.original.wav"
TRACE = tiny_trace()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile_cli")
    golden = save_golden(base / "g", TRACE, {"seed": 0})
    twin = save_golden(base / "twin", TRACE, {"seed": 0})
    originals = {rel: (golden / rel).read_bytes() for rel in ("manifest.json", "values.safetensors", WAV)}
    return golden, twin, originals, read_manifest(golden)


def _cases(golden, originals, manifest):
    """(class, apply) pairs; apply() damages `golden` in place."""
    raw = originals["manifest.json"]
    for pos in range(0, len(raw), len(raw) // 40):
        yield "manifest flip", lambda pos=pos: put(golden / "manifest.json", _flip(raw, pos))
    for rel in originals:
        data = originals[rel]
        for length in range(0, len(data), max(1, len(data) // 10)):
            yield "truncation", lambda rel=rel, data=data, n=length: put(golden / rel, data[:n])
    edits = [lambda m: m.update(files=[]), lambda m: m["stages"][0].update(order="abc"),
             lambda m: m["stages"][3].update(dtype="int32"), lambda m: m["stages"][0]["value"].update(key="../x"),
             lambda m: m["stages"][1].update(name="../../etc/passwd"), lambda m: m["provenance"].update(seed=True),
             lambda m: m["stages"][0]["meta"]["wav"].update(path="/etc/passwd"), lambda m: m.update(stages=None),
             lambda m: m["stages"][5].update(shape=[1]), lambda m: m["stages"][6]["value"].update(data="1e9")]
    for edit in edits:
        def forged(edit=edit):
            m = copy.deepcopy(manifest)
            edit(m)
            write_manifest(golden, m)
        yield "resealed nonsense", forged
    for protocol in range(6):
        def pickled(protocol=protocol):
            put(golden / "values.safetensors", pickle.dumps({"x": [1, 2]}, protocol=protocol))
            m = read_manifest(golden)
            m["files"]["values.safetensors"] = file_sha(golden / "values.safetensors")
            write_manifest(golden, m)
        yield "pickle as values", pickled
    for slot in ("manifest.json", "values.safetensors", WAV):
        def linked(slot=slot):
            target = golden.parent / f"linked-{slot.replace('/', '_')}"
            shutil.copy(golden / slot, target)
            os.unlink(golden / slot)
            os.symlink(target, golden / slot)
        yield "symlink", linked


def _flip(data, pos):
    out = bytearray(data)
    out[pos] ^= 1 << (pos % 8)
    return bytes(out)


def _restore(golden, originals):
    for rel, data in originals.items():
        if os.path.islink(golden / rel):
            os.unlink(golden / rel)
        put(golden / rel, data)


def test_a_sample_of_hostile_goldens_through_the_cli(pair):
    golden, twin, originals, manifest = pair
    runner, counts = CliRunner(), Counter()
    for label, damage in _cases(golden, originals, manifest):
        damage()
        try:
            expected = judge(golden, manifest, TRACE)
            for args in (["inspect", str(golden)], ["compare", str(twin), str(golden)]):
                res = runner.invoke(cli, args)
                assert "Traceback" not in res.output and "internal error" not in res.output, res.output
                if expected == "identical":
                    assert res.exit_code == 0, res.output
                    continue
                lines = res.stderr.strip().splitlines()
                assert res.exit_code == 2 and len(lines) == 1, (label, args[0], res.output)
                assert lines[0].startswith(f"signalchain: error: {golden}"), lines[0]  # names the file
                assert "first divergent" not in res.stdout and "identical" not in res.stdout
                counts[f"{label} ({args[0]})"] += 1
        finally:
            _restore(golden, originals)
    report("through the CLI (inspect and compare; exit 2, one line)", counts)
    assert sum(counts.values()) >= 2 * 70


@pytest.mark.slow
def test_the_real_entry_point_answers_a_tampered_golden_with_exit_2_and_one_line(pair):
    golden, twin, originals, manifest = pair
    put(golden / "manifest.json", originals["manifest.json"].replace(b'"bool"', b'"bnol"', 1))
    try:
        proc = subprocess.run([sys.executable, "-c", "from signalchain.cli import main; main()", "compare", str(twin),
                               str(golden)], capture_output=True, text=True, timeout=120)
    finally:
        _restore(golden, originals)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "manifest.json: was changed after capture" in proc.stderr
