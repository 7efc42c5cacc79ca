"""A MusicGen "fine-tune" built with `from_config`: the architecture of the checkpoint, none of its weights.

huggingface/transformers#4685: the reporter built the model with `AutoModel.from_config(AutoConfig.
from_pretrained(name))` and found its parameters random; the maintainers' answer (and the docs fix):
`from_config` only builds the architecture, `from_pretrained` loads the weights. Reproduced with the
HF MusicGen bed (a real tiny `MusicgenForConditionalGeneration`): a pretrained checkpoint is saved
with `save_pretrained`, and the user's factory builds the model from its config instead of loading it.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from real_bugs.bed import RealBug
from signalchain.reference.hf import HFBedPipeline
from signalchain.reference.hf.tiny import tiny_model
from signalchain.reference.zoo.hf import HF_PRETRAIN
from signalchain.reference.zoo.pretrained import pretrained_state

BUG = RealBug(
    name="declared_from_config_not_pretrained", thread="https://github.com/huggingface/transformers/issues/4685",
    library="transformers", idiom="MusicgenForConditionalGeneration fine-tune, from_config vs from_pretrained",
    cls="declared-vs-done",
    cause="the model is built with from_config(AutoConfig.from_pretrained(ckpt)): random weights (LM, T5 and "
          "codec) where a fine-tune of the checkpoint was meant",
    fix="MusicgenForConditionalGeneration.from_pretrained(ckpt)",
    stages=("loss", "tokens"), cause_ids=("model.not_pretrained", "loss.initial"), symptom="flat-loss")


def checkpoint_dir(pipe: HFBedPipeline) -> Path:
    """The pretrained tiny MusicGen, saved once with save_pretrained (what a Hub folder holds)."""
    path = Path(tempfile.gettempdir()) / f"sc-declared-musicgen-{HF_PRETRAIN.key}"
    if not (path / "config.json").exists():
        model = tiny_model(0, pipe.cfg.tiny, len(pipe.tokenizer))
        state, _ = pretrained_state(HF_PRETRAIN)
        model.load_state_dict(state)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
        model.save_pretrained(tmp, safe_serialization=True)
        try:
            os.replace(tmp, path)
        except OSError:  # another process saved it first
            pass
    return path


class FromCheckpoint(HFBedPipeline):
    def __init__(self, fixed: bool):
        self.fixed = fixed  # read by _factory, which the base constructor already calls
        super().__init__()
        self.name = "musicgen-finetune"

    def _factory(self, seed: int) -> Any:
        from transformers import AutoConfig, MusicgenForConditionalGeneration

        ckpt = checkpoint_dir(self)
        if self.fixed:
            model = MusicgenForConditionalGeneration.from_pretrained(ckpt)
        else:
            torch.manual_seed(seed)
            model = MusicgenForConditionalGeneration._from_config(AutoConfig.from_pretrained(ckpt))
        model.generation_config = tiny_model(0, self.cfg.tiny, len(self.tokenizer)).generation_config
        return model


def pipeline(fixed: bool) -> FromCheckpoint:
    return FromCheckpoint(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """Do the built decoder's weights differ from the checkpoint's, and where does the first loss start?"""
    p = pipeline(fixed)
    model = p.build_model(0)
    state, _ = pretrained_state(HF_PRETRAIN)
    dec = {k: v for k, v in model.state_dict().items() if k.startswith("decoder.")}
    equal = sum(torch.equal(v, state[k]) for k, v in dec.items() if v.dtype.is_floating_point)
    n = sum(v.dtype.is_floating_point for v in dec.values())
    model.eval()
    with torch.no_grad():
        loss = float(p.step(model, p.golden_batch(0)).loss)
    ln_v = math.log(p.cfg.tiny.codebook_size)
    return equal < n // 2, f"{equal}/{n} decoder tensors equal to the checkpoint; first loss {loss:.3f} (ln V = {ln_v:.3f})"
