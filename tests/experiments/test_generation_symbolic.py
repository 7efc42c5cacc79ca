"""The generation family on symbolic pipelines: ids `[B, T]` tapped as `generation.tokens` are read as one
stream, and a sampler that can never emit EOS is told from a fresh model that merely rarely picks it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("miditok")

from _symbolic_pipeline import SymbolicToy  # noqa: E402
from signalchain import tap  # noqa: E402
from signalchain.checks.generation import judge_eos  # noqa: E402
from signalchain.experiments.context import BUDGETS, Context  # noqa: E402
from signalchain.experiments.generation.eos import eos_probe, symbolic_eos_id  # noqa: E402
from signalchain.experiments.generation.metrics import eos_stats  # noqa: E402
from signalchain.experiments.generation.runs import generate_once, take  # noqa: E402
from signalchain.pipeline import ProtocolView  # noqa: E402
from signalchain.records.symbolic import EosProbe, EosStats  # noqa: E402

torch.set_num_threads(1)


class TappingToy(SymbolicToy):
    """Taps what it generates, ids [B, T] (one stream), as symbolic pipelines do."""

    def generate(self, model, batch, sampling):
        return tap("generation.tokens", super().generate(model, batch, sampling), **self.meta)


class SamplingToy(SymbolicToy):
    """Samples from its model one token at a time after BOS, stops a row at EOS, and taps the logits it picks
    from. `banned_through` is the last special id its sampler forbids: BOS (1) is right; EOS (2), an off-by-one
    in `allowed[:, :banned_through + 1]`, leaves the sampler unable to stop."""

    def __init__(self, banned_through: str = "BOS_None"):
        super().__init__()
        self.banned = self.meta["vocab"].index(banned_through) + 1

    def golden_batch(self, seed):
        """The golden pieces as BOS ... EOS, right-padded: sequences that end."""
        batch = super().golden_batch(seed)
        m = self.meta
        rows = [[m["bos_id"], *[int(i) for i in r if i != m["pad_id"]], m["eos_id"]] for r in batch["tokens"].tolist()]
        tokens = torch.full((len(rows), max(map(len, rows))), m["pad_id"])
        for i, r in enumerate(rows):
            tokens[i, : len(r)] = torch.tensor(r)
        return {**batch, "tokens": tokens}

    def generate(self, model, batch, sampling):
        n, rows = int(sampling.get("max_frames", 40)), len(batch["pieces"])
        gen = torch.Generator().manual_seed(int(sampling.get("seed", 0)))
        bos, eos, pad, v = self.meta["bos_id"], self.meta["eos_id"], self.meta["pad_id"], len(self.meta["vocab"])
        ids = torch.full((rows, 1), bos)
        seen = [torch.full((rows, v), float("nan"))]
        done = torch.zeros(rows, dtype=torch.bool)
        with torch.no_grad():
            for _ in range(n):
                allowed = model(ids[:, -1:])[:, -1].clone()
                allowed[:, : self.banned] = float("-inf")
                seen.append(allowed.masked_fill(done[:, None], float("nan")))
                nxt = torch.multinomial(allowed.softmax(-1), 1, generator=gen).squeeze(-1)
                nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
                ids = torch.cat([ids, nxt[:, None]], 1)
                done |= nxt == eos
                if bool(done.all()):
                    break
        tap("generation.tokens", ids, **self.meta, frames_generated=ids.shape[1])
        tap("generation.logits", torch.stack(seen, 1)[:, None])
        return ids


@pytest.mark.slow
def test_tapped_symbolic_ids_are_read_as_one_stream():
    from signalchain.experiments.doctor import run_doctor

    r = run_doctor(TappingToy(), families=["generation"], budget="economy")
    assert [f for f in r.findings if f.id == "internal.check_failed"] == []
    assert "generation" in r.families


def test_eos_stats_reads_a_mask_as_exactly_zero():
    codes = np.array([[[1, 5, 6, 7]], [[1, 5, 2, 0]]])  # row 1 stops at EOS (2), then PAD
    logits = np.zeros((2, 1, 4, 8))
    logits[:, :, 0] = np.nan  # BOS
    logits[1, :, 3] = np.nan  # after EOS
    got = eos_stats(codes, 2, logits)
    assert (got.rows, got.emitted, got.steps, got.zero_steps) == (2, 1, 5, 0)
    assert got.expected == pytest.approx(5 / 8) and got.log_p_none == pytest.approx(5 * math.log(7 / 8))
    logits[..., 2] = np.finfo(np.float32).min  # a mask by the most negative float, as HF writes it
    assert eos_stats(codes, 2, logits).zero_steps == 5
    assert eos_stats(codes, 2, None).steps == 0  # ids only: nothing about the sampler


def _probe(stats, golden=(30, 40, 50), limit=60, model=0.004):
    return EosProbe(stats=stats, limit=limit, frames_generated=limit, golden_eos_positions=list(golden),
                    model_eos_probability=model)


def test_judge_eos_on_its_evidence():
    masked = EosStats(eos_id=2, rows=2, emitted=0, length=61, steps=120, zero_steps=120, max_probability=0.0,
                      expected=0.0, log_p_none=0.0)
    f = judge_eos(_probe(masked))
    assert [(x.id, x.severity.value, x.stage) for x in f] == [("generation.no_stop", "warning", "generation")]
    assert "exactly 0 at all 120 steps" in f[0].message and "3 of 3 golden sequences have ended" in f[0].message
    fresh = EosStats(eos_id=2, rows=2, emitted=0, length=61, steps=120, zero_steps=0, max_probability=0.01,
                     expected=0.4, log_p_none=-0.4)  # a fresh model: EOS possible, just unlikely
    assert judge_eos(_probe(fresh)) == []
    refused = EosStats(eos_id=2, rows=2, emitted=0, length=61, steps=120, zero_steps=0, max_probability=0.3,
                       expected=12.0, log_p_none=-14.0)  # mass the picks never took: dropped after the tap
    assert [x.evidence["log_p_none"] for x in judge_eos(_probe(refused))] == [-14.0]
    stopped = EosStats(**{**masked.__dict__, "emitted": 1})
    assert judge_eos(_probe(stopped)) == []
    assert judge_eos(_probe(masked, golden=(30, 100, 120, 140))) == []  # a minimum length could still explain it
    assert judge_eos(None) == [] and judge_eos(_probe(EosStats(eos_id=2, rows=2, emitted=0, length=61))) == []


def _judged(p, seed):
    ctx = Context(ProtocolView(p), seed=seed, budget=BUDGETS["economy"])
    model, prompts, eos = ctx.fresh_model(), take(ctx.batch(), 2), symbolic_eos_id(ctx)
    run, _, _ = generate_once(ctx.pipeline, model, prompts, "configured", {}, seed, 40, eos_id=eos)
    probe = eos_probe(ctx, model, prompts, run, eos)
    return run, probe, judge_eos(probe)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clean_sampler_on_a_fresh_model_is_silent(seed):
    run, probe, found = _judged(SamplingToy(), seed)
    assert run.eos is not None and run.eos.steps > 0 and run.eos.zero_steps == 0
    assert probe is None and found == []  # nothing suspicious: no extra run either


@pytest.mark.parametrize("seed", [0, 1])
def test_a_sampler_that_bans_eos_with_the_other_specials_never_stops(seed):
    run, probe, found = _judged(SamplingToy(banned_through="EOS_None"), seed)
    assert run.eos.zero_steps == run.eos.steps > 0
    assert probe is not None and probe.limit > np.median(probe.golden_eos_positions)
    assert probe.model_eos_probability and probe.model_eos_probability > 0  # the model itself gives EOS mass
    assert [(f.id, f.stage) for f in found] == [("generation.no_stop", "generation")]


def test_sampler_findings_on_symbolic_runs_speak_of_tokens_and_bars():
    from signalchain.checks.generation import judge_sampler
    from signalchain.records.generation import GenerationMeasurement, GenerationRun, SamplerFit, TokenStats

    stats = TokenStats(rows=2, frames=40, entropy=[1.0], ngram_repetition=0.5, longest_repeat=0.5,
                       same_as_previous=0.1, loop_period=4, loop_strength=0.6)

    def judged(fit, symbolic, **run):
        r = GenerationRun(label="configured", overrides={}, seed=0, stats=stats, fit=fit, cardinality=371, **run)
        return judge_sampler(GenerationMeasurement(frames=40, prompts=2, frame_rate=None, runs=[r], symbolic=symbolic))

    greedy = SamplerFit(n=80, top1=1.0, top1_expected=0.02)
    cut = SamplerFit(n=80, top1=0.3, top1_expected=0.02, max_rank=2, beyond_rank_expected=60.0, temperature=1.0)
    for fit, extra in ((greedy, {}), (cut, {"sampled_share": 0.3})):
        sym = judged(fit, True, **extra)
        assert sym and all("frame" not in f.message + f.hint and "MusicGen samples" not in f.hint for f in sym)
        assert [f.id for f in sym] == [f.id for f in judged(fit, False, **extra)]
    assert "after a few bars" in judged(greedy, True)[0].hint
    assert "371-token vocabulary" in judged(cut, True)[0].hint
