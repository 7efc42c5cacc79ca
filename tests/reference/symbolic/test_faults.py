"""The symbolic bed's fault catalogue: size, declarations, every fault applies and the bed still
steps, the scoring view hides it; and the faults of the bed's own family (tokenizer, sequences,
notes) make their declared id fire at their stage on one recorded step while the clean bed stays
silent. (The generic families' faults are scored by `signalchain faults symbolic-bed`.)"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from signalchain import record, tap
from signalchain.checks.symbolic import SYMBOLIC_CHECKS
from signalchain.experiments.doctor import SYMPTOMS
from signalchain.experiments.families.data import DATA_CHECKS
from signalchain.pipeline import ProtocolView
from signalchain.reference.faults import catalogue as reference_catalogue
from signalchain.reference.symbolic.faults import catalogue, get_fault
from signalchain.reference.symbolic.faults._registry import FAMILIES
from signalchain.trace.vocabulary import stage_info

torch.set_num_threads(1)

NAMES = [f.name for f in catalogue()]
OWN = [f.name for f in catalogue("symbolic")]


def _findings(p, seed: int = 0) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # miditok warns about what a faulty config drops
        with record(values=True) as trace:
            p.step(p.build_model(0), p.golden_batch(seed), tap)
    return [f for judge in (*DATA_CHECKS, *SYMBOLIC_CHECKS) for f in judge(trace) if f.severity.value != "info"]


def test_catalogue_is_large_spread_and_declared() -> None:
    faults = catalogue()
    assert len(faults) >= 25
    assert len(set(NAMES)) == len(NAMES)
    assert len(OWN) >= 15 and {f.family for f in faults} >= {"symbolic", "splits", "conditioning", "flat_loss",
                                                             "repetition_generation"}
    for f in faults:
        assert f.family in FAMILIES and f.cause and f.section and f.expected_ids, f.name
        assert stage_info(f.expected_stage) is not None, (f.name, f.expected_stage)
        assert all(i.count(".") >= 1 and i == i.lower() for i in f.expected_ids), f.name
        assert f.symptom is None or f.symptom in SYMPTOMS, f.name
        assert "# Bug" in inspect.getsource(f.apply), f"{f.name}: say how the bug is written (# Bug: ...)"


def test_no_fault_is_a_reference_fault_under_its_name() -> None:
    assert not {f.name for f in reference_catalogue()} & set(NAMES)


def test_unknown_fault_names_suggest_the_close_ones() -> None:
    with pytest.raises(ValueError, match="did you mean tokenizer_drops_tempo"):
        get_fault("tokenizer_drop_tempo")


def test_an_unknown_family_is_refused() -> None:
    from signalchain.reference.symbolic.faults._registry import fault

    with pytest.raises(ValueError, match="unknown family 'symbolik'"):
        fault("x", "symbolik", "cause", "section", ["a.b"], "tokens")


def test_with_faults_and_fault_catalogue(bed) -> None:
    listed = bed.fault_catalogue()
    assert [d["name"] for d in listed] == NAMES
    p = bed.with_faults(["sgd_lr_kept_for_adamw", "dropout_rate_in_percent"])
    assert p.config["faults"] == ["sgd_lr_kept_for_adamw", "dropout_rate_in_percent"]
    assert (p.lr, p.cond_dropout) == (0.5, 10.0) and (bed.lr, bed.cond_dropout) != (0.5, 10.0)
    assert bed.config["faults"] == []  # the clean bed is left alone


def test_the_scoring_view_hides_which_fault_is_injected(bed) -> None:
    view = ProtocolView(bed.with_faults(["tokenizer_drops_tempo"]))
    for hidden in ("config", "faults", "with_faults", "fault_catalogue", "cfg"):
        with pytest.raises(AttributeError):
            getattr(view, hidden)
    assert view.name == bed.name


@pytest.mark.parametrize("name", NAMES)
def test_every_fault_applies_and_the_bed_still_trains_a_step(bed, name: str) -> None:
    p = bed.with_faults([name])
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = p.train_step(model, opt, p.golden_batch(0))
    assert out.loss.ndim == 0 and out.logits.shape[:2] == out.targets.shape


def test_the_clean_bed_is_silent_on_its_golden_batches(bed) -> None:
    for seed in range(3):
        assert _findings(bed, seed) == []


@pytest.mark.parametrize("name", [n for n in OWN if get_fault(n).expected_stage != "split"])
def test_each_own_fault_fires_its_id_at_its_stage(bed, name: str) -> None:
    f = get_fault(name)
    found = _findings(bed.with_faults([name]))
    hits = [x for x in found if x.id in f.expected_ids]
    assert hits, (name, [(x.id, x.stage) for x in found])
    assert any(x.stage == f.expected_stage for x in hits), (name, [(x.id, x.stage) for x in hits])


def test_drums_shifted_onto_other_kit_pieces_need_the_source_beside_the_augmented_notes(bed) -> None:
    from signalchain.checks.symbolic_drums import _kit_rule

    p = bed.with_faults(["whole_tone_shift_includes_drums"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with record(values=True) as trace:
            p.step(p.build_model(0), p.golden_batch(0), tap)
    assert _kit_rule(trace, ("notes.augmented",)) == []  # still on the core kit: membership cannot tell
    hits = [f for f in _findings(p) if f.id == "symbolic.drums_transposed"]
    assert [(f.stage, f.evidence["evidence_kind"]) for f in hits] == [("notes.augmented", "source_vs_augmented")]
    assert all(abs(s) == 2 for v in hits[0].evidence["shifts"].values() for s in v)
