"""Zoo members on the symbolic bed (`signalchain.reference.symbolic`): REMI and TSD tokenizers,
recipes, batch sizes from 1 to 16, bf16, caption dropout, and a pretrained start."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from signalchain import StepOutput
from signalchain.reference.symbolic import SymbolicBedConfig, SymbolicBedPipeline
from signalchain.reference.symbolic.pipeline import SymBatch

from ._lora import add_lora, freeze
from ._member import member
from ._recipe import Recipe, RecipeMixin, no_tap
from .pretrained import PretrainSpec, pretrained_state

__all__ = ["SymMember", "SYM_PRETRAIN"]

SYM_PRETRAIN_STEPS = 400


def _bed() -> SymbolicBedPipeline:
    return SymbolicBedPipeline(SymbolicBedConfig())


SYM_PRETRAIN = PretrainSpec("symbolic", _bed, SymbolicBedConfig().to_dict(), SYM_PRETRAIN_STEPS)


def build_tsd(settings: Any) -> Any:
    """miditok's TSD (Time-Shift-Duration) with the bed's settings: no Bar or Position tokens, time
    moves by TimeShift tokens."""
    from miditok import TSD, TokenizerConfig

    beat_res = {tuple(int(x) for x in k.split("_")): v for k, v in settings.beat_res.items()}
    config = TokenizerConfig(beat_res=beat_res, num_velocities=settings.num_velocities,
                             use_tempos=settings.use_tempos, num_tempos=settings.num_tempos,
                             tempo_range=tuple(settings.tempo_range), use_time_signatures=settings.use_time_signatures,
                             time_signature_range={int(k): list(v) for k, v in settings.time_signatures.items()},
                             use_programs=settings.use_programs, one_token_stream_for_programs=True,
                             special_tokens=list(settings.special_tokens))
    return TSD(config)


class SymMember(RecipeMixin, SymbolicBedPipeline):
    """The symbolic bed with a recipe, a tokenizer (REMI or TSD), bf16 autocast, an optional
    pretrained start, LoRA on the decoder's feed-forward layers or a frozen caption encoder."""

    def __init__(self, name: str, cfg: SymbolicBedConfig, recipe: Recipe, *, vocabulary: str = "remi",
                 pretrained: bool = False, lora: bool = False, freeze_text: bool = False):
        self.tokenizer_kind = vocabulary
        super().__init__(cfg)
        self.name = name
        self.recipe = recipe
        self.pretrained, self.lora, self.freeze_text = pretrained, lora, freeze_text

    def build_tokenizer(self) -> Any:
        return build_tsd(self.cfg.tokenizer) if self.tokenizer_kind == "tsd" else super().build_tokenizer()

    def build_model(self, seed: int) -> Any:
        model = super().build_model(seed)
        if self.pretrained:
            state, _ = pretrained_state(SYM_PRETRAIN)
            model.load_state_dict(state)
        if self.lora:
            freeze(model)
            add_lora(model, r"decoder\.layers\.\d+\.(linear1|linear2)")
        if self.freeze_text:  # the caption encoder as a frozen pretrained text encoder
            for m in (model.word_emb, model.word_pos, model.text_encoder):
                freeze(m)
        return model

    def micro_batches(self, batch: SymBatch, n: int) -> list[SymBatch]:
        size = -(-len(batch) // n)
        return [SymBatch(batch.pieces[i : i + size], batch.captions[i : i + size], batch.seed * 31 + i)
                for i in range(0, len(batch), size)]

    def step(self, model: Any, batch: SymBatch, tap: Any = no_tap) -> StepOutput:
        with self.zoo_autocast():
            return super().step(model, batch, tap)


def _sym(name: str, recipe: Recipe, **kw: Any) -> SymMember:
    cfg_kw = {k: kw.pop(k) for k in list(kw) if k in SymbolicBedConfig.__dataclass_fields__}
    return SymMember(name, replace(SymbolicBedConfig(), **cfg_kw), recipe, **kw)


SYM_ADAMW = Recipe("adamw", lr=1e-3, weight_decay=0.0, clip=1.0)


@member("sym", "symbolic", optimizer="adamw", lr=3e-3, tokenizer="remi", batch=8)
def sym() -> SymbolicBedPipeline:
    """The symbolic bed as shipped: REMI, AdamW 3e-3, clipping at 1, batch 8, 10 % caption dropout,
    pitched tracks transposed by up to 3 semitones (drums untouched). Its catalogue's clean control."""
    p = SymbolicBedPipeline(SymbolicBedConfig())
    p.name = "sym"
    return p


@member("sym-tsd", "symbolic", optimizer="adamw", lr=1e-3, tokenizer="tsd")
def sym_tsd() -> SymMember:
    """The bed with miditok's TSD instead of REMI (TimeShift tokens, no Bar, no Position), AdamW 1e-3."""
    return _sym("sym-tsd", SYM_ADAMW, vocabulary="tsd")


@member("sym-adam-1e4", "symbolic", optimizer="adam", lr=1e-4)
def sym_adam() -> SymMember:
    """Plain Adam at 1e-4, constant: a slow but ordinary rate for a small transformer."""
    return _sym("sym-adam-1e4", Recipe("adam", lr=1e-4, clip=1.0))


@member("sym-sgd", "symbolic", optimizer="sgd", lr=0.1, momentum=0.9)
def sym_sgd() -> SymMember:
    """SGD with momentum 0.9 at 0.1, clipping at 1."""
    return _sym("sym-sgd", Recipe("sgd", lr=0.1, momentum=0.9, clip=1.0))


@member("sym-adafactor-relative", "symbolic", optimizer="adafactor-relative", lr=None)
def sym_adafactor_relative() -> SymMember:
    """transformers' Adafactor with its own relative step (lr=None, scale_parameter, relative_step;
    the combination transformers documents): the rate comes from the step count and each tensor's
    RMS, so no configured rate exists to judge."""
    return _sym("sym-adafactor-relative", Recipe("adafactor-relative", lr=None, clip=1.0))


@member("sym-warmup-cosine", "symbolic", optimizer="adamw", lr=5e-4, schedule="warmup-cosine", warmup=200)
def sym_warmup_cosine() -> SymMember:
    """AdamW 5e-4 with a 200-step linear warm-up then cosine over 10 000 steps, weight decay 0.01."""
    return _sym("sym-warmup-cosine", Recipe("adamw", lr=5e-4, weight_decay=0.01, schedule="warmup-cosine",
                                            warmup=200, total=10_000, clip=1.0), weight_decay=0.01)


@member("sym-linear-wd01", "symbolic", optimizer="adamw", lr=3e-3, schedule="linear", weight_decay=0.1)
def sym_linear() -> SymMember:
    """AdamW 3e-3 (the top of the recipe range) decaying linearly to 0 over 3000 steps, weight decay 0.1."""
    return _sym("sym-linear-wd01", Recipe("adamw", lr=3e-3, weight_decay=0.1, schedule="linear", total=3000,
                                          clip=1.0))


@member("sym-bf16", "symbolic", optimizer="adamw", lr=1e-3, amp="bf16")
def sym_bf16() -> SymMember:
    """The forward under bf16 autocast on the CPU (no scaler), AdamW 1e-3."""
    return _sym("sym-bf16", replace(SYM_ADAMW, amp="bf16"))


@member("sym-accum8-b16", "symbolic", optimizer="adamw", lr=1e-3, accum=8, batch=16)
def sym_accum() -> SymMember:
    """Batch 16 taken as 8 micro-batches of 2 (gradient accumulation), AdamW 1e-3."""
    return _sym("sym-accum8-b16", replace(SYM_ADAMW, accum=8), batch_size=16)


@member("sym-batch1", "symbolic", optimizer="adamw", lr=3e-4, batch=1)
def sym_batch1() -> SymMember:
    """Batch 1 (one piece per update, as long-context runs on small GPUs do), AdamW 3e-4."""
    return _sym("sym-batch1", replace(SYM_ADAMW, lr=3e-4), batch_size=1)


@member("sym-drop05", "symbolic", optimizer="adamw", lr=1e-3, cond_dropout=0.5)
def sym_drop05() -> SymMember:
    """Half the captions dropped (classifier-free guidance at its widest), AdamW 1e-3."""
    return _sym("sym-drop05", SYM_ADAMW, cond_dropout=0.5)


@member("sym-noclip-notranspose", "symbolic", optimizer="adamw", lr=1e-3, clip=None, augment=0)
def sym_noclip() -> SymMember:
    """No gradient clipping and no transposition augmentation, AdamW 1e-3."""
    return _sym("sym-noclip-notranspose", replace(SYM_ADAMW, clip=None), augment_transpose=0)


@member("sym-ft-1e4", "symbolic", pretrained="symbolic", optimizer="adamw", lr=1e-4)
def sym_ft() -> SymMember:
    """The pretrained bed fine-tuned at AdamW 1e-4, constant."""
    return _sym("sym-ft-1e4", replace(SYM_ADAMW, lr=1e-4), pretrained=True)


@member("sym-ft-lora", "symbolic", pretrained="symbolic", optimizer="adamw", lr=1e-3, lora=True)
def sym_ft_lora() -> SymMember:
    """The pretrained bed, LoRA (peft, r 8) on the decoder's feed-forward layers, everything else
    frozen, AdamW 1e-3."""
    return _sym("sym-ft-lora", replace(SYM_ADAMW, lr=1e-3), pretrained=True, lora=True)


@member("sym-ft-frozen-text", "symbolic", pretrained="symbolic", optimizer="adamw", lr=3e-4, freeze_text=True)
def sym_ft_frozen_text() -> SymMember:
    """The pretrained bed fine-tuned at 3e-4 with its trained caption encoder frozen."""
    return _sym("sym-ft-frozen-text", replace(SYM_ADAMW, lr=3e-4), pretrained=True, freeze_text=True)
