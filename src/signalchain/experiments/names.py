"""The names the command line offers before anything runs (budget presets, symptoms), without torch:
`signalchain doctor --help` lists them, and `context.py` / `doctor.py` build on them."""

from __future__ import annotations

__all__ = ["PRESETS", "SYMPTOMS"]

#: How many steps the experiments may take, cheapest first.
PRESETS = ("economy", "business", "full")

#: What a user reports → the families worth running (docs/families.md). Families not built yet are
#: named anyway; the doctor says which of them it could not run.
SYMPTOMS: dict[str, tuple[str, ...]] = {
    "flat-loss": ("data", "optimisation", "precision"),  # a scaler skipping every step is a flat loss
    # padding trained as targets (zero-padded short clips, no mask) makes the loss jump (issue 41)
    "unstable": ("optimisation", "numerics", "precision", "data"),
    "nan": ("numerics", "precision", "audio", "data"),  # an empty loss mask makes a mean of nothing
    "silent": ("audio", "data", "output"),
    "repetitive": ("generation", "data"),
    "ignores-caption": ("conditioning", "data", "optimisation"),  # gradients must reach the condition path
    # targets visible in the model's inputs look too good too; training left in eval mode (no dropout in
    # training, the train/validation gap closes) is the optimisation family's (issue 41)
    "too-good-validation": ("splits", "data", "optimisation"),
    "slow": ("performance", "profile", "compile"),
}
