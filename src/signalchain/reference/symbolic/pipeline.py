"""The symbolic bed: a tiny caption-conditioned REMI transformer on music21 pieces, trained on CPU.

    pieces (notes in beats, tempo, meter, programs) + captions
      -> crop a window of `window_bars` bars at a bar line      (midi.source)
      -> transpose pitched tracks, drums untouched              (notes.augmented)
      -> symusic Score -> miditok REMI -> BOS + ids + EOS, PAD  (tokens; notes.decoded: decoded back)
      -> caption dropout -> word ids -> encoder -> memory       (caption, condition.*)
      -> causal transformer with cross-attention -> logits [B, T, V]
      -> next-token cross-entropy, ignore -100 on PAD           (targets, mask.loss, logits, loss)

It uses signalchain only through its public API, as a user's codebase would. Each piece of the
data path is an instance attribute or method (`tokenizer`, `pieces`, `crop`, `augment`, `encode`,
`decode_ids`, `collate`, `captions_for`, `lr`, `cond_dropout`, `sampling`), so that a fault can
replace one the way the real bug would change it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from signalchain import StepOutput
from signalchain.symbolic import COL, NOTE_COLUMNS, notes_table

from . import tokenizer as tk
from .data import PIECE_IDS, Piece, load_pieces, split_of
from .generate import Sampling, generate_ids
from .model import IGNORE, SymbolicLM, SymConfig, WordVocab, next_token_loss

__all__ = ["SymbolicBedConfig", "SymbolicBedPipeline", "SymBatch"]


def _no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


@dataclass
class SymbolicBedConfig:
    tokenizer: tk.TokenizerSettings = field(default_factory=tk.TokenizerSettings)
    n_pieces: int = len(PIECE_IDS)
    valid_share: float = 0.15
    window_bars: int = 1
    batch_size: int = 8
    max_len: int = 256
    augment_transpose: int = 3  # max semitones, pitched tracks only
    crop_seed: int = 0
    # model
    dim: int = 64
    heads: int = 4
    layers: int = 2
    word_max_len: int = 20
    # optimisation
    lr: float = 3e-3
    weight_decay: float = 0.0
    clip_grad: float = 1.0
    cond_dropout: float = 0.1
    sampling: dict[str, Any] = field(default_factory=lambda: {
        "greedy": False, "temperature": 1.0, "top_k": 0, "top_p": 0.0, "cfg_coef": 3.0, "max_frames": 128})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SymBatch:
    """Pieces (whole), their captions, and the seed of this batch's crops, transpositions and dropout."""

    pieces: list[Piece]
    captions: list[str]
    seed: int

    def __len__(self) -> int:
        return len(self.pieces)


class SymbolicBedPipeline:
    """Implements the `Pipeline` protocol (`signalchain.pipeline`) with the symbolic capabilities."""

    name = "symbolic-bed"

    def __init__(self, config: SymbolicBedConfig | None = None, faults: Sequence[str] = ()):
        self.cfg = copy.deepcopy(config) if config is not None else SymbolicBedConfig()
        self.faults: tuple[str, ...] = tuple(faults)
        self.tokenizer = self.build_tokenizer()
        self.lr = self.cfg.lr
        self.cond_dropout = self.cfg.cond_dropout
        self.sampling = dict(self.cfg.sampling)
        self._decode_cache: dict[tuple[int, ...], Any] = {}
        self._encode_cache: dict[tuple[Any, ...], list[int]] = {}
        self._encode_cache_for: Any = None  # the tokenizer _encode_cache was filled with
        self.words = WordVocab([p.caption for p in self.pieces()], self.cfg.word_max_len)
        if self.faults:
            from .faults import apply_faults

            apply_faults(self, self.faults)

    # ---- identity -------------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        return {**self.cfg.to_dict(), "faults": list(self.faults)}

    def with_faults(self, names: Sequence[str]) -> SymbolicBedPipeline:
        return SymbolicBedPipeline(self.cfg, tuple(self.faults) + tuple(names))

    def fault_catalogue(self) -> list[dict[str, Any]]:
        from .faults import catalogue

        return [f.to_dict() for f in catalogue()]

    # ---- data -----------------------------------------------------------------------------------

    def build_tokenizer(self) -> Any:
        return tk.build_remi(self.cfg.tokenizer)

    def pieces(self) -> list[Piece]:
        return load_pieces(PIECE_IDS[: self.cfg.n_pieces])

    def split_pieces(self, split: str) -> list[Piece]:
        if split == "validation":
            split = "valid"
        if split not in ("train", "valid"):
            raise ValueError(f"unknown split {split!r}; the symbolic bed has 'train' and 'valid'")
        pieces = self.pieces()
        which = split_of([p.id for p in pieces], self.cfg.valid_share)
        return [p for p in pieces if which[p.id] == split]

    def splits(self) -> dict[str, list[Piece]]:
        return {s: self.split_pieces(s) for s in ("train", "valid")}

    def training_examples(self) -> list[Piece]:
        return self.split_pieces("train")

    def captions_for(self, pieces: Sequence[Piece]) -> list[str]:
        return [p.caption for p in pieces]

    def make_batch(self, pieces: Sequence[Piece], seed: int) -> SymBatch:
        return SymBatch(list(pieces), self.captions_for(pieces), seed)

    def golden_batch(self, seed: int) -> SymBatch:
        """`batch_size` training pieces chosen by `seed` (the same every call), crops seeded by it."""
        train = self.split_pieces("train")
        order = np.random.default_rng([self.cfg.crop_seed, seed]).permutation(len(train))
        return self.make_batch([train[i] for i in order[: self.cfg.batch_size]], seed)

    def loader(self, split: str = "train", seed: int = 0) -> Iterator[SymBatch]:
        """Shuffled batches of a split, forever."""
        pieces = self.split_pieces(split)
        rng = np.random.default_rng(seed)
        size = min(self.cfg.batch_size, len(pieces))
        while True:
            order = rng.permutation(len(pieces))
            for start in range(0, len(order) - size + 1, size):
                yield self.make_batch([pieces[i] for i in order[start : start + size]], int(rng.integers(2**31)))

    def with_captions(self, batch: SymBatch, captions: Sequence[str]) -> SymBatch:
        if len(captions) != len(batch):
            raise ValueError(f"{len(captions)} captions for a batch of {len(batch)}")
        return replace(batch, captions=list(captions))

    # ---- the data path (each piece replaceable) ---------------------------------------------------

    def crop(self, piece: Piece, rng: np.random.Generator) -> Piece:
        """A window of `window_bars` bars starting at a bar line, notes shifted to start at 0 and cut at its end."""
        bar = piece.time_signature[0] * 4.0 / piece.time_signature[1]
        length = self.cfg.window_bars * bar
        end = float((piece.notes[:, COL["onset"]] + piece.notes[:, COL["duration"]]).max())
        starts = [float(s) for s in piece.bar_starts if s + length <= end + 1e-6] or [float(piece.bar_starts[0])]
        start = starts[int(rng.integers(len(starts)))]
        n = piece.notes
        on = n[:, COL["onset"]]
        sel = n[(on >= start - 1e-6) & (on < start + length - 1e-6)].copy()
        sel[:, COL["onset"]] -= start
        sel[:, COL["duration"]] = np.minimum(sel[:, COL["duration"]], length - sel[:, COL["onset"]])
        return replace(piece, notes=notes_table(sel), bar_starts=np.arange(0, length, bar, dtype=np.float32))

    def augment(self, notes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Transpose the pitched notes by up to ±augment_transpose semitones; drums keep their keys."""
        m = self.cfg.augment_transpose
        shift = int(rng.integers(-m, m + 1)) if m > 0 else 0
        out = notes.copy()
        pitched = out[:, COL["drum"]] == 0
        out[pitched, COL["pitch"]] = np.clip(out[pitched, COL["pitch"]] + shift, 0, 127)
        return out

    def encode(self, window: Piece) -> list[int]:
        """The window's ids, memoised by its notes, tempo and meter for this tokenizer: every step of
        a training on the same batch crops the same windows (the crop is seeded by the batch)."""
        if self._encode_cache_for is not self.tokenizer:  # another tokenizer: nothing cached applies
            self._encode_cache, self._encode_cache_for = {}, self.tokenizer
        notes = np.ascontiguousarray(window.notes)
        key = (notes.tobytes(), notes.shape, str(notes.dtype), float(window.tempo), tuple(window.time_signature))
        if key not in self._encode_cache:
            if len(self._encode_cache) >= 2048:
                self._encode_cache.pop(next(iter(self._encode_cache)))
            self._encode_cache[key] = tk.encode_notes(self.tokenizer, window.notes, window.tempo,
                                                      window.time_signature)
        return list(self._encode_cache[key])

    def decode_ids(self, ids: Sequence[int]) -> np.ndarray:
        return tk.decode_ids(self.tokenizer, ids)[0]

    def collate(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> ids [B, T] right-padded with PAD, and the padding mask [B, T] (True on real tokens)."""
        pad = self.tokenizer.vocab["PAD_None"]
        T = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), T), pad, dtype=torch.long)
        mask = torch.zeros(len(seqs), T, dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
            mask[i, : len(s)] = True
        return ids, mask

    def drop_conditions(self, captions: list[str], rng: np.random.Generator) -> tuple[list[str], torch.Tensor]:
        dropped = rng.random(len(captions)) < self.cond_dropout
        return ["" if d else c for c, d in zip(captions, dropped)], torch.from_numpy(dropped)

    # ---- model and optimiser -------------------------------------------------------------------

    def model_config(self) -> SymConfig:
        c = self.cfg
        return SymConfig(vocab_size=len(self.tokenizer), word_vocab_size=self.words.vocab_size, max_len=c.max_len,
                         word_max_len=c.word_max_len, dim=c.dim, heads=c.heads, layers=c.layers)

    def build_model(self, seed: int) -> SymbolicLM:
        torch.manual_seed(seed)
        return SymbolicLM(self.model_config())

    def build_optimizer(self, model: SymbolicLM) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=self.cfg.weight_decay)

    def condition_parameters(self, model: SymbolicLM) -> list[torch.nn.Parameter]:
        params = [*model.word_emb.parameters(), *model.word_pos.parameters(), *model.text_encoder.parameters(),
                  model.null_cond]
        for layer in model.decoder.layers:
            params += [*layer.multihead_attn.parameters(), *layer.norm2.parameters()]
        return params

    # ---- the training step ----------------------------------------------------------------------

    def _notes_meta(self, windows: Sequence[Piece]) -> dict[str, Any]:
        return {"columns": NOTE_COLUMNS, "unit": "beat", "tempos": [float(w.tempo) for w in windows],
                "time_signatures": [list(w.time_signature) for w in windows], "files": [w.id for w in windows]}

    @staticmethod
    def _stack(tables: Sequence[np.ndarray]) -> np.ndarray:
        rows = [np.concatenate([np.full((len(t), 1), i, np.float32), t[:, 1:]], axis=1) for i, t in enumerate(tables)]
        return notes_table(np.concatenate(rows)) if rows else notes_table([])

    def _decoded(self, ids: Sequence[int]) -> tuple[np.ndarray, float | None, list[int] | None]:
        """What the tokenizer makes of `ids` (notes, first tempo, first time signature), memoised."""
        key = tuple(ids)
        if key not in self._decode_cache:
            if len(self._decode_cache) >= 512:
                self._decode_cache.pop(next(iter(self._decode_cache)))
            _, tempo, ts = tk.decode_ids(self.tokenizer, ids)
            self._decode_cache[key] = (self.decode_ids(ids), tempo, ts)
        return self._decode_cache[key]

    def prepare(self, batch: SymBatch, tap: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Crop, augment, encode, collate; tap every notes stage and the tokens."""
        crop_rng = np.random.default_rng([self.cfg.crop_seed, batch.seed, 1])
        windows = [self.crop(p, crop_rng) for p in batch.pieces]
        tap("midi.source", self._stack([w.notes for w in windows]), **self._notes_meta(windows))
        if self.cfg.augment_transpose > 0:
            aug_rng = np.random.default_rng([self.cfg.crop_seed, batch.seed, 3])
            windows = [replace(w, notes=self.augment(w.notes, aug_rng)) for w in windows]
            tap("notes.augmented", self._stack([w.notes for w in windows]), **self._notes_meta(windows))
        seqs = [self.encode(w) for w in windows]
        ids, padding = self.collate(seqs)
        tap("tokens", ids, **tk.tokens_meta(self.tokenizer, self.cfg.tokenizer.resolution))
        decoded = [self._decoded(s) for s in seqs]
        tap("notes.decoded", self._stack([d[0] for d in decoded]), columns=NOTE_COLUMNS, unit="beat",
            tempos=[d[1] for d in decoded], time_signatures=[d[2] for d in decoded],
            files=[w.id for w in windows])
        tap("mask.padding", padding)
        return ids, padding

    def condition(self, model: SymbolicLM, captions: list[str], seed: int,
                  tap: Any) -> tuple[torch.Tensor, torch.Tensor]:
        tap("caption", list(captions))
        kept, dropped = self.drop_conditions(list(captions), np.random.default_rng([self.cfg.crop_seed, seed, 2]))
        tap("condition.dropped", dropped, rate=self.cond_dropout)
        word_ids, word_mask = self.words.encode(kept)
        tap("condition.tokens", word_ids, max_len=self.words.max_len, vocab_size=self.words.vocab_size)
        tap("condition.mask", word_mask)
        memory, memory_mask = model.encode_condition(word_ids, word_mask)
        tap("condition.embedding", memory)
        return memory, memory_mask

    def targets_from(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """targets[:, t] = ids[:, t + 1]; IGNORE past the end and on PAD."""
        targets = torch.full_like(ids, IGNORE)
        targets[:, :-1] = ids[:, 1:].masked_fill(~padding[:, 1:], IGNORE)
        return targets

    def step(self, model: SymbolicLM, batch: SymBatch, tap: Any = _no_tap) -> StepOutput:
        ids, padding = self.prepare(batch, tap)
        memory, memory_mask = self.condition(model, list(batch.captions), batch.seed, tap)
        targets = self.targets_from(ids, padding)
        tap("targets", targets, ignore_index=IGNORE, cardinality=len(self.tokenizer), shift=1)
        mask = targets != IGNORE
        tap("mask.loss", mask)
        logits = model(ids, padding, memory, memory_mask)
        tap("logits", logits)
        loss = next_token_loss(logits, targets)
        tap("loss", loss)
        return StepOutput(loss=loss, logits=logits, targets=targets, mask=mask, extras={"padding_mask": padding})

    def train_step(self, model: SymbolicLM, optimizer: torch.optim.Optimizer, batch: SymBatch,
                   tap: Any = _no_tap) -> StepOutput:
        model.train()
        out = self.step(model, batch, tap)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(grad_norm)
        return out

    # ---- generation -----------------------------------------------------------------------------

    def generate(self, model: SymbolicLM, batch: SymBatch, sampling: dict[str, Any] | None = None,
                 tap: Any = _no_tap) -> torch.Tensor:
        """Token ids [B, T]: BOS, sampled tokens, EOS (then PAD) where the model stopped."""
        s = Sampling.from_dict(self.sampling, sampling)
        pad, bos, eos = tk.special_ids(self.tokenizer)
        was = model.training
        model.eval()
        try:
            word_ids, word_mask = self.words.encode(list(batch.captions))
            memory, memory_mask = model.encode_condition(word_ids, word_mask)
            null_ids, null_mask = self.words.encode([""] * len(batch))
            null_memory, null_memory_mask = model.encode_condition(null_ids, null_mask)
            g = generate_ids(model, memory, memory_mask, null_memory, null_memory_mask, s, bos, eos, pad)
        finally:
            model.train(was)
        ids = g.ids
        tap("generation.tokens", ids, **tk.tokens_meta(self.tokenizer, self.cfg.tokenizer.resolution),
            frames_generated=ids.shape[1], prompt_frames=1, stopped=bool((ids == eos).any(dim=1).all()),
            sampling=asdict(s))
        # what the sampler saw, frame-aligned with the ids as one stream: [B, 1, T, V]
        tap("generation.logits", g.logits[:, None])
        if g.cond_logits is not None and g.uncond_logits is not None:
            tap("generation.logits.cond", g.cond_logits[:, None])
            tap("generation.logits.uncond", g.uncond_logits[:, None])
        return ids

    def decode_notes(self, tokens: Any) -> np.ndarray:
        """Token ids [B, T] -> one notes table, the example column the row."""
        rows = np.asarray(tokens.detach().cpu() if isinstance(tokens, torch.Tensor) else tokens).reshape(
            -1, np.shape(tokens)[-1])
        return self._stack([self.decode_ids(r.tolist()) for r in rows])
