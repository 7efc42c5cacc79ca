"""The README cannot drift: its real-output blocks are what `make docs` (tools/readme_blocks.py)
produces from real runs of the bundled pipelines, and its links stay inside the repository.

The runs take a while (a doctor run of the reference, two of the other beds, two captures and a
compare: about a minute on two idle cores, several on a loaded one); they run once for the module.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _load_tool():
    spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "tools" / "readme_blocks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("readme_blocks", mod)
    spec.loader.exec_module(mod)
    return mod


rb = _load_tool()


# Over 60 s on the shared 2-core box (87 s, once per module): the README's real-output blocks are
# rewritten from real runs of the bundled pipelines, exactly as `make docs` does; the runs are shared
# by every test here.
@pytest.fixture(scope="module")
def outputs():
    return rb.run_all(rb.needed_runs(README.read_text(encoding="utf-8")))


@pytest.mark.slow
def test_readme_blocks_are_what_make_docs_produces(outputs):
    committed = README.read_text(encoding="utf-8")
    produced = rb.rewrite(committed, outputs)
    assert rb.agree(committed, produced), "run `make docs`:\n" + rb.diff(committed, produced)


@pytest.mark.slow
def test_a_block_edited_by_hand_fails_the_check(outputs):
    committed = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- output:capture .*?-->\n(.*?)<!-- /output -->", committed, re.S)
    assert block and "│" in block[1]
    edited = committed.replace(block[1], block[1].replace("loss", "loss (hand-tuned)", 1))
    assert edited != committed
    assert not rb.agree(edited, rb.rewrite(edited, outputs))
    report = rb.diff(edited, rb.rewrite(edited, outputs))
    assert "loss (hand-tuned)" in report and report.startswith("--- README.md (committed)")


def test_the_demo_steps_are_generated_blocks():
    """Steps 1, 4 and 6 of the demo, and the renderer the symbolic players used, are made by runs."""
    rules = rb.rules(README.read_text(encoding="utf-8"))
    assert {"capture", "compare-fault", "doctor-fault", "renderer"} <= set(rules)
    assert all(rule.run in rb.RUNS for rule in rules.values())


TABLE = """\
                  Stage by stage
┏━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━┓
┃ stage   ┃ result           ┃ detail                  ┃
┡━━━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━┩
│ caption │ same             │                         │
│ crop    │ FIRST DIVERGENCE │ 16 values differ        │
│ tokens  │ differs          │ 4437 values differ,     │
│         │                  │ first at [0, 0, 0]      │
│ loss    │ differs          │ golden 5.57             │
└─────────┴──────────────────┴─────────────────────────┘
first divergent stage: crop
families run: data in 76.9 s
"""


def test_abridge_keeps_the_declared_rows_with_their_wrapped_lines():
    rule = rb.Rule.parse(" run=x rows=crop,tokens gap after-table")
    got = rb.abridge(rb.normalise(TABLE), rule).splitlines()
    assert got == ["│ crop    │ FIRST DIVERGENCE │ 16 values differ        │",
                   "│ tokens  │ differs          │ 4437 values differ,     │",
                   "│         │                  │ first at [0, 0, 0]      │",
                   "…", "first divergent stage: crop", "families run: data in <n> s"]
    header = rb.abridge(TABLE, rb.Rule.parse("run=x header rows=loss"))
    assert header.splitlines()[0].startswith("┃ stage") and header.splitlines()[1].startswith("│ loss")


def test_normalise_removes_only_what_varies(tmp_path):
    text = f"saved 20 stages to {tmp_path}/demo-out/golden   \nloss 5.57205 in 3 steps; 13 of 20 in 12.4 s\n"
    want = "saved 20 stages to demo-out/golden\nloss 5.57205 in 3 steps; 13 of 20 in <n> s"
    assert rb.normalise(text, tmp_path) == want


def test_a_bad_rule_is_refused():
    with pytest.raises(ValueError, match="run=NAME"):
        rb.Rule.parse("rows=crop")
    with pytest.raises(ValueError, match="unknown"):
        rb.Rule.parse("run=capture colour")


def test_the_check_allows_a_last_digit_and_nothing_more():
    """A float's last printed digit may differ on a CPU with other kernels; any other change fails."""
    row = "│ loss │ tensor │ 5.57205 │ 8×4×100 │"
    assert rb.agree(row, "│ loss │ tensor │ 5.57206 │ 8×4×100 │")
    assert rb.agree(row, "│ loss │ tensor │ 5.572051 │ 8×4×100 │")  # a wider number shifts the edge only
    assert not rb.agree(row, "│ loss │ tensor │ 5.56115 │ 8×4×100 │")
    assert not rb.agree(row, "│ loss │ tensor │ 5.57205 │ 8×4×150 │")
    assert not rb.agree(row, "│ loss (hand-tuned) │ tensor │ 5.57205 │ 8×4×100 │")
    assert not rb.agree(row, row + "\nan extra line")
