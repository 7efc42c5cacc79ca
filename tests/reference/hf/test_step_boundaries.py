"""The HF bed's step-boundary faults: the labels compared position by position with the codes and
the decoder's own delay pattern, the decoder inputs with the labels, the codec's weights over steps."""

from __future__ import annotations

import traceback

import numpy as np
import pytest
import torch
from hf_bed_support import changed, check_registered, decoder_inputs, setup, snapshot, trace

from signalchain.integrations.hf_musicgen import delayed_codes

torch.set_num_threads(1)

NAMES = {"labels_bkt_reshaped", "delay_pattern_stereo_formula", "pattern_pad_from_tokenizer", "padding_frames_trained",
         "decoder_inputs_fixed_length", "minus100_decoder_inputs", "codec_unfrozen_ddp_hack"}
RAISES = {"minus100_decoder_inputs"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("step_boundaries", NAMES, "Real-world example: tracing MusicGen's training step")


@pytest.fixture(scope="module")
def clean_trace(bed, golden):
    return trace(bed, setup(bed)[0], golden)


@pytest.mark.parametrize("name", sorted(NAMES - RAISES))
def test_fault_trains_silently(bed, golden, name: str) -> None:
    p = bed.with_faults([name])
    model, opt = setup(p)
    assert torch.isfinite(p.train_step(model, opt, golden).loss)


def test_labels_bkt_reshaped_scrambles_the_targets(bed, golden, clean_trace) -> None:
    p = bed.with_faults(["labels_bkt_reshaped"])
    t = trace(p, setup(p)[0], golden)
    got, want = np.asarray(t.value("targets")), np.asarray(clean_trace.value("targets"))
    assert got.shape == want.shape  # the shape HF expects ...
    for i in range(len(got)):  # ... the same values per example ...
        assert np.array_equal(np.sort(got[i], axis=None), np.sort(want[i], axis=None))
    real = want != -100
    assert (got[real] == want[real]).mean() < 0.3  # ... in the wrong places


def test_delay_pattern_stereo_formula_is_not_the_decoders_pattern(bed, golden, clean_trace) -> None:
    p = bed.with_faults(["delay_pattern_stereo_formula"])
    model = setup(p)[0]
    t = trace(p, model, golden)
    codes = torch.from_numpy(np.asarray(t.value("tokens")))
    labels = np.asarray(t.value("targets"))  # [B, T + 1, K]
    assert (
        labels.shape[1] == codes.shape[-1] + 1
        and np.asarray(clean_trace.value("targets")).shape[1] == codes.shape[-1] + 3
    )
    for k in range(codes.shape[1]):  # codebook k sits at delay k // 2 ...
        assert np.array_equal(labels[0, k // 2 : k // 2 + 20, k], codes[0, k, :20].numpy())
    hf = delayed_codes(model.decoder, codes, p.pad_token_id)  # ... the decoder (and generate) put it at delay k
    for k in range(codes.shape[1]):
        assert torch.equal(hf[0, k, k : k + 20], codes[0, k, :20])
    assert not np.array_equal(labels[0, 2:22, 2], codes[0, 2, :20].numpy())


def test_pattern_pad_from_tokenizer_trains_the_patterns_corner(bed, golden, clean_trace) -> None:
    p = bed.with_faults(["pattern_pad_from_tokenizer"])
    assert p.tokenizer.pad_token_id != p.pad_token_id
    model = setup(p)[0]
    t = trace(p, model, golden)
    labels, clean = np.asarray(t.value("targets")), np.asarray(clean_trace.value("targets"))
    k = labels.shape[2]
    corner = np.zeros(labels.shape[1:], bool)  # [T', K]: positions before codebook k's first frame
    for i in range(k):
        corner[:i, i] = True
    assert (clean[:, corner] == -100).all()
    assert (labels[:, corner] == 0).all()  # T5's pad id, counted as code 0
    assert np.asarray(t.value("mask.loss")).transpose(0, 2, 1)[:, corner].all()
    ids, _ = decoder_inputs(p, model, golden)
    assert (ids.reshape(len(labels), k, -1)[:, 2, 1] == 0).all()  # fed back where generation puts the pad id


def test_padding_frames_trained_keeps_labels_past_the_clip(bed, golden, clean_trace) -> None:
    p = bed.with_faults(["padding_frames_trained"])
    t = trace(p, setup(p)[0], golden)
    padding = np.asarray(t.value("mask.padding"))  # [B, T] frame time
    short = int(np.argmin(padding.sum(axis=1)))
    frames = int(padding[short].sum())
    assert frames < padding.shape[1]  # the golden batch has a clip shorter than the crop
    labels, clean = np.asarray(t.value("targets"))[short], np.asarray(clean_trace.value("targets"))[short]
    # frames past the clip, codebook 0 (delay 0): ignored when clean, trained here
    assert (clean[frames + 1 : padding.shape[1], 0] == -100).all()
    assert (labels[frames + 1 : padding.shape[1], 0] != -100).all()


def test_decoder_inputs_fixed_length_misaligns_logits_and_targets(bed, golden) -> None:
    p = bed.with_faults(["decoder_inputs_fixed_length"])
    out = p.step(setup(p)[0], golden)
    b, tp, k = out.targets.shape
    assert out.logits.shape[:2] == (b * k, 128) and tp == 103
    clean = bed.step(setup(bed)[0], golden)
    assert clean.logits.shape[:2] == (b * k, tp)


def test_minus100_decoder_inputs_crash_in_the_embedding(bed, golden) -> None:
    p = bed.with_faults(["minus100_decoder_inputs"])
    model, opt = setup(p)
    with pytest.raises(IndexError, match="index out of range") as info:
        p.train_step(model, opt, golden)
    user = [f for f in traceback.extract_tb(info.value.__traceback__) if "site-packages" not in f.filename]
    assert user[-1].filename.endswith("reference/hf/faults/step_boundaries.py")  # the user's own forward


def test_codec_unfrozen_ddp_hack_moves_the_codec(bed, golden) -> None:
    p = bed.with_faults(["codec_unfrozen_ddp_hack"])
    model, opt = setup(p)
    held = {id(q) for g in opt.param_groups for q in g["params"]}
    codec = list(model.audio_encoder.parameters())
    assert all(q.requires_grad and id(q) in held for q in codec)
    before = snapshot(model, "audio_encoder.")
    for _ in range(3):
        p.train_step(model, opt, golden)
    moved = changed(model, before)  # weight decay on zero gradients: every nonzero codec weight drifts
    assert len(moved) > 0.8 * len(before) and any(n.startswith("audio_encoder.encoder.") for n in moved)
    clean_model, clean_opt = setup(bed)
    assert not any(id(q) in {id(x) for g in clean_opt.param_groups for x in g["params"]}
                   for q in clean_model.audio_encoder.parameters())
    before = snapshot(clean_model, "audio_encoder.")
    bed.train_step(clean_model, clean_opt, golden)
    assert not changed(clean_model, before)
