"""Findings on a symbolic pipeline speak of tokens, positions, notes and bars: never of frames, codebooks,
silence or audio. The data checks' findings on symbolic traces (ids [B, T], notes stages) are scanned."""

import re

import numpy as np
import pytest
import torch

pytest.importorskip("miditok")

from _symbolic import clean_pieces, symbolic_trace, token_meta, tokenizer  # noqa: E402
from signalchain import record, tap  # noqa: E402
from signalchain.checks._symbolic import in_words, speaks_symbolic  # noqa: E402
from signalchain.checks.symbolic import SYMBOLIC_CHECKS  # noqa: E402
from signalchain.experiments.families.data import DATA_CHECKS  # noqa: E402

AUDIO_WORDS = re.compile(r"codebook|frame|silen|audio|codec|sample rate|audible", re.IGNORECASE)
TOK = tokenizer()
META = token_meta(TOK)


def _trace(targets_from, mask_from=None):
    """One symbolic training step's taps: BOS ids EOS, right-padded; targets and loss mask as `*_from` make them."""
    pieces = clean_pieces(0)
    src = symbolic_trace(pieces, tok=TOK, bos_eos=True)
    ids = torch.as_tensor(src.value("tokens"))
    padding = ids != META["pad_id"]
    targets = targets_from(ids, padding)
    mask = mask_from(targets, padding) if mask_from else targets != -100
    with record(values=True) as t:
        tap("midi.source", src.value("midi.source"), **src["midi.source"].meta)
        tap("tokens", ids, **META)
        tap("mask.padding", padding)
        tap("targets", targets, ignore_index=-100, cardinality=len(META["vocab"]), shift=1)
        tap("mask.loss", mask)
    return t


def shifted(ids, padding):
    t = torch.full_like(ids, -100)
    t[:, :-1] = ids[:, 1:].masked_fill(~padding[:, 1:], -100)
    return t


def unshifted(ids, padding):  # the model is trained to copy the token it reads
    return ids.masked_fill(~padding, -100)


def pad_as_target(ids, padding):  # every PAD after EOS is a target
    t = torch.full_like(ids, -100)
    t[:, :-1] = ids[:, 1:]
    return t


def findings(trace):
    return [f for judge in (*DATA_CHECKS, *SYMBOLIC_CHECKS) for f in judge(trace) if f.severity.value != "info"]


def test_a_clean_symbolic_step_is_silent_and_reads_as_symbolic():
    t = _trace(shifted)
    assert speaks_symbolic(t) and in_words(t, "frames", "positions") == "positions"
    assert findings(t) == []


@pytest.mark.parametrize("make_targets, expected", [(unshifted, "targets.misaligned"),
                                                    (pad_as_target, "mask.padding_trained")])
def test_data_findings_on_symbolic_ids_use_symbolic_words(make_targets, expected):
    found = findings(_trace(make_targets))
    assert expected in {f.id for f in found}
    for f in found:
        assert not AUDIO_WORDS.search(f.message + " " + f.hint), (f.id, f.message, f.hint)


def test_the_misaligned_shift_is_said_in_positions():
    f = next(f for f in findings(_trace(unshifted)) if f.id == "targets.misaligned")
    assert "shifted by 0 positions (expected 1" in f.message and "[0]" not in f.message


def test_a_codec_trace_keeps_its_own_words():
    with record(values=True) as t:
        tap("tokens", np.zeros((2, 4, 8), np.int64), cardinality=16)
    assert not speaks_symbolic(t) and in_words(t, "frames", "positions") == "frames"
