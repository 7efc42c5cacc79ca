"""Conditioning judges on hand-made records: each fires on its defect, names the stage, and stays
silent on a clean record. The records are built here (no pipeline), from a small caption template
unlike the reference's, so that no judge can lean on the reference's wording."""

import numpy as np
import pytest

from signalchain.checks.conditioning import (
    judge_dropout,
    judge_empty,
    judge_metadata,
    judge_pairing,
    judge_truncated,
    judge_unknown_tokens,
    judge_unseen_words,
    words,
)
from signalchain.checks.conditioning_model import (
    judge_collapse,
    judge_condition_grads,
    judge_guidance,
    judge_sensitivity,
)
from signalchain.checks.conditioning_relationship import association, judge_relationship
from signalchain.findings import Finding, Severity
from signalchain.records.conditioning import (
    ConditionBatch,
    ConditionData,
    ConditionGrads,
    CondParam,
    GuidanceProbe,
    Sensitivity,
)

MOODS = ["calm", "dark", "happy", "tense"]
GEAR = ["piano", "cello", "synth", "choir", "banjo"]
PLACES = ["at night", "by the sea", "in a hall", "under rain"]


def caption(rng):
    return (
        f"A {rng.choice(MOODS)} {rng.choice(GEAR)} piece recorded {rng.choice(PLACES)}, "
        f"{int(rng.integers(60, 180))} bpm"
    )


def batch(rng, n=8, source="loader", max_len=32, rate=0.2):
    caps = [caption(rng) for _ in range(n)]
    meta = [{"id": f"clip{int(rng.integers(1e6))}", "text": c, "tags": words(c)[1:3]} for c in caps]
    vocab = {w: i + 2 for i, w in enumerate(sorted({w for c in caps for w in words(c)}))}
    ids = np.zeros((n, max_len), dtype=np.int64)
    for i, c in enumerate(caps):
        t = [vocab[w] for w in words(c)][:max_len]
        ids[i, : len(t)] = t
    emb = rng.normal(size=(n, max_len, 16)) * (ids != 0)[..., None]
    return ConditionBatch(source=source, captions=caps, metadata=meta, dropped=rng.random(n) < rate, rate=rate,
                          ids=ids, mask=ids != 0, max_len=max_len, embedding=emb)


def data(seed=0, batches=6, **kw):
    rng = np.random.default_rng(seed)
    bs = [batch(rng, source="golden" if i == 0 else "loader", **kw) for i in range(batches)]
    train = [c for b in bs[1:] for c in b.captions] + [caption(rng) for _ in range(200)]
    return ConditionData(batches=bs, training_captions=train, training_source="loader", prompts=bs[0].captions)


DATA_JUDGES = (judge_empty, judge_truncated, judge_unknown_tokens, judge_metadata, judge_pairing, judge_dropout,
               judge_unseen_words, judge_collapse)


def found(findings):
    return [(f.id, f.stage) for f in findings if f.severity != Severity.INFO]


@pytest.mark.parametrize("seed", range(5))
def test_clean_records_raise_nothing(seed):
    d = data(seed)
    for judge in DATA_JUDGES:
        assert found(judge(d)) == [], judge.__name__


def test_empty_captions_name_the_metadata_field_that_holds_text():
    d = data()
    for b in d.batches:
        b.captions = ["   "] * len(b.captions)
    f = judge_empty(d)
    assert found(f) == [("caption.empty", "caption")] and f[0].severity == Severity.ERROR
    assert "'text'" in f[0].message


def test_captions_whose_tokens_are_all_padding():
    d = data()
    for b in d.batches:
        b.mask = np.zeros_like(b.mask)
    assert found(judge_empty(d)) == [("caption.empty", "condition.tokens")]


def test_truncation_at_the_token_limit_and_before_tokenising():
    d = data(max_len=4)
    f = judge_truncated(d)
    assert found(f) == [("caption.truncated", "condition.tokens")] and "all 4 condition token slots" in f[0].message
    d = data()
    for b in d.batches:  # the text was cut to its first two words: the mask keeps two tokens
        b.mask = np.zeros_like(b.mask)
        b.mask[:, :2] = True
    f = judge_truncated(d)
    assert found(f) == [("caption.truncated", "condition.tokens")] and "keep only 2-2" in f[0].message


def test_every_word_becoming_one_id():
    d = data()
    for b in d.batches:
        b.ids = np.where(b.mask, 1, 0)
    f = judge_unknown_tokens(d)
    assert found(f) == [("condition.tokens_unknown", "condition.tokens")] and f[0].evidence["top_id"] == 1


def test_generic_captions_with_and_without_a_description_in_the_metadata():
    d = data()
    for b in d.batches:
        b.captions = [m["tags"][1] for m in b.metadata]  # the instrument tag only: five values
    f = judge_metadata(d)
    assert found(f) == [("condition.metadata_missing", "caption")] and "'text'" in f[0].message
    for b in d.batches:
        b.metadata = [{"id": m["id"], "tags": m["tags"]} for m in b.metadata]
    f = judge_metadata(d)
    assert found(f) == [("condition.metadata_missing", "metadata")]


def test_captions_reversed_against_their_metadata():
    d = data()
    for b in d.batches:
        b.captions = b.captions[::-1]
    f = judge_pairing(d)
    assert found(f) == [("caption.mismatch", "caption")] and f[0].severity == Severity.ERROR


@pytest.mark.parametrize("share,expected", [(0.2, []), (0.7, [("condition.dropout_rate", "condition.dropped")]),
                                            (0.0, [("condition.dropout_rate", "condition.dropped")])])
def test_dropout_rate_against_the_configured_one(share, expected):
    d = data()
    rng = np.random.default_rng(1)
    for b in d.batches:
        b.dropped = rng.random(len(b.captions)) < share
    f = judge_dropout(d)
    assert found(f) == expected
    if f:
        assert f[0].severity == (Severity.ERROR if share > 0.2 else Severity.WARNING)


def test_dropout_without_a_configured_rate_fires_only_when_most_are_dropped():
    d = data()
    for b in d.batches:
        b.rate, b.dropped = None, np.ones(len(b.captions), bool)
    assert found(judge_dropout(d)) == [("condition.dropout_rate", "condition.dropped")]


def test_prompt_words_never_trained():
    d = data()
    d.prompts = [c.replace("piece", "orchestral suite") for c in d.prompts]
    f = judge_unseen_words(d)
    assert found(f) == [("condition.unseen_words", "condition.tokens")]
    assert set(f[0].evidence["unseen"]) == {"orchestral", "suite"}


def _features(d, noise=0.3, seed=0):
    """A descriptor per example that follows its caption's mood word (what a real recording would do)."""
    rng = np.random.default_rng(seed)
    for b in d.batches:
        level = np.array([[MOODS.index(next(w for w in words(c) if w in MOODS))] for c in b.captions], float)
        b.audio_features = np.hstack([level + noise * rng.normal(size=level.shape), rng.normal(size=(len(level), 5))])
    return d


def test_relationship_is_found_when_captions_describe_the_audio_and_missing_when_shuffled():
    d = _features(data())
    a = association([set(words(c)) for b in d.batches for c in b.captions],
                    np.concatenate([b.audio_features for b in d.batches]))
    assert a is not None and a["z"] > 5
    assert judge_relationship(d) == []
    rng = np.random.default_rng(3)
    for b in d.batches:  # labels re-joined in another order: each clip carries another clip's caption
        b.audio_features = b.audio_features[rng.permutation(len(b.captions))]
    shuffled = [c for b in d.batches for c in b.captions]
    order = rng.permutation(len(shuffled))
    for k, b in enumerate(d.batches):
        b.captions = [shuffled[i] for i in order[k * 8:(k + 1) * 8]]
    f = judge_relationship(d)
    assert found(f) == [("condition.no_relationship", "caption")]


def test_collapsed_embedding_is_found_position_by_position():
    d = data()
    for b in d.batches:
        b.embedding = np.broadcast_to(b.embedding[:1], b.embedding.shape) * b.mask[..., None]
    f = judge_collapse(d)
    assert found(f) == [("condition.collapsed", "condition.embedding")]
    assert judge_collapse(d, [Finding("condition.tokens_unknown", Severity.ERROR, "condition.tokens", "")]) == []


def test_sensitivity_unused_presence_only_and_a_zero_gate():
    unused = Sensitivity(7, {"other caption": 0.9, "null caption": 1.0}, {"other caption": 0.0, "null caption": 0.0})
    assert found(judge_sensitivity(unused)) == [("condition.unused", "logits")]
    presence = Sensitivity(7, {"other caption": 0.9, "null caption": 1.0}, {"other caption": 0.0, "null caption": 0.1})
    f = judge_sensitivity(presence)
    assert found(f) == [("condition.unused", "logits")] and f[0].severity == Severity.WARNING
    trained = Sensitivity(7, {"other caption": 0.9}, {"other caption": 0.05}, steps=3)
    assert found(judge_sensitivity(unused, None, trained)) == []
    clean = Sensitivity(7, {"other caption": 0.9, "null caption": 1.0}, {"other caption": 0.07, "null caption": 0.1})
    assert judge_sensitivity(clean) == []
    same_embedding = Sensitivity(7, {"other caption": 0.0}, {"other caption": 0.0})
    assert judge_sensitivity(same_embedding) == []


def _params(frozen=(), constant=(), cut=()):
    names = ["enc.emb.weight", "enc.norm.weight", "enc.norm.bias", "enc.out.bias", "fuse.kv.weight", "fuse.kv.bias"]
    return [CondParam(n, 10, n not in frozen, 1 if "weight" not in n or "norm" in n else 2,
                      "frozen" if n in frozen else ("none" if n in cut else "ok"), n in constant) for n in names]


def test_grads_frozen_at_init_versus_pretrained():
    enc = ("enc.emb.weight", "enc.norm.weight", "enc.norm.bias", "enc.out.bias")
    f = judge_condition_grads(ConditionGrads(_params(enc, constant=enc[1:]), True, False, "n/a"))
    assert found(f) == [("condition.encoder_frozen", "condition.embedding")]
    f = judge_condition_grads(ConditionGrads(_params(enc), True, False, "n/a"))
    assert found(f) == [] and f[0].severity == Severity.INFO
    assert judge_condition_grads(ConditionGrads(_params(), True, True, "ok")) == []


def test_grads_whole_path_frozen_judged_by_whether_it_was_trained():
    """LoRA or head-only fine-tuning of a pretrained model freezes the whole conditioning path,
    fusion included (zoo member sym-ft-lora): trained-looking gains are info, constant ones an error."""
    names = ("enc.emb.weight", "enc.norm.weight", "enc.norm.bias", "enc.out.bias", "fuse.kv.weight", "fuse.kv.bias")
    pretrained = judge_condition_grads(ConditionGrads(_params(names), True, False, "n/a"))
    assert found(pretrained) == [] and pretrained[0].severity == Severity.INFO
    assert pretrained[0].evidence["whole_path"] and pretrained[0].evidence["constant"] == 0
    fresh = judge_condition_grads(ConditionGrads(_params(names, constant=names[1:4] + names[5:]), True, False, "n/a"))
    assert found(fresh) == [("condition.encoder_frozen", "condition.embedding")]
    assert fresh[0].severity == Severity.ERROR and "never trained" in fresh[0].message
    only_matrices = [q for q in _params(names) if q.ndim == 2]  # no gain to read: cannot tell
    unknown = judge_condition_grads(ConditionGrads(only_matrices, True, False, "n/a"))
    assert [(f.id, f.severity) for f in unknown] == [("condition.encoder_frozen", Severity.WARNING)]


def test_grads_cut_at_the_embedding_or_after_it():
    enc = ("enc.emb.weight", "enc.norm.weight", "enc.norm.bias", "enc.out.bias")
    f = judge_condition_grads(ConditionGrads(_params(cut=enc), True, False, "n/a"))
    assert found(f) == [("condition.no_grad", "condition.embedding")]
    f = judge_condition_grads(ConditionGrads(_params(cut=enc), True, True, "none"))
    assert found(f) == [("condition.no_grad", "grad")]
    unused = [Finding("condition.unused", Severity.ERROR, "logits", "")]
    assert judge_condition_grads(ConditionGrads(_params(cut=enc), True, True, "none"), unused) == []


def test_guidance_cancelling_the_condition():
    sens = Sensitivity(7, {"other caption": 0.9}, {"other caption": 0.07}, tv={"null caption": 0.05})
    off = GuidanceProbe(256, {"other caption": 0.0, "null caption": 0.0, "null caption, guidance 1": 0.02}, sampled=256)
    assert found(judge_guidance(off, sens)) == [("generation.guidance_off", "generation")]
    dropped = GuidanceProbe(256, {"other caption": 0.0, "null caption": 0.0, "null caption, guidance 1": 0.0},
                            sampled=256)
    assert found(judge_guidance(dropped, sens)) == [("condition.unused", "generation")]
    fine = GuidanceProbe(256, {"other caption": 0.03, "null caption": 0.05})
    assert judge_guidance(fine, sens) == []
    deaf = Sensitivity(7, {"other caption": 0.9}, {"other caption": 0.0})
    assert judge_guidance(off, deaf) == []


def test_identical_generations_are_no_evidence_when_the_caption_barely_moves_the_predictions():
    """A fresh HF decoder's cross-attention moves its predictions by ~1e-4 in total variation: 128
    sampled tokens are then expected to be identical for any caption (0.05 expected changes)."""
    weak = Sensitivity(
        4,
        {"other caption": 0.66, "null caption": 2.8},
        {"other caption": 1.5e-3, "null caption": 5.6e-3},
        tv={"other caption": 8e-5, "null caption": 4e-4},
    )
    same = GuidanceProbe(128, {"other caption": 0.0, "null caption": 0.0, "null caption, guidance 1": 0.0}, sampled=128)
    f = judge_guidance(same, weak)
    assert found(f) == [] and [x.id for x in f] == ["condition.unused"] and f[0].severity == Severity.INFO
    assert "no evidence" in f[0].message and f[0].evidence["expected_changes"] < 1
    unknown = GuidanceProbe(4000, {"other caption": 0.0, "null caption": 0.0, "null caption, guidance 1": 0.0},
                            compared="audio", sampled=None)
    f = judge_guidance(unknown, weak)
    assert found(f) == [] and f[0].severity == Severity.INFO and "audio" in f[0].message


def test_sensitivity_floor_comes_from_the_pipeline():
    """The bound on "no response" is the logits' own: dtype precision, or the run-to-run control."""
    f32 = Sensitivity(4, {"other caption": 0.9}, {"other caption": 5e-7})
    assert f32.floor == pytest.approx(8 * 1.1920929e-07)
    assert found(judge_sensitivity(f32)) == [("condition.unused", "logits")]
    bf16 = Sensitivity(4, {"other caption": 0.9}, {"other caption": 5e-3}, eps=2 ** -7)
    assert found(judge_sensitivity(bf16)) == [("condition.unused", "logits")]  # within bf16 rounding
    noisy = Sensitivity(4, {"other caption": 0.9}, {"other caption": 2e-4}, control=1e-4)
    assert found(judge_sensitivity(noisy)) == [("condition.unused", "logits")]  # inside 10x the noise
    clear = Sensitivity(4, {"other caption": 0.9}, {"other caption": 2e-3}, control=1e-6)
    assert judge_sensitivity(clear) == []
    # a zero gate: silent fresh, awake after updates by 10x the trained floor
    fresh = Sensitivity(4, {"other caption": 0.9}, {"other caption": 0.0})
    woke = Sensitivity(4, {"other caption": 0.9}, {"other caption": 6e-5}, steps=3)
    asleep = Sensitivity(4, {"other caption": 0.9}, {"other caption": 2e-7}, steps=3)
    assert found(judge_sensitivity(fresh, None, woke)) == []
    assert found(judge_sensitivity(fresh, None, asleep)) == [("condition.unused", "logits")]


def _meta_rows(n, caption, meta):
    return ConditionBatch(
        source="loader", captions=[caption(i) for i in range(n)], metadata=[meta(i) for i in range(n)]
    )


def test_metadata_message_says_what_the_fields_hold():
    """A 'description' field that is there but repeats the few caption values is not called missing."""
    genres = ["rock", "jazz", "folk"]
    b = _meta_rows(
        24,
        lambda i: genres[i % 3],
        lambda i: {"title": f"song {i}", "genre": genres[i % 3], "description": genres[i % 3], "bpm": 100 + i},
    )
    f = judge_metadata(ConditionData(batches=[b]))
    assert [(x.id, x.stage) for x in f] == [("condition.metadata_missing", "metadata")]
    msg = f[0].message
    assert "no metadata field holds a description" not in msg
    assert "'description': 3 distinct values of 1 word (the captions themselves)" in msg
    assert "'bpm': not text in 24 (int)" in msg
    empty = _meta_rows(24, lambda i: genres[i % 3], lambda i: {"title": f"song {i}", "description": ""})
    msg = judge_metadata(ConditionData(batches=[empty]))[0].message
    assert "'description': empty in 24" in msg


def test_metadata_repeated_examples_are_not_generic_captions():
    """A small set seen in many batches repeats its captions: the distinct examples are what count."""
    b = _meta_rows(40, lambda i: f"caption number {i % 4} with several words",
                   lambda i: {"title": f"song {i % 4}", "description": f"caption number {i % 4} with several words"})
    assert judge_metadata(ConditionData(batches=[b])) == []


def test_segments_and_chunks_keep_their_recordings_caption():
    """AudioCraft's segments (MusicInfo + SegmentInfo) and chunk files of a take share their recording's
    caption: few captions for many pieces, and nothing missing (info, not a warning)."""
    takes = [f"A {MOODS[t % 4]} {GEAR[t % 5]} piece recorded {PLACES[t % 4]}" for t in range(6)]
    segments = _meta_rows(48, lambda i: takes[i % 6], lambda i: {
        "description": takes[i % 6], "genre": GEAR[i % 5], "moods": [] if i % 4 == 2 else [MOODS[i % 4]],
        "keywords": "", "meta": {"path": f"/music/take{i % 6}.wav", "duration": 30.0}, "seek_time": 0.37 * i})
    chunks = _meta_rows(48, lambda i: takes[i // 8], lambda i: {
        "file_name": f"train/take{i // 8:02d}_chunk{i % 8:03d}.wav", "text": takes[i // 8]})
    for b in (segments, chunks):
        f = judge_metadata(ConditionData(batches=[b]))
        assert found(f) == [] and [x.id for x in f] == ["condition.metadata_missing"]
        assert f[0].evidence["recordings"] == 6 and f[0].evidence["examples"] == 48


def test_generic_captions_of_different_recordings_still_warn():
    """The fault's record: a caption fallen back to the genre, each clip its own recording (a source id,
    or a numbered file whose stripped name holds many captions)."""
    genres = ["rock", "jazz", "folk", "pop"]
    by_id = _meta_rows(48, lambda i: genres[i % 4], lambda i: {
        "source_id": f"rec-{i:04d}", "title": f"Song {i}", "genre": genres[i % 4], "key": f"{'CDEFGAB'[i % 7]} major"})
    numbered = _meta_rows(48, lambda i: genres[i % 4], lambda i: {"file_name": f"{i:04d}.wav", "genre": genres[i % 4]})
    for b in (by_id, numbered):
        assert found(judge_metadata(ConditionData(batches=[b]))) == [("condition.metadata_missing", "metadata")]


def _dropped(flags_per_batch, rate=None):
    import numpy as np

    from signalchain.records.conditioning import ConditionBatch, ConditionData
    return ConditionData([ConditionBatch("loader", ["c"] * len(f), dropped=np.asarray(f, bool), rate=rate)
                          for f in flags_per_batch])


def test_guidance_over_a_never_dropped_condition_is_an_untrained_branch():
    from signalchain.checks.conditioning import judge_guidance_dropout
    from signalchain.records.conditioning import DeclaredGuidance

    def ids(cfg, data):
        return [f.id for f in judge_guidance_dropout(DeclaredGuidance(cfg), data)]

    never = _dropped([[False] * 8] * 8)  # 64 conditions, none dropped, no rate tapped
    assert ids(3.0, never) == ["generation.guidance_untrained"]
    assert ids(3.0, _dropped([[False] * 4], rate=0.0)) == ["generation.guidance_untrained"]  # declared rate 0
    assert ids(1.0, never) == [] and ids(None, never) == []  # no guidance, or none reported
    assert ids(3.0, _dropped([[False] * 8] * 4)) == []  # 32 seen and no rate: chance at 10 % (3 %)
    assert ids(3.0, _dropped([[False] * 7 + [True]] + [[False] * 8] * 8)) == []  # one dropped
    assert ids(3.0, _dropped([[False] * 8] * 8, rate=0.1)) == []  # the binomial judge's case
