"""A hand-written HF MusicGen loop that builds its own decoder inputs (HF's `shift_tokens_right`) and
taps them, under either name and in each of HF's layouts: clean, the data family says nothing wrong;
with the labels themselves as decoder inputs, `targets.misaligned`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402

from signalchain import record, tap  # noqa: E402
from signalchain.checks.data import DATA_CHECKS  # noqa: E402
from signalchain.checks.tokens import TOKEN_CHECKS  # noqa: E402
from signalchain.experiments.doctor import run_doctor  # noqa: E402

HERE = Path(__file__).resolve().parent


def _load():
    name = "_hf_user_decoder_inputs_under_test"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "hf_user_decoder_inputs.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _golden(p, seed):
    model = p.build_model(seed)
    with record(values=True) as trace, torch.no_grad():
        p.step(model, p.golden_batch(seed), tap)
    return trace


def _judged(trace):
    return [f for check in (*DATA_CHECKS, *TOKEN_CHECKS) for f in check(trace)]


def _loud(findings):
    return [(f.id, f.severity.value, f.message) for f in findings if f.severity.value != "info"]


CLEAN = [("tokens.input", "BKT", True), ("tokens.pattern", "BKT", False), ("tokens.pattern", "BTK", True),
         ("tokens.input", "(BK)T", False)]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("tap_as,layout,padded", CLEAN)
def test_shifted_decoder_inputs_tapped_are_silent(tap_as, layout, padded, seed):
    m = _load()
    p = m.HFUserDecoderInputs(tap_as, layout, "shifted", padded)
    trace = _golden(p, seed)
    found = _judged(trace)
    assert _loud(found) == []
    # The inputs are what HF itself would make from the labels: one step behind, a start column.
    assert ("tap.read_as" in [f.id for f in found]) == (tap_as == "tokens.pattern")


@pytest.mark.parametrize("layout", ["BKT", "BTK", "(BK)T"])
def test_labels_as_decoder_inputs_tapped_as_inputs_are_misaligned(layout):
    m = _load()
    trace = _golden(m.HFUserDecoderInputs("tokens.input", layout, "labels"), 0)
    mis = [f for f in _judged(trace) if f.id == "targets.misaligned"]
    assert len(mis) == 1 and mis[0].severity.value == "error" and mis[0].evidence["input_lag"] == 0


def test_the_data_family_on_the_loop():
    m = _load()
    clean = run_doctor(m.HFUserDecoderInputs("tokens.pattern", "BKT", "shifted", False), families=("data",),
                       budget="economy").findings
    assert _loud(clean) == []
    # Labels as decoder inputs, tapped under the pattern's name: the tap cannot tell them from the
    # delayed codes, the ids entering the codebook embeddings can.
    leak = run_doctor(m.HFUserDecoderInputs("tokens.pattern", "BKT", "labels", False), families=("data",),
                      budget="economy").findings
    assert [(f.id, f.severity.value, f.stage) for f in leak if f.severity.value != "info"] == \
        [("targets.misaligned", "error", "targets")]
