"""What an augmentation does to the drum track: a transposition whose interval keeps the drums on the
kit, so that only the notes before and after the augmentation show it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from signalchain.symbolic import COL

from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import SymbolicBedPipeline

SECTION = "Inspect data before tuning the optimiser"


@fault("whole_tone_shift_includes_drums", "symbolic", "pitch shift augmentation applied to drums (onto other kit "
       "pieces)", SECTION, ["symbolic.drums_transposed"], "notes.augmented")
def _whole_tone_shift_includes_drums(p: SymbolicBedPipeline) -> None:
    def augment(notes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # Bug: "every epoch must hear a new key" became a shift of a whole tone up or down, never 0, added
        # to the pitch column of every track, the drum track included. A kick (36) becomes an acoustic
        # snare (38), the snare an electric snare (40), the closed hi-hat a pedal hi-hat (44): still the
        # core kit, so the drums sound like drums, playing another part.
        shift = int(rng.choice([-2, 2]))
        out = notes.copy()
        out[:, COL["pitch"]] = np.clip(out[:, COL["pitch"]] + shift, 0, 127)
        return out

    p.augment = augment  # type: ignore[method-assign]
