"""The well-known stage names, in pipeline order (docs/taps.md shows each one tapped).

Unknown names are welcome: they get generic statistics and comparison. The names below unlock the
checks that know what a stage should hold.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StageInfo", "STAGES", "VIRTUAL_STAGES", "stage_info", "is_audio_stage", "stage_rank"]


@dataclass(frozen=True)
class StageInfo:
    name: str
    kind: str  # the kind a value tapped at this stage is expected to have
    what: str  # what the value is, for reports


STAGES: tuple[StageInfo, ...] = (
    StageInfo("audio.original", "audio", "source audio as loaded [B, C, T]"),
    StageInfo("caption", "text", "one caption per example"),
    StageInfo("metadata", "json", "one metadata record per example"),
    StageInfo("audio.resampled", "audio", "audio at the model's sample rate"),
    StageInfo("audio.mono", "audio", "audio after channel conversion"),
    StageInfo("crop", "tensor", "crop bounds [B, 2] in samples"),
    StageInfo("audio.cropped", "audio", "the audio segment the model sees"),
    StageInfo("midi.source", "tensor", "symbolic: the notes of the crop as read [N, 7] (NOTE_COLUMNS, beats)"),
    StageInfo("notes.augmented", "tensor", "symbolic: the notes after augmentation (transposition) [N, 7]"),
    StageInfo("tokens", "tensor", "codec tokens [B, K, T], or symbolic token ids [B, T] (meta kind='symbolic')"),
    StageInfo("notes.decoded", "tensor", "symbolic: the notes decoded back from the tokens [N, 7]"),
    StageInfo("tokens.pattern", "tensor", "tokens after the delay/interleaving pattern, unshifted [B, K, T']"),
    StageInfo("tokens.input", "tensor",
              "what the model reads: decoder input ids, shifted behind a start token [B, K, T'], [B, T', K] or "
              "[B*K, T']"),
    StageInfo("mask.padding", "tensor", "valid (non-padding) frames"),
    StageInfo("condition.tokens", "tensor", "tokenised condition ids [B, L]"),
    StageInfo("condition.mask", "tensor", "valid condition tokens [B, L]"),
    StageInfo("condition.dropped", "tensor", "condition dropped for classifier-free guidance, per example"),
    StageInfo("condition.embedding", "tensor", "condition embedding [B, L, D]"),
    StageInfo("targets", "tensor", "target tokens [B, K, T]"),
    StageInfo("logits", "tensor", "model outputs [B, K, T, card]"),
    StageInfo("mask.loss", "tensor", "positions that count in the loss [B, K, T]"),
    StageInfo("loss", "scalar", "the loss that is back-propagated"),
    StageInfo("loss.per_codebook", "tensor", "cross-entropy per codebook [K]"),
    StageInfo("audio.decoded", "audio", "tokens decoded back to audio"),
    StageInfo("audio.written", "audio", "audio as written to / read back from a file"),
)

#: Places a problem can show that are not tapped values: findings name them as their stage.
VIRTUAL_STAGES: tuple[StageInfo, ...] = (
    StageInfo("loader", "json", "the stream of batches a loader yields"),
    StageInfo("model", "json", "the model's parameters and buffers"),
    StageInfo("grad", "json", "gradients after backward"),
    StageInfo("optimizer", "json", "the optimizer step: groups, learning rate, state, scaler"),
    StageInfo("generation", "json", "sampling: settings and generated tokens"),
    StageInfo("split", "json", "dataset splits and what crosses them"),
    StageInfo("dataset", "json", "dataset files, manifests and sidecars"),
    StageInfo("runtime", "json", "time: waiting for data, synchronising, stalls"),
)

_BY_NAME = {s.name: s for s in STAGES + VIRTUAL_STAGES}
_RANK = {s.name: i for i, s in enumerate(STAGES)}


def stage_info(name: str) -> StageInfo | None:
    """The vocabulary entry of a stage name (ignoring a `#n` repeat suffix), or None if unknown."""
    return _BY_NAME.get(name.split("#", 1)[0])


def is_audio_stage(name: str) -> bool:
    return name.split("#", 1)[0].startswith("audio.")


def stage_rank(name: str) -> int:
    """Position in the canonical order; unknown stages sort after the known ones."""
    return _RANK.get(name.split("#", 1)[0], len(_RANK))
