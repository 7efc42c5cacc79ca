"""The vocabulary a symbolic `tokens` tap needs, from a miditok tokenizer: one string per *model* id.

`[tokenizer[i] for i in range(len(tokenizer))]` holds for an untrained tokenizer only: once BPE (or
Unigram/WordPiece) is trained, `len(tokenizer)` counts the model's ids while `tokenizer[i]` looks
ids up in the base vocabulary (`tokenizer.vocab`), which raises KeyError past its size (MidiTok#137,
#228). A merged id stands for several base tokens: its string is them, space-joined, and the checks
read it as that sequence.
"""

from __future__ import annotations

from typing import Any

__all__ = ["model_vocab"]


def model_vocab(tokenizer: Any) -> list[str]:
    """One string per model id of a miditok tokenizer (a merge: its base tokens, space-joined)."""
    if not getattr(tokenizer, "is_trained", False):
        base = tokenizer.vocab
        if isinstance(base, dict):
            out = [""] * (max(base.values()) + 1 if base else 0)
            for tok, i in base.items():
                out[i] = str(tok)
            return out
        raise TypeError("a tokenizer with one vocabulary per stream (Octuple, MMM…): tap each stream's own vocab")
    learned = getattr(tokenizer, "_vocab_learned_bytes_to_tokens", None)
    model = getattr(tokenizer, "vocab_model", None)
    if not isinstance(model, dict) or not isinstance(learned, dict):
        raise TypeError(f"{type(tokenizer).__name__} is trained but holds no vocab_model/learned-bytes table: "
                        "build the vocabulary from its model (one string per model id)")
    out = [""] * (max(model.values()) + 1 if model else 0)
    for byte, i in model.items():
        out[i] = " ".join(map(str, learned.get(byte, [byte])))
    return out
