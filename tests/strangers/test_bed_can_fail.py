"""The bed is not silent by construction: the same scripts with one real fault each (one of their own
knobs turned) get the finding a user needs, through the same callback or Monitor."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("peft")

from strangers import _bed  # noqa: E402
from strangers.scripts import (  # noqa: E402
    accelerate_parler,
    lightning_module,
    own_loop,
    seq2seq_dreambooth,
    trainer_ignore_index,
    user_decoder_inputs,
)


def found(run: _bed.Run, fid: str, severity: str | None = None) -> list[dict]:
    assert run.error is None, run.error
    assert run.check_failed == [], run.check_failed
    return [f for f in run.findings if f["id"] == fid and (severity is None or f["severity"] == severity)]


@pytest.mark.parametrize("script", [seq2seq_dreambooth, lightning_module], ids=["seq2seq_lora", "lightning"])
def test_labels_without_the_delay_pattern_are_misaligned(tmp_path, script) -> None:
    run = _bed.timed(script.__name__, 0, lambda: script.main(0, tmp_path, labels=_bed.labels_flat))
    (f,) = found(run, "targets.misaligned", "error")
    assert f["evidence"]["pattern_delays"] == [0, 0, 0, 0] and f["evidence"]["model_delays"] == [0, 1, 2, 3]


def test_decoder_inputs_never_shifted_are_the_model_seeing_its_answer(tmp_path) -> None:
    run = _bed.timed("user_decoder_inputs", 0, lambda: user_decoder_inputs.main(0, tmp_path, shift=False))
    hits = found(run, "targets.misaligned", "error")
    assert hits and hits[0]["evidence"]["input_lag"] == 0 and hits[0]["evidence"]["same_position"] > 0.9


def test_a_learning_rate_of_10_is_too_large(tmp_path) -> None:
    run = _bed.timed("trainer_ignore_index", 0, lambda: trainer_ignore_index.main(0, tmp_path, lr=10.0))
    assert found(run, "optim.lr_too_large"), [f["id"] for f in run.findings]


@pytest.mark.parametrize("script,fault", [(accelerate_parler, {"poison": 1}), (own_loop, {"nan_at": 2})],
                         ids=["accelerate_parler", "own_loop"])
def test_a_batch_with_every_label_ignored_is_located_as_an_empty_reduction(tmp_path, script, fault) -> None:
    run = _bed.timed(script.__name__, 0, lambda: script.main(0, tmp_path, **fault))
    first = found(run, "nonfinite.first", "error")
    assert first and first[0]["evidence"]["cause"] == "empty_reduction", [f["message"] for f in run.findings]
