"""The generation family's note-level repetition step, and the data family's symbolic judges, on a
tiny symbolic pipeline."""

import pytest

pytest.importorskip("miditok")

from _symbolic_pipeline import SymbolicToy  # noqa: E402
from signalchain.checks.symbolic_repetition import judge_note_repetition  # noqa: E402
from signalchain.experiments.context import BUDGETS, Context  # noqa: E402
from signalchain.experiments.generation.notes import measure_note_repetition  # noqa: E402
from signalchain.pipeline import OPTIONAL, ProtocolView  # noqa: E402


def ctx(p):
    return Context(ProtocolView(p), seed=0, budget=BUDGETS["economy"])


def test_decode_notes_is_an_optional_capability():
    assert "decode_notes" in OPTIONAL


def test_a_looping_generator_is_repetitive_on_the_note_level():
    m = measure_note_repetition(ctx(SymbolicToy(loop=True)))
    assert m is not None and m.tokens == 128 and len(m.generated) == 2 and len(m.golden) == 3
    f = judge_note_repetition(m)
    assert [(x.id, x.stage) for x in f] == [("symbolic.repetitive", "generation")]


def test_a_generator_like_its_data_is_silent():
    assert judge_note_repetition(measure_note_repetition(ctx(SymbolicToy(loop=False)))) == []


def test_skipped_without_decode_notes():
    assert measure_note_repetition(ctx(SymbolicToy(decode_notes=False))) is None


def test_the_data_family_judges_a_symbolic_golden_step():
    from signalchain.experiments.doctor import run_doctor

    clean = run_doctor(SymbolicToy(), families=["data"], budget="economy")
    assert [f.id for f in clean.findings if f.severity.value != "info"] == []

    class Shifted(SymbolicToy):  # the files read with their drums transposed (the tokens are the clean ones)
        def golden_batch(self, seed):
            batch = super().golden_batch(seed)
            pieces = []
            for rows, tempo, ts in batch["pieces"]:
                rows = rows.copy()
                rows[rows[:, 6] > 0.5, 1] += 3
                pieces.append((rows, tempo, ts))
            return {**batch, "pieces": pieces}

    got = run_doctor(Shifted(), families=["data"], budget="economy")
    assert ("symbolic.drums_transposed", "midi.source") in [(f.id, f.stage) for f in got.findings]


def test_the_family_measures_tokens_are_reused_when_it_ran():
    import numpy as np

    from signalchain.experiments.generation.measure import GenerationOutcome
    from signalchain.records.generation import Checkpoint, GenerationMeasurement, GenerationRun

    p = SymbolicToy(loop=True)
    looping = p.generate(None, p.golden_batch(0), {"max_frames": 120}).numpy()
    report = GenerationMeasurement(frames=120, prompts=3, frame_rate=None, runs=[])
    report.checkpoints = [Checkpoint(6, None, None, [GenerationRun(label="step 6: configured", overrides={}, seed=0)])]
    outcome = GenerationOutcome(report)
    outcome.codes = {"configured": np.zeros((3, 1, 120), np.int64), "step 6: configured": looping[:, None, :]}
    m = measure_note_repetition(ctx(SymbolicToy(loop=False)), outcome)
    assert m.sampling == {"run": "step 6: configured"} and m.tokens == 120
    assert [x.id for x in judge_note_repetition(m)] == ["symbolic.repetitive"]
