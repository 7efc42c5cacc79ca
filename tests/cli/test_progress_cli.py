"""Progress in a real process with stderr piped (a CI log): timed plain lines naming what runs, none
with --quiet, and standard output left to the JSON report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

LINE = re.compile(r"^\[\s*\d+\.\d s\] doctor: (.+)$")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # every line, however fast this machine runs the family (else a run under a second says nothing)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "SIGNALCHAIN_PROGRESS_GRACE": "0"}
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-c", "from signalchain.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=600, env=env)


def test_doctor_in_a_pipe_prints_timed_lines_per_family_and_clean_json():
    proc = run("doctor", "--family", "audio", "--budget", "economy", "--json", "-")
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)  # nothing but the report on stdout
    assert report["families"] == ["audio"]
    said = [m.group(1) for line in proc.stderr.splitlines() if (m := LINE.match(line))]
    assert said and said[0].startswith("audio (1/1)"), proc.stderr
    assert all(line.strip() for line in proc.stderr.splitlines()), "a blank line on stderr"


def test_quiet_prints_no_progress_but_still_the_report():
    proc = run("doctor", "--family", "audio", "--budget", "economy", "--json", "-", "--quiet")
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["families"] == ["audio"]
    assert not [line for line in proc.stderr.splitlines() if LINE.match(line)], proc.stderr
    assert "doctor ·" in proc.stderr or "No findings" in proc.stderr  # the findings still print (to stderr: --json -)


def test_audit_in_a_pipe_leaves_no_blank_line(tmp_path: Path):
    rng = np.random.default_rng(0)
    for i in range(3):
        sf.write(tmp_path / f"clip{i}.wav", 0.1 * rng.standard_normal(8000).astype(np.float32), 16000)
    proc = run("audit", str(tmp_path), "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    assert "" not in proc.stderr.splitlines(), repr(proc.stderr)
    assert "3 examples" in proc.stdout


def test_capture_and_compare_in_a_pipe_say_what_they_run(tmp_path: Path):
    """Their spinner was a terminal's only: in a log a slow pipeline's capture said nothing."""
    golden = tmp_path / "g"
    cap = run("capture", "--out", str(golden), "--json", "-")
    assert cap.returncode == 0, cap.stderr
    assert re.search(r"^\[\s*\d+\.\d s\] capture: capturing the golden batch of reference", cap.stderr, re.M)
    assert json.loads(cap.stdout)["golden"] == str(golden)
    cmp = run("compare", str(golden), "--quiet")
    assert cmp.returncode == 0, cmp.stderr
    assert "compare:" not in cmp.stderr  # --quiet: none
    cmp = run("compare", str(golden))
    assert re.search(r"^\[\s*\d+\.\d s\] compare: re-running reference on the golden batch", cmp.stderr, re.M)
