"""The HF MusicGen integration: HF's own training conventions, every capability, every data source."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch

pytest.importorskip("transformers")

from signalchain import record, tap  # noqa: E402
from signalchain.integrations.hf_musicgen import (  # noqa: E402
    HFMusicgenPipeline,
    delayed_codes,
    examples_from_dataset,
    labels_from_pattern,
    read_examples,
)
from signalchain.integrations.hf_musicgen.labels import (  # noqa: E402
    interleave_channels,
    model_delays,
    split_channels,
)
from signalchain.pipeline import OPTIONAL, capabilities  # noqa: E402
from signalchain.reference.hf import HFBedConfig, HFBedPipeline  # noqa: E402
from signalchain.reference.hf.tiny import TinyConfig, bed_clips, tiny_model, tiny_tokenizer  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def bed() -> HFBedPipeline:
    return HFBedPipeline(HFBedConfig(examples=16))


@pytest.fixture(scope="module")
def step(bed: HFBedPipeline):
    model = bed.build_model(0)
    with record(values=True) as trace, torch.no_grad():
        out = bed.step(model, bed.golden_batch(0), tap)
    return model, trace, out


def test_it_offers_every_capability_of_the_protocol(bed: HFBedPipeline) -> None:
    # amp_dtype and scaler exist only for a run that trains in lower precision; load_checkpoint is not
    # needed: bisect --checkpoints reads save_pretrained and Trainer checkpoint-N/ folders itself;
    # decode_notes belongs to symbolic (MIDI-token) pipelines, not to a codec model
    assert set(OPTIONAL) - {"render", "amp_dtype", "scaler", "load_checkpoint", "decode_notes"} <= capabilities(bed)
    fp16 = HFBedPipeline(HFBedConfig(examples=8, amp="fp16"))
    fp16.build_optimizer(fp16.build_model(0))
    assert fp16.amp_dtype is torch.float16 and {"amp_dtype", "scaler"} <= capabilities(fp16)


def test_labels_follow_the_decoders_own_delay_pattern(step) -> None:
    model, trace, out = step
    codes = torch.as_tensor(trace.value("tokens"))  # [B, K, T]
    labels = torch.as_tensor(trace.value("targets"))  # [B, T + K - 1, K]
    b, k, t = codes.shape
    assert labels.shape == (b, t + k - 1, k)
    valid = np.asarray(trace["mask.padding"].value).sum(-1)
    for j in range(k):  # codebook j of frame f sits at f + j, -100 past the clip and on the pattern's edges
        for i in range(b):
            n = int(valid[i])
            assert torch.equal(labels[i, j : j + n, j], codes[i, j, :n])
            assert (labels[i, :j, j] == -100).all() and (labels[i, j + n :, j] == -100).all()
    assert np.array_equal(np.asarray(trace.value("mask.loss")), (labels != -100).transpose(1, 2).numpy())
    assert valid.min() < t  # the golden batch exercises padding


def test_the_loss_is_hfs_own_and_starts_near_ln_cardinality(step) -> None:
    model, trace, out = step
    assert abs(float(out.loss) - np.log(64)) < 0.5
    per = np.asarray(trace.value("loss.per_codebook"))
    assert per.shape == (4,) and abs(per.mean() - float(out.loss)) < 1e-4  # HF averages the codebooks
    assert tuple(trace["logits"].shape) == (16, 103, 64)  # HF's [B*K, T', V]


def test_the_codec_is_frozen_and_makes_distinct_codes(bed: HFBedPipeline, step) -> None:
    model, trace, _ = step
    assert not any(q.requires_grad for q in model.audio_encoder.parameters())
    codes = np.asarray(trace.value("tokens"))
    assert all(len(np.unique(codes[:, j])) > 16 for j in range(codes.shape[1]))  # the codebooks were filled
    groups = bed.build_optimizer(model).param_groups
    assert groups[1]["lr"] == pytest.approx(groups[0]["lr"] * bed.text_lr_scale)  # text encoder, lower rate
    in_opt = {id(q) for g in groups for q in g["params"]}
    assert not any(id(q) in in_opt for q in model.audio_encoder.parameters())


def test_a_few_updates_lower_the_loss(bed: HFBedPipeline) -> None:
    model = bed.build_model(0)
    opt = bed.build_optimizer(model)
    batch = bed.golden_batch(0)
    losses = [float(bed.train_step(model, opt, batch).loss.detach()) for _ in range(12)]
    assert losses[-1] < losses[0] - 0.5


def test_generate_keeps_the_codes_hf_decodes_and_decode_takes_the_model(bed: HFBedPipeline, step) -> None:
    model, _, _ = step
    out = bed.generate(model, bed.golden_batch(0), {"max_frames": 12, "seed": 0, "top_k": 10})
    assert out["tokens"].shape == (4, 4, 12) and out["audio"].shape == (4, 1, 12 * bed.hop)
    again = bed.decode(out["tokens"], model)
    assert torch.allclose(again, out["audio"], atol=1e-5)
    with pytest.raises(ValueError, match="does not take"):
        bed.generation_kwargs({"prompt": [1, 2]}, 10)
    greedy = bed.generation_kwargs({"greedy": True, "cfg_coef": 1.5, "max_frames": 10}, 50)
    assert greedy == {"do_sample": False, "guidance_scale": 1.5, "max_new_tokens": 13}


def test_stereo_checkpoints_interleave_their_codebooks() -> None:
    left, right = torch.arange(6).reshape(1, 3, 2), 10 + torch.arange(6).reshape(1, 3, 2)
    both = interleave_channels(left, right)
    assert both[0, :, 0].tolist() == [0, 10, 2, 12, 4, 14]
    assert all(torch.equal(a, b) for a, b in zip(split_channels(both), (left, right)))
    stereo = HFBedPipeline(HFBedConfig(tiny=TinyConfig(audio_channels=2), examples=8))
    model = stereo.build_model(0)
    codes = torch.randint(0, 64, (2, 8, 5))
    pattern = delayed_codes(model.decoder, codes, 64)  # both channels of a pair share a delay
    assert pattern.shape == (2, 8, 8) and torch.equal(pattern[:, 2, 1:6], codes[:, 2]) and \
        torch.equal(pattern[:, 3, 1:6], codes[:, 3])
    labels = labels_from_pattern(pattern, torch.tensor([5, 3]), 64, audio_channels=2)
    assert (labels[1, 4:, 2] == -100).all() and (labels[1, 1:4, 2] >= 0).all()
    # The delays the decoder itself uses, read off its own pattern: shared per pair for stereo.
    assert model_delays(model.decoder, 8, 64) == [0, 0, 1, 1, 2, 2, 3, 3]
    mono = HFBedPipeline(HFBedConfig(examples=8)).build_model(0)
    assert model_delays(mono.decoder, 4, 64) == [0, 1, 2, 3]
    assert model_delays(torch.nn.Linear(2, 2), 4, 64) is None  # no pattern of its own: nothing declared


def test_data_from_an_audiofolder_a_manifest_and_a_dataset(tmp_path) -> None:
    clips = bed_clips(4)
    folder = tmp_path / "af"
    (folder / "train").mkdir(parents=True)
    rows = []
    for c in clips:
        sf.write(folder / "train" / f"{c.source_id}.wav", c.audio.T, c.sample_rate)
        rows.append(json.dumps({"file_name": f"{c.source_id}.wav", "text": c.caption}))
    (folder / "train" / "metadata.jsonl").write_text("\n".join(rows) + "\n")
    examples, problems = read_examples(folder)
    assert len(examples) == 4 and problems == [] and examples[0].caption == clips[0].caption
    assert examples[0].split == "train" and examples[0].sample_rate == 32000

    manifest = tmp_path / "data.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(folder / "train" / f"{c.source_id}.wav"),
                                            "duration": 1.0, "sample_rate": 32000}) + "\n" for c in clips)
                        + "{not json\n")
    for c in clips:
        (folder / "train" / f"{c.source_id}.json").write_text(json.dumps({"description": c.caption}))
    examples, problems = read_examples(manifest)
    assert len(examples) == 4 and [f.id for f in problems] == ["manifest.invalid"]

    ds = [{"audio": {"array": c.audio[0], "sampling_rate": c.sample_rate}, "description": c.caption}
          for c in clips]
    got = examples_from_dataset(ds)
    assert len(got) == 4 and got[1].audio.shape[0] == 1 and got[1].caption == clips[1].caption


def test_a_datasets_dataset_and_a_model_config_make_a_pipeline() -> None:
    datasets = pytest.importorskip("datasets")
    clips = bed_clips(6)
    ds = datasets.Dataset.from_list([{"audio": {"array": c.audio.mean(0), "sampling_rate": c.sample_rate},
                                      "caption": c.caption} for c in clips])
    tok = tiny_tokenizer()
    model = tiny_model(0, TinyConfig(), len(tok))
    p = HFMusicgenPipeline(model, tokenizer=tok, data=ds, segment_seconds=1.0, batch_size=2)
    assert len(p.split_examples("train")) == 5 and len(p.split_examples("valid")) == 1
    with torch.no_grad():
        out = p.step(p.build_model(0), p.golden_batch(0))
    assert torch.isfinite(out.loss)


def test_a_codec_left_trainable_is_codec_trained_and_a_frozen_one_is_not(bed: HFBedPipeline) -> None:
    from signalchain.checks.optimisation.gradients import judge_gradients
    from signalchain.experiments.context import Context
    from signalchain.experiments.optimisation.gradients import measure_gradients
    from signalchain.pipeline import ProtocolView

    def ids(p):
        return {(f.id, f.severity.value) for f in judge_gradients(measure_gradients(Context(ProtocolView(p))))}

    assert ("codec.trained", "error") in ids(bed.with_faults(["codec_unfrozen_ddp_hack"]))
    assert not {i for i, _ in ids(bed)} & {"codec.trained", "grad.zero"}
