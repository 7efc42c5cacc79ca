"""A BPE-trained MidiTok tokenizer whose ids are read back through the base vocabulary.

Natooz/MidiTok#228: after `tokenizer.train(vocab_size=...)` the reporter builds a `TokSequence`
from the encoded ids and decodes it, and gets `KeyError: 12511`; `print(tokenizer.vocab)` shows the
same vocabulary as before training. The maintainer explains that `vocab` holds the *base*
vocabulary (the "alphabet") while `vocab_model` holds the trained one: ids above the base size are
BPE merges and must be decoded by the tokenizer itself (`tokenizer.decode(ids)`), not looked up in
`tokenizer.vocab`. Reproduced on the symbolic bed (miditok REMI, BPE trained on its own training
pieces, 100 merges): the user's decode maps each id through the inverted base vocabulary and skips
the ids it does not know (the KeyError "fixed" by a `.get`), so every merged token - most notes -
is lost on the way back. The fix: `tokenizer.decode(ids)`.

Both variants tap the tokens with one vocabulary string per *model* id (a merge is the base tokens
it stands for, space-joined): the README's `vocab=[tokenizer[i] for i in range(len(tokenizer))]`
raises KeyError for a BPE tokenizer (the same confusion as the thread), so a BPE user cannot follow it.

Class "false-error": the twin (BPE done right, one string per model id) gets `symbolic.structure`
(error) because a merged id's string is read as one token ("Pitch not followed by its attributes").
What the bug's message should say: `symbolic.round_trip` should add that the ids the round trip loses are
exactly the ids at or above the base vocabulary's size (`len(tokenizer.vocab)`), i.e. the BPE
merges: "decode with `tokenizer.decode(ids)`, which undoes the merges; `tokenizer.vocab` is the
base vocabulary".
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from real_bugs.bed import RealBug
from signalchain.reference.symbolic import SymbolicBedPipeline
from signalchain.symbolic import NOTE_COLUMNS, from_score, notes_table, to_score

BUG = RealBug(
    name="msg_bpe_decoded_base_vocab", thread="https://github.com/Natooz/MidiTok/issues/228",
    library="miditok", idiom="miditok REMI + BPE (tokenizer.train), own decode of model ids",
    cls="false-error",
    cause="BPE ids are decoded through the base vocabulary (tokenizer.vocab): every merged id is unknown there "
          "and dropped",
    fix="decode with tokenizer.decode(ids) (BPE-aware); tokenizer.vocab is the base vocabulary",
    stages=("notes.decoded", "tokens"), cause_ids=("symbolic.round_trip", "symbolic.bpe_base_vocab"),
    symptom="silent", families=("data",))

MERGES = 100
_TRAINED: dict[str, Any] = {}


class BPEBed(SymbolicBedPipeline):
    def __init__(self, fixed: bool):
        self.fixed = fixed
        super().__init__()

    def build_tokenizer(self) -> Any:
        if "tok" not in _TRAINED:
            tok = super().build_tokenizer()
            with tempfile.TemporaryDirectory() as d:
                files = []
                for i, piece in enumerate(self.split_pieces("train")):
                    f = Path(d) / f"{i}.mid"
                    to_score(piece.notes, piece.tempo, piece.time_signature).dump_midi(f)
                    files.append(f)
                tok.train(vocab_size=len(tok) + MERGES, model="BPE", files_paths=files)
            _TRAINED["tok"] = tok
        return _TRAINED["tok"]

    def model_vocab(self) -> list[str]:
        """One string per model id: the base tokens a (merged) id stands for."""
        tok = self.tokenizer
        out = [""] * len(tok)
        for byte, i in tok.vocab_model.items():
            out[i] = " ".join(tok._vocab_learned_bytes_to_tokens[byte])
        return out

    def decode_ids(self, ids) -> np.ndarray:
        if self.fixed:
            return super().decode_ids(ids)
        return _decode_through_base(self.tokenizer, ids)[0]

    def _decoded(self, ids):
        if self.fixed:
            return super()._decoded(ids)
        return _decode_through_base(self.tokenizer, ids)

    def step(self, model, batch, tap=None):
        vocab = self.model_vocab()

        def tap_model_vocab(stage, value, /, **meta):
            if stage in ("tokens", "generation.tokens") and "vocab" in meta:
                meta = {**meta, "vocab": vocab, "token_types": sorted({t.split("_")[0] for t in vocab if t})}
            return tap(stage, value, **meta) if tap is not None else value
        return super().step(model, batch, tap_model_vocab)


def _decode_through_base(tok: Any, ids) -> tuple[np.ndarray, float | None, list[int] | None]:
    """The user's decode: ids -> base-vocabulary tokens (unknown ids skipped) -> score."""
    from miditok import TokSequence

    base_inv = {i: t for t, i in tok.vocab.items()}
    specials = {tok.vocab[s] for s in ("PAD_None", "BOS_None", "EOS_None")}
    tokens = [base_inv[i] for i in map(int, ids) if i in base_inv and i not in specials]
    empty = (np.zeros((0, len(NOTE_COLUMNS)), np.float32), None, None)
    if not tokens:
        return empty
    try:
        score = tok._tokens_to_score(TokSequence(tokens=tokens))
    except Exception:
        return empty
    table = from_score(score, 0)
    tempo = round(float(score.tempos[0].qpm), 2) if len(score.tempos) else None
    ts = [int(score.time_signatures[0].numerator), int(score.time_signatures[0].denominator)] \
        if len(score.time_signatures) else None
    return notes_table(table), tempo, ts


def pipeline(fixed: bool) -> BPEBed:
    return BPEBed(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    rng = np.random.default_rng(0)
    kept = total = merged = 0
    for piece in batch.pieces:
        window = p.crop(piece, rng)
        ids = p.encode(window)
        merged += sum(i >= len(p.tokenizer.vocab) for i in ids)
        total += len(window.notes)
        kept += len(p.decode_ids(ids))
    return kept < 0.5 * total, f"{kept} of {total} notes decode back ({merged} merged ids >= base size {len(p.tokenizer.vocab)})"
