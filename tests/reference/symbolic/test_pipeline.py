"""The symbolic bed as signalchain sees it: the protocol, deterministic golden batches, taps and their meta."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from signalchain.pipeline import REQUIRED, capabilities
from signalchain.symbolic import COL, NOTE_COLUMNS

STAGES = ["midi.source", "notes.augmented", "tokens", "notes.decoded", "caption", "condition.dropped",
          "condition.tokens", "condition.mask", "targets", "mask.loss", "logits", "loss"]


def _taps(bed, golden, model=None):
    taps: dict[str, tuple] = {}

    def tap(stage, value, **meta):
        taps.setdefault(stage, (value, meta))
        return value

    out = bed.step(model if model is not None else bed.build_model(0), golden, tap)
    return taps, out


def test_it_is_a_pipeline_with_the_symbolic_capabilities(bed):
    assert all(hasattr(bed, m) for m in REQUIRED)
    assert bed.name == "symbolic-bed"
    caps = capabilities(bed)
    for cap in ("with_captions", "condition_parameters", "generate", "training_examples", "splits", "loader",
                "train_step", "config", "with_faults", "fault_catalogue"):
        assert cap in caps
    assert callable(bed.decode_notes)
    assert isinstance(bed.fault_catalogue(), list)


def test_the_golden_batch_is_the_same_for_a_seed_and_differs_across_seeds(bed):
    a, b, c = bed.golden_batch(0), bed.golden_batch(0), bed.golden_batch(1)
    assert [p.id for p in a.pieces] == [p.id for p in b.pieces]
    assert [p.id for p in a.pieces] != [p.id for p in c.pieces]
    ta, _ = _taps(bed, a)
    tb, _ = _taps(bed, b)
    assert torch.equal(ta["tokens"][0], tb["tokens"][0])
    assert np.array_equal(ta["midi.source"][0], tb["midi.source"][0])


def test_every_contract_stage_is_tapped_in_order_with_its_meta(bed, golden):
    taps, out = _taps(bed, golden)
    names = list(taps)
    assert set(STAGES) <= set(names)
    assert [n for n in names if n in STAGES] == STAGES
    src, meta = taps["midi.source"]
    assert src.shape[1] == len(NOTE_COLUMNS) and meta["unit"] == "beat" and tuple(meta["columns"]) == NOTE_COLUMNS
    assert len(meta["tempos"]) == len(meta["time_signatures"]) == len(meta["files"]) == len(golden)
    ids, tm = taps["tokens"]
    assert ids.dtype == torch.int64 and ids.ndim == 2 and ids.shape[0] == len(golden)
    assert tm["kind"] == "symbolic" and tm["tokenizer"] == "REMI" and tm["cardinality"] == len(tm["vocab"])
    assert tm["vocab"][tm["pad_id"]] == "PAD_None" and tm["vocab"][tm["bos_id"]] == "BOS_None"
    assert tm["vocab"][tm["eos_id"]] == "EOS_None" and tm["resolution"] == 4
    assert {"Bar", "Position", "Pitch", "Velocity", "Duration", "Tempo", "TimeSig", "Program"} <= set(tm["token_types"])
    assert (ids[:, 0] == tm["bos_id"]).all()
    logits = taps["logits"][0]
    assert logits.shape == (*ids.shape, tm["cardinality"])
    targets, mask = taps["targets"][0], taps["mask.loss"][0]
    assert targets.shape == ids.shape and torch.equal(mask, targets != -100)
    assert torch.isfinite(out.loss)


def test_the_source_round_trips_through_the_tokenizer_exactly(bed, golden):
    taps, _ = _taps(bed, golden)
    aug, dec = taps["notes.augmented"][0], taps["notes.decoded"][0]
    assert aug.shape == dec.shape and np.array_equal(aug, dec)
    assert [round(t) for t in taps["notes.decoded"][1]["tempos"]] == taps["midi.source"][1]["tempos"]


def test_augmentation_transposes_pitched_notes_and_leaves_drums(bed):
    batch = bed.golden_batch(0)
    drummed = [p for p in bed.pieces() if p.drums][:4]
    taps, _ = _taps(bed, bed.make_batch(drummed, batch.seed))
    src, aug = taps["midi.source"][0], taps["notes.augmented"][0]
    drum = src[:, COL["drum"]] == 1
    assert drum.any()
    assert np.array_equal(src[drum, COL["pitch"]], aug[aug[:, COL["drum"]] == 1, COL["pitch"]])


def test_captions_name_the_real_attributes(bed):
    for p in bed.pieces():
        assert f"{p.time_signature[0]}/{p.time_signature[1]}" in p.caption
        assert f"{int(p.tempo)} bpm" in p.caption
        assert ("with drums" in p.caption) == p.drums


def test_the_model_overfits_a_golden_batch_quickly(bed, golden):
    batch = bed.make_batch(golden.pieces[:2], golden.seed)
    model = bed.build_model(0)
    opt = bed.build_optimizer(model)
    first = float(bed.train_step(model, opt, batch).loss.detach())
    for _ in range(24):
        last = float(bed.train_step(model, opt, batch).loss.detach())
    assert last < 0.5 * first


def test_generation_returns_valid_ids_that_stop_at_eos(bed, golden):
    model = bed.build_model(0)
    ids = bed.generate(model, golden, {"max_frames": 24, "seed": 0, "cfg_coef": 1.0})
    pad, bos, eos = (bed.tokenizer.vocab[t] for t in ("PAD_None", "BOS_None", "EOS_None"))
    assert ids.shape[0] == len(golden) and ids.shape[1] <= 25 and (ids[:, 0] == bos).all()
    assert ((ids >= 0) & (ids < len(bed.tokenizer))).all()
    for row in ids.tolist():
        if eos in row[1:]:
            end = row.index(eos, 1)
            assert all(t == pad for t in row[end + 1:])
    again = bed.generate(model, golden, {"max_frames": 24, "seed": 0, "cfg_coef": 1.0})
    assert torch.equal(ids, again)


def test_decode_notes_reads_the_golden_tokens_back(bed, golden):
    taps, _ = _taps(bed, golden)
    notes = bed.decode_notes(taps["tokens"][0])
    assert np.array_equal(notes, taps["notes.decoded"][0])


def test_unknown_sampling_settings_are_refused(bed, golden):
    with pytest.raises(ValueError, match="unknown sampling setting"):
        bed.generate(bed.build_model(0), golden, {"beam_width": 3})


def test_splits_are_disjoint_and_fixed(bed):
    s = bed.splits()
    train, valid = {p.id for p in s["train"]}, {p.id for p in s["valid"]}
    assert train and valid and not train & valid and len(train | valid) == len(bed.pieces())
    assert {p.id for p in bed.splits()["valid"]} == valid
    for p in s["valid"][:2]:
        assert {"id", "notes", "tempo", "time_signature", "caption", "programs"} <= set(dir(p))


def test_with_captions_replaces_them(bed, golden):
    b = bed.with_captions(golden, ["x"] * len(golden))
    assert b.captions == ["x"] * len(golden) and golden.captions != b.captions
    with pytest.raises(ValueError, match="captions for a batch of"):
        bed.with_captions(golden, ["x"])
