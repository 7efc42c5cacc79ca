"""The model ignores captions: the ten ways a condition fails, from metadata to generation."""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from ..model import CrossAttention
from ..text import PAD_ID, UNK_ID, TextEncoder, WordTokenizer, split_words
from ._registry import fault, patch_model

if TYPE_CHECKING:
    from ..data import Clip
    from ..model import MusicLM
    from ..pipeline import Batch, ReferencePipeline

SECTION = "The model ignores captions or other controls"
Relabel = Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]  # (caption, meta) -> same


def _relabel_dataset(p: ReferencePipeline, relabel: Relabel) -> None:
    """Apply a per-clip caption/metadata bug wherever the dataset is read: `p.clip` (loaders,
    splits, training examples) and the golden batch, whose short last clip is made apart from
    `p.clip`. `relabel` must be idempotent: golden clips pass through it twice."""
    clip, golden = p.clip, p.golden_batch

    def buggy_clip(index: int, seed: int = 0) -> Clip:
        c = clip(index, seed)
        caption, meta = relabel(c.caption, dict(c.metadata))
        return replace(c, caption=caption, metadata=meta)

    def golden_batch(seed: int) -> Batch:
        batch = golden(seed)
        pairs = [relabel(c, dict(m)) for c, m in zip(batch.captions, batch.metadata)]
        return replace(batch, captions=[c for c, _ in pairs], metadata=[m for _, m in pairs])

    p.clip = buggy_clip  # type: ignore[method-assign]
    p.golden_batch = golden_batch  # type: ignore[method-assign]


def _clip_key(meta: dict[str, Any]) -> tuple[int, int]:
    """(index, collection seed) of a reference clip from its source id: "ref-000012", "ref-s3-000012"."""
    m = re.fullmatch(r"ref-(?:s(\d+)-)?(\d+)", str(meta["source_id"]))
    if m is None:
        raise ValueError(f"not a reference source id: {meta['source_id']!r}")
    return int(m.group(2)), int(m.group(1) or 0)


# ---- 1. the metadata does not contain the intended condition --------------------------------------

@fault("caption_key_missing", "conditioning", "the metadata field read as the caption does not exist",
       SECTION, ["caption.empty"], "caption", symptom="ignores-caption")
def _caption_key_missing(p: ReferencePipeline) -> None:
    def relabel(caption: str, meta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        # Bug: the dataset reads the text condition from `info.get("caption", "")`, but this
        # dataset's sidecars (AudioCraft MusicInfo) store it under "description": every caption
        # silently becomes "" and every example trains as the null condition.
        return meta.get("caption", ""), meta

    _relabel_dataset(p, relabel)


# The MusicInfo fields of an older sidecar schema, written before captions existed.
_OLD_SCHEMA = ("title", "artist", "key", "bpm", "genre", "moods", "instrument", "name", "source_id")


@fault("metadata_description_dropped", "conditioning", "the metadata does not contain the intended condition",
       SECTION, ["condition.metadata_missing"], "metadata", symptom="ignores-caption")
def _metadata_description_dropped(p: ReferencePipeline) -> None:
    def relabel(caption: str, meta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        # Bug: the sidecar reader keeps only the fields of an old schema, which predates
        # "description"; the caption then falls back to the genre, so the model is conditioned on
        # four genre words and never on tempo, instrument, pattern, key, register or dynamics.
        kept = {k: v for k, v in meta.items() if k in _OLD_SCHEMA}
        return kept.get("description") or str(kept["genre"]), kept

    _relabel_dataset(p, relabel)


# ---- 2. the condition is paired with the wrong audio ----------------------------------------------

@fault("captions_sorted_apart", "conditioning", "the condition is paired with the wrong audio", SECTION,
       ["caption.mismatch"], "caption", symptom="ignores-caption")
def _captions_sorted_apart(p: ReferencePipeline) -> None:
    make, golden = p.make_batch, p.golden_batch

    def sort_by_length(batch: Batch) -> Batch:
        # Bug: the collate function sorts examples longest first (to pack the audio tightly) and
        # permutes the clips and their metadata, but not the caption list: captions now belong to
        # whichever clip happened to sit at their old position.
        order = sorted(range(len(batch)), key=lambda i: -batch.clips[i].shape[-1])  # stable
        return replace(batch, clips=[batch.clips[i] for i in order],
                       metadata=[batch.metadata[i] for i in order])

    def make_batch(indices: Any, seed: int, data_seed: int = 0) -> Batch:
        return sort_by_length(make(indices, seed, data_seed))

    def golden_batch(seed: int) -> Batch:
        return sort_by_length(golden(seed))  # already sorted rows do not move a second time

    p.make_batch = make_batch  # type: ignore[method-assign]
    p.golden_batch = golden_batch  # type: ignore[method-assign]


# ---- 3. tokenisation produces an empty or truncated input -----------------------------------------

@fault("caption_max_len_3", "conditioning", "tokenisation truncates the caption", SECTION,
       ["caption.truncated"], "condition.tokens", symptom="ignores-caption")
def _caption_max_len_3(p: ReferencePipeline) -> None:
    # Bug: the tokenizer's max length comes from a tag-conditioning config (three tags: genre,
    # mood, instrument); captions of 15-20 words keep their first three ("fast bright square").
    p.tokenizer = WordTokenizer(p.tokenizer.words, max_len=3)


@fault("vocab_lookup_inverted", "conditioning", "tokenisation maps every word to the unknown id", SECTION,
       ["condition.tokens_unknown"], "condition.tokens", symptom="ignores-caption")
def _vocab_lookup_inverted(p: ReferencePipeline) -> None:
    tok = p.tokenizer
    # What vocab.json holds after `json.dump(id_to_word)`: string ids -> words.
    saved: dict[str, Any] = {str(i): w for i, w in enumerate(tok.words, start=2)}

    def encode(captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.full((len(captions), tok.max_len), PAD_ID, dtype=torch.long)
        for row, caption in enumerate(captions):
            # Bug: the reloaded vocabulary is the id -> word table, used as if it were word -> id:
            # no word is ever a key, so every word becomes <unk> (the mask still says "real word").
            tokens = [saved.get(w, UNK_ID) for w in split_words(caption)[: tok.max_len]]
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        return ids, ids != PAD_ID

    tok.encode = encode  # type: ignore[method-assign]


# ---- 4. condition dropout removes it more often than intended ------------------------------------

@fault("cond_dropout_inverted", "conditioning", "condition dropout removes the caption far more often than configured",
       SECTION, ["condition.dropout_rate"], "condition.dropped", symptom="ignores-caption")
def _cond_dropout_inverted(p: ReferencePipeline) -> None:
    def drop_conditions(captions: list[str], rng: np.random.Generator) -> tuple[list[str], torch.Tensor]:
        # Bug: the comparison is inverted (`>` for `<`): with p = 0.1, 90 % of the captions are
        # replaced by the null condition, while the config (and the tap) still say 0.1.
        dropped = rng.random(len(captions)) > p.cfg.cond_dropout
        return ["" if d else c for c, d in zip(captions, dropped)], torch.from_numpy(dropped)

    p.drop_conditions = drop_conditions  # type: ignore[method-assign]


# ---- 5 and 7. the encoder is frozen or detached; gradients do not reach the conditioning path ----

@fault("text_encoder_frozen", "conditioning", "the condition encoder is frozen", SECTION,
       ["condition.encoder_frozen"], "condition.embedding", symptom="ignores-caption")
def _text_encoder_frozen(p: ReferencePipeline) -> None:
    def freeze(model: MusicLM) -> None:
        # Bug: copied from a recipe with a pretrained T5 (`for p in t5.parameters(): p.requires_grad
        # = False`), but this encoder is trained from scratch: it stays at its random init.
        model.text_encoder.requires_grad_(False)

    patch_model(p, freeze)


def _no_grad_forward(self: TextEncoder, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # Bug: AudioCraft's T5 conditioner wraps its forward in `torch.set_grad_enabled(finetune)`;
    # the port hard-coded `torch.no_grad()`, so this trainable encoder never gets a gradient.
    with torch.no_grad():
        return TextEncoder.forward(self, ids, mask)


@fault("text_encoder_no_grad", "conditioning", "the condition encoder runs without autograd", SECTION,
       ["condition.no_grad"], "condition.embedding", symptom="ignores-caption")
def _text_encoder_no_grad(p: ReferencePipeline) -> None:
    def edit(model: MusicLM) -> None:
        # A bound method (not a closure) so that copy.deepcopy(model) rebinds it to the copy.
        enc = model.text_encoder
        enc.forward = types.MethodType(_no_grad_forward, enc)  # type: ignore[method-assign]

    patch_model(p, edit)


def _detached_kv_forward(self: CrossAttention, x: torch.Tensor, cond: torch.Tensor,
                         cond_mask: torch.Tensor) -> torch.Tensor:
    # Bug: the condition keys/values are computed from `cond.detach()` (code written for a cached
    # generation path, where the condition is constant): the LM trains its cross-attention, but no
    # gradient flows back into the text encoder or the null slot.
    return CrossAttention.forward(self, x, cond.detach(), cond_mask)


@fault("cross_attn_cond_detached", "conditioning", "gradients do not reach the conditioning path", SECTION,
       ["condition.no_grad"], "grad", symptom="ignores-caption")
def _cross_attn_cond_detached(p: ReferencePipeline) -> None:
    def edit(model: MusicLM) -> None:
        for block in model.blocks:
            block.cross_attn.forward = types.MethodType(_detached_kv_forward, block.cross_attn)

    patch_model(p, edit)


# ---- 6. the fusion module does not use the resulting tensor --------------------------------------

def _inverted_mask_forward(self: CrossAttention, x: torch.Tensor, cond: torch.Tensor,
                           cond_mask: torch.Tensor) -> torch.Tensor:
    B, S, D = x.shape
    L, H = cond.shape[1], self.heads
    q = self.q(x).view(B, S, H, D // H).transpose(1, 2)  # [B, H, S, Dh]
    k, v = self.kv(cond).view(B, L, 2, H, D // H).permute(2, 0, 3, 1, 4)  # [B, H, L, Dh]
    # Bug: ported from nn.MultiheadAttention, whose key_padding_mask is True where a key is
    # *ignored*; the mask was inverted "for SDPA", but it already meant "take part". Every step now
    # attends only to the padded slots (all-zero embeddings), never to a word or the null slot.
    attend = ~cond_mask[:, None, None, :]  # [B, 1, 1, L]
    p = self.dropout if self.training else 0.0
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, dropout_p=p)
    return self.out(y.transpose(1, 2).reshape(B, S, D))


@fault("cross_attn_mask_inverted", "conditioning", "the fusion module does not use the condition tensor",
       SECTION, ["condition.unused"], "logits", symptom="ignores-caption")
def _cross_attn_mask_inverted(p: ReferencePipeline) -> None:
    # Stage "logits": the embedding is right and differs per caption; what fails is its effect,
    # visible first in logits that do not change when the caption does.
    def edit(model: MusicLM) -> None:
        for block in model.blocks:
            block.cross_attn.forward = types.MethodType(_inverted_mask_forward, block.cross_attn)

    patch_model(p, edit)


def _batch_pooled_forward(self: TextEncoder, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = TextEncoder.forward(self, ids, mask)  # [B, L, D]
    # Bug: meant to add a pooled caption vector (mean over words, dim=1, broadcast back over L), but
    # reduces dim=0, the batch: broadcasting hides the mistake and every caption gets the batch mean.
    pooled = out.mean(dim=0, keepdim=True)  # [1, L, D]
    return pooled * mask.unsqueeze(-1).to(out.dtype)  # [B, L, D]


@fault("text_embedding_batch_mean", "conditioning", "the condition embedding is the same for every caption",
       SECTION, ["condition.collapsed"], "condition.embedding", symptom="ignores-caption")
def _text_embedding_batch_mean(p: ReferencePipeline) -> None:
    def edit(model: MusicLM) -> None:
        enc = model.text_encoder
        enc.forward = types.MethodType(_batch_pooled_forward, enc)  # type: ignore[method-assign]

    patch_model(p, edit)


# ---- 8. the training data has no reliable relationship between condition and target ---------------

_IDENTITY = ("title", "name", "source_id")  # what belongs to the audio file, not to its labels

@fault("captions_shuffled_once", "conditioning", "the training data has no relationship between caption and audio",
       SECTION, ["condition.no_relationship"], "caption", symptom="ignores-caption")
def _captions_shuffled_once(p: ReferencePipeline) -> None:
    clip = p.clip  # the true captions of the collection, read before the bug rewrites them
    n = p.cfg.train_size + p.cfg.valid_size
    permutations: dict[int, np.ndarray] = {}

    def relabel(caption: str, meta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        # Bug: the annotation table (caption and tags) was exported with `df.sample(frac=1)` and
        # re-joined to the audio files by row position: every epoch, each clip carries the caption
        # and tags of another clip. Labels and audio agree on nothing but the file's identity.
        index, seed = _clip_key(meta)
        perm = permutations.setdefault(seed, np.random.default_rng([seed, 404]).permutation(n))
        other = clip(int(perm[index % n]), seed)
        identity = {k: meta[k] for k in _IDENTITY}
        return other.caption, {**other.metadata, **identity}

    _relabel_dataset(p, relabel)


# ---- 9. generation guidance or sampling settings are unsuitable -----------------------------------

@fault("cfg_coef_zero", "conditioning", "guidance at generation cancels the condition", SECTION,
       ["generation.guidance_off"], "generation", symptom="ignores-caption")
def _cfg_coef_zero(p: ReferencePipeline) -> None:
    # Bug: "guidance 0 = off" is the diffusers convention; in AudioCraft's formula
    # uncond + cfg_coef * (cond - uncond), 0 keeps only the unconditional logits (off is 1.0).
    p.cfg.sampling["cfg_coef"] = 0.0


# ---- 10. the evaluation prompt asks for attributes the model was not trained to represent ---------

_KEY_PHRASE = re.compile(r" in [a-g]( sharp)? (major|minor)")


@fault("training_captions_without_key", "conditioning", "the evaluation prompts ask for an attribute never trained",
       SECTION, ["condition.unseen_words"], "condition.tokens", symptom="ignores-caption")
def _training_captions_without_key(p: ReferencePipeline) -> None:
    loader, examples, splits = p.loader, p.training_examples, p.splits

    def strip(caption: str) -> str:
        # Bug: the training captions come from an older captioner that never named the key; the
        # evaluation prompts (validation and golden captions) do: "in g minor" was never trained.
        return _KEY_PHRASE.sub("", caption)

    def training_loader(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        for batch in loader(split, seed):
            if split == "train":
                metadata = [{**m, "description": strip(str(m["description"]))} for m in batch.metadata]
                batch = replace(batch, captions=[strip(c) for c in batch.captions], metadata=metadata)
            yield batch

    def strip_clip(c: Clip) -> Clip:
        return replace(c, caption=strip(c.caption), metadata={**c.metadata, "description": strip(c.caption)})

    def training_examples() -> list[Clip]:
        return [strip_clip(c) for c in examples()]

    def training_splits() -> dict[str, list[Clip]]:
        return {s: [strip_clip(c) for c in clips] if s == "train" else clips for s, clips in splits().items()}

    p.loader = training_loader  # type: ignore[method-assign]
    p.training_examples = training_examples  # type: ignore[method-assign]
    p.splits = training_splits  # type: ignore[method-assign]
