"""What build_model loads (issue 41, declared vs done): a strict=False load that matches no key is a
model left at its random init, named with the prefix that separates the two key sets. Proven on the
real-bug bed's Lightning checkpoint and here on a tiny HF MusicGen loaded from a DDP-wrapped save."""

import pytest
import torch

from signalchain.checks.optimisation.state_loads import judge_state_loads, prefix_of
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.optimisation.state_loads import measure_state_loads
from signalchain.pipeline import ProtocolView
from signalchain.probes.state_loads import StateLoads


def test_prefix_of_finds_the_wrapper_prefix_both_ways():
    own = ["enc.w", "enc.b", "head.w"]
    assert prefix_of(own, [f"model.{k}" for k in own]) == ("model.", "strip", 3)
    assert prefix_of([f"module.{k}" for k in own], own) == ("module.", "add", 3)
    assert prefix_of(own, ["x.y", "z"])[2] == 0


def test_the_probe_records_each_outer_load_and_puts_the_method_back():
    original = torch.nn.Module.load_state_dict
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    state = {f"model.{k}": v for k, v in net.state_dict().items()}
    with StateLoads().attached_to() as probe:
        net.load_state_dict(state, strict=False)
        net.load_state_dict(net.state_dict())
    assert torch.nn.Module.load_state_dict is original
    got = [(c["strict"], len(c["unexpected"]), len(c["missing"])) for c in probe.calls]
    assert got == [(False, 4, 4), (True, 0, 0)]


@pytest.fixture(scope="module")
def hf_parts():
    pytest.importorskip("transformers")
    from signalchain.reference.hf.tiny import tiny_model

    return tiny_model


@pytest.mark.parametrize("fixed", [False, True])
def test_a_ddp_saved_hf_musicgen_loaded_with_strict_false_is_not_pretrained(hf_parts, fixed):
    tiny_model = hf_parts
    # what torch.save(ddp.state_dict()) wrote: every key behind DDP's "module."
    saved = {f"module.{k}": v.clone() for k, v in tiny_model(seed=1).state_dict().items()}

    class DDPFineTune:
        def build_model(self, seed):
            model = tiny_model(seed=seed)
            state = {k.removeprefix("module."): v for k, v in saved.items()} if fixed else saved
            model.load_state_dict(state, strict=fixed)
            return model

    m = measure_state_loads(Context(ProtocolView(DDPFineTune()), seed=0, budget=BUDGETS["economy"]))
    found = judge_state_loads(m)
    if fixed:
        assert found == []
    else:
        assert [(f.id, f.severity.value) for f in found] == [("model.not_pretrained", "error")]
        assert found[0].evidence["prefix"] == "module." and found[0].evidence["loaded"] == 0


def test_a_partial_load_on_purpose_is_silent():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    part = {k: v for k, v in net.state_dict().items() if k.startswith("0.")}  # the first layer only

    class Partial:
        def build_model(self, seed):
            fresh = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
            fresh.load_state_dict(part, strict=False)
            return fresh

    assert judge_state_loads(measure_state_loads(Context(ProtocolView(Partial()), seed=0,
                                                         budget=BUDGETS["economy"]))) == []


@pytest.mark.parametrize("fixed", [False, True])
def test_a_gpt2_midi_lm_built_from_its_checkpoints_config_is_not_pretrained(tmp_path, fixed):
    """The symbolic convention (a GPT-2 over MIDI tokens): AutoConfig.from_pretrained + from_config
    (transformers#4685) against from_pretrained, from a local save_pretrained folder."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path, safe_serialization=True)

    class MidiLM:
        def build_model(self, seed):
            torch.manual_seed(seed + 1)
            if fixed:
                return transformers.GPT2LMHeadModel.from_pretrained(tmp_path)
            return transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(tmp_path))

    m = measure_state_loads(Context(ProtocolView(MidiLM()), seed=0, budget=BUDGETS["economy"]))
    assert m is not None and m.named_checkpoint["path"] == str(tmp_path)
    found = [(f.id, f.severity.value) for f in judge_state_loads(m)]
    assert found == ([] if fixed else [("model.not_pretrained", "warning")])
