"""Malformed token sequences: what the code around the tokenizer does to its ids (bars filtered out,
positions shifted past the bar, EOS written after the padding, BOS cut by a truncation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .. import tokenizer as tk
from ._registry import fault

if TYPE_CHECKING:
    from ..data import Piece
    from ..pipeline import SymbolicBedPipeline

FAMILY = "symbolic"
SECTION = "Inspect data before tuning the optimiser"


def _ids_of(p: SymbolicBedPipeline, prefix: str) -> dict[int, str]:
    return {i: t for t, i in p.tokenizer.vocab.items() if t.startswith(prefix)}


@fault("bar_tokens_stripped", FAMILY, "a bar token that never appears", SECTION,
       ["symbolic.structure"], "tokens", symptom="repetitive")
def _bar_tokens_stripped(p: SymbolicBedPipeline) -> None:
    encode = p.encode

    def stripped(window: Piece) -> list[int]:
        # Bug: "Bar tokens carry no information, the Position tokens already say where a note is":
        # a filter written to save sequence length removes them. REMI's positions restart at every
        # bar, so without the Bar tokens the model cannot tell bar 2 from bar 1.
        bars = set(_ids_of(p, "Bar_"))
        return [i for i in encode(window) if i not in bars]

    p.encode = stripped  # type: ignore[method-assign]


@fault("time_shift_without_carry", FAMILY, "positions past the bar", SECTION,
       ["symbolic.structure", "symbolic.round_trip"], "tokens")
def _time_shift_without_carry(p: SymbolicBedPipeline) -> None:
    encode = p.encode
    res = p.cfg.tokenizer.resolution

    def shifted(window: Piece) -> list[int]:
        # Bug: a token-level "time shift" augmentation moves every note one beat later by adding
        # `resolution` to each Position value, and does not carry positions that overflow into the
        # next bar: notes of the last beat land at Position_16..19 of a 16-position 4/4 bar.
        positions = {t: i for i, t in _ids_of(p, "Position_").items()}
        out = []
        for i in encode(window):
            token = p.tokenizer[i]
            if token.startswith("Position_"):
                moved = f"Position_{int(token.split('_')[1]) + res}"
                i = positions.get(moved, i)
            out.append(i)
        return out

    p.encode = shifted  # type: ignore[method-assign]


@fault("eos_after_padding", FAMILY, "eos ids where pad ids belong", SECTION,
       ["symbolic.structure", "mask.padding_trained"], "tokens", symptom="silent")
def _eos_after_padding(p: SymbolicBedPipeline) -> None:
    def collate(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        # Bug: the collate function pads the bodies first and then adds the specials around the
        # padded block (`cat([bos, pad_sequence(bodies), eos])`), so every sequence shorter than
        # the longest has its EOS after the padding; the mask is `ids != pad`.
        pad, bos, eos = tk.special_ids(p.tokenizer)
        bodies = [torch.tensor([i for i in s if i not in (bos, eos)], dtype=torch.long) for s in seqs]
        padded = torch.nn.utils.rnn.pad_sequence(bodies, batch_first=True, padding_value=pad)
        column = torch.ones(len(seqs), 1, dtype=torch.long)
        ids = torch.cat([bos * column, padded, eos * column], dim=1)
        return ids, ids != pad

    p.collate = collate  # type: ignore[method-assign]


@fault("bos_cut_by_left_truncation", FAMILY, "bos ids where they do not belong", SECTION,
       ["symbolic.structure", "symbolic.round_trip"], "tokens")
def _bos_cut_by_left_truncation(p: SymbolicBedPipeline) -> None:
    encode = p.encode
    max_tokens = 48

    def truncated(window: Piece) -> list[int]:
        # Bug: sequences are cut to a `max_seq_len` of 48 tokens with `truncation_side="left"`
        # (the setting of a chat-model recipe: keep the most recent context). A bar longer than 48
        # tokens loses its BOS, its Bar and its first notes.
        return encode(window)[-max_tokens:]

    p.encode = truncated  # type: ignore[method-assign]
