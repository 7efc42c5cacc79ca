"""What every stranger's script shares: the tiny offline HF MusicGen, its captioned clips encoded by the
model's own codec, the label layouts public scripts build, their collators, and the record of a run.

The label layouts are the ones public fine-tuning scripts make, written here in our own words:

- `labels_truncated` (musicgen-dreamboothing): a column of the pad id in front of the codes, the
  decoder's `build_delay_pattern_mask` + `apply_delay_pattern_mask`, the first column dropped. The
  result keeps the input's length T, so the later codebooks lose their last frames; the pattern's
  empty corners hold the pad id (= the codebook size), which HF MusicGen's loss masks itself.
- `labels_full` (parler-tts): the same pattern at its full length T + K, every position the pattern
  leaves empty (both corners, and the end) set to the pad id, which doubles as BOS and EOS here.
- `labels_ignored`: the full pattern with -100 wherever it is empty (the "labels set to -100 are
  ignored" of HF's docstring), length T + K - 1.

The collators pad the time axis of labels `[T, K]` with -100 (both public scripts) or with the pad id
(HF masks both), and the captions with the tokenizer's own `pad`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from signalchain.reference.data import generate_clip
from signalchain.reference.hf.tiny import TinyConfig, resample_clip, tiny_model, tiny_tokenizer

__all__ = ["CFG", "STEREO", "Run", "model", "tokenizer", "clips", "encode", "labels_truncated", "labels_full",
           "labels_ignored", "labels_flat", "Rows", "Collate", "timed", "fresh_accelerate", "trainable_moved"]

CFG = TinyConfig()
STEREO = TinyConfig(audio_channels=2)  # the decoder interleaves 2 × 4 codebooks; the codec stays mono
DATA_RATE = 32000  # the clips are stored at 32 kHz and resampled to the codec's rate, as a dataset cast does
PAD = CFG.codebook_size  # MusicGen's pad = bos = decoder start id: one past the last code


@dataclasses.dataclass
class Run:
    """One script run on one seed: every finding signalchain made, and what the training did."""

    script: str
    seed: int
    findings: list[dict]
    steps: int = 0  # optimizer steps the trainer made
    losses: list[float] = dataclasses.field(default_factory=list)
    moved: bool | None = None  # the trainable weights changed
    error: str | None = None  # an exception the script itself raised
    seconds: float = 0.0

    def of(self, severity: str) -> list[dict]:
        return [f for f in self.findings if f["severity"] == severity]

    @property
    def check_failed(self) -> list[dict]:
        return [f for f in self.findings if f["id"] == "internal.check_failed"]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def model(seed: int, cfg: TinyConfig = CFG):
    return tiny_model(seed, cfg)


def tokenizer():
    return tiny_tokenizer(CFG.max_text_len)


def clips(n: int, seed: int, cfg: TinyConfig = CFG) -> list[tuple[str, np.ndarray]]:
    """`n` (caption, audio [C, S] at the codec's rate) pairs, 0.4-0.8 s long: lengths differ, so every
    batch has padding. Stereo configs get two channels (a mono clip is upmixed, as datasets do)."""
    out = []
    for i in range(n):
        seconds = 0.4 + 0.1 * ((i * 3 + seed) % 5)
        c = generate_clip(i, seed, DATA_RATE, seconds=seconds)
        audio = resample_clip(c.audio, DATA_RATE, cfg.sample_rate)
        audio = np.repeat(audio[:1], 2, 0) if cfg.audio_channels == 2 and audio.shape[0] == 1 else audio
        audio = audio[:2] if cfg.audio_channels == 2 else audio.mean(0, keepdims=True)
        out.append((c.caption, audio))
    return out


@torch.no_grad()
def encode(net, audio: np.ndarray) -> torch.Tensor:
    """Codes `[K, T]` of one clip by the model's own codec, one clip at a time (Encodec does not batch
    clips of different lengths); a stereo clip's channels are encoded apart and interleaved (L, R, L, …)."""
    per_channel = [net.audio_encoder.encode(torch.from_numpy(ch[None, None].copy())).audio_codes[0, 0]
                   for ch in audio]  # [K_codec, T] each
    if len(per_channel) == 1:
        return per_channel[0]
    return torch.stack(per_channel, dim=1).reshape(-1, per_channel[0].shape[-1])


def _pattern(decoder, codes: torch.Tensor, extra: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's own pattern of `codes` [K, T] behind one pad column: (input ids, pattern mask)."""
    k, t = codes.shape
    with_bos = torch.cat([torch.full((k, 1), PAD, dtype=codes.dtype), codes], dim=-1)
    return decoder.build_delay_pattern_mask(with_bos, pad_token_id=PAD, max_length=t + 1 + extra)


def labels_truncated(decoder, codes: torch.Tensor) -> torch.Tensor:
    """musicgen-dreamboothing's labels `[K, T]`: the pattern applied, cut at the input's length."""
    ids, mask = _pattern(decoder, codes, decoder.num_codebooks)
    return decoder.apply_delay_pattern_mask(ids, mask)[:, 1:]


def labels_full(decoder, codes: torch.Tensor) -> torch.Tensor:
    """parler-tts's labels `[K, T + K']` (K' = the largest delay + 1): every empty slot the pad id."""
    _, mask = _pattern(decoder, codes, decoder.num_codebooks // decoder.config.audio_channels)
    return torch.where(mask == -1, torch.full_like(mask, PAD), mask)[:, 1:]


def labels_ignored(decoder, codes: torch.Tensor) -> torch.Tensor:
    """The full pattern without its all-empty last column, -100 wherever the pattern is empty."""
    full = labels_full(decoder, codes)[:, :-1]
    return torch.where(full == PAD, torch.full_like(full, -100), full)


class Rows(torch.utils.data.Dataset):
    """A preprocessed dataset as `datasets.map` leaves it: caption ids (unpadded) and labels `[K, T']`."""

    def __init__(self, net, n: int, seed: int, make_labels: Callable[[Any, torch.Tensor], torch.Tensor],
                 cfg: TinyConfig = CFG):
        tok = tokenizer()
        self.rows = [{"input_ids": tok(caption)["input_ids"], "labels": make_labels(net.decoder, encode(net, audio))}
                     for caption, audio in clips(n, seed, cfg)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


class Collate:
    """Labels `[K, T']` → `[B, T_max, K]` padded with `label_pad`; captions padded by the tokenizer."""

    def __init__(self, label_pad: int = -100):
        self.tok, self.label_pad = tokenizer(), label_pad

    def __call__(self, items: list[dict]) -> dict:
        labels = [torch.as_tensor(it["labels"]).transpose(0, 1) for it in items]
        batch = self.tok.pad([{"input_ids": it["input_ids"]} for it in items], return_tensors="pt")
        return {**batch, "labels": torch.nn.utils.rnn.pad_sequence(labels, batch_first=True,
                                                                   padding_value=self.label_pad)}


def findings_of(found: Iterable[Any]) -> list[dict]:
    return [f.to_dict() if hasattr(f, "to_dict") else dict(f) for f in found]


def trainable_moved(net: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    now = dict(net.named_parameters())
    return any(not torch.equal(now[k].detach(), v) for k, v in before.items() if k in now)


def trainable_copy(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in net.named_parameters() if p.requires_grad}


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Environment variables a script's user sets in their shell, for this run only."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fresh_accelerate() -> None:
    """Forget accelerate's process-wide state: each public script is its own process, and an earlier
    script in this one (a Trainer makes an Accelerator) must not decide this one's precision."""
    try:
        from accelerate.state import AcceleratorState, GradientState, PartialState
    except ImportError:
        return
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()


def timed(script: str, seed: int, fn: Callable[[], Run]) -> Run:
    """Run `fn` as the script would run: its own exception is the run's `error`, not the bed's."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    fresh_accelerate()
    start = time.perf_counter()
    try:
        run = fn()
    except Exception as exc:  # a script that crashes is a finding of the bed, shown in the table
        run = Run(script, seed, [], error=f"{type(exc).__name__}: {exc}"[:1000])
    run.seconds = time.perf_counter() - start
    return run


def out_dir(root: Path, script: str, seed: int) -> Path:
    path = Path(root) / f"{script}-seed{seed}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def labels_flat(decoder, codes: torch.Tensor) -> torch.Tensor:
    """A fault for the can-fail tests: the codes as labels with no delay pattern at all (every codebook
    at delay 0), what a script gets when it forgets `build_delay_pattern_mask`."""
    return codes.clone()


SEEDS_ENV = "SIGNALCHAIN_STRANGERS_SEEDS"  # e.g. "0,1,2": every script on these seeds (default below)


def seeds(slow: bool) -> list[int]:
    """The seeds a script runs on in the test suite: all three for the in-process scripts (about a
    second each), seed 0 for the multi-process ones unless `SIGNALCHAIN_STRANGERS_SEEDS` asks for more."""
    given = os.environ.get(SEEDS_ENV, "").strip()
    if given:
        return [int(s) for s in given.replace(" ", ",").split(",") if s]
    return [0] if slow else [0, 1, 2]


def verdict(run: Run, allowed: dict[str, str]) -> list[str]:
    """What makes a run fail the bed (empty: it passes): the script raised, an error, an
    `internal.check_failed` (a warning since issue 40: signalchain's own crash), a warning not allowed."""
    bad = [f"raised {run.error}"] if run.error else []
    bad += [f"error {f['id']}: {f['message']}" for f in run.of("error")]
    bad += [f"internal.check_failed: {f['message']}" for f in run.check_failed if f["severity"] != "error"]
    bad += [f"warning {f['id']} not allowed: {f['message']}" for f in run.of("warning")
            if f["id"] not in allowed and f["id"] != "internal.check_failed"]
    return bad


def assert_clean(run: Run, module: Any) -> None:
    """A clean script's run: it trained (every step, weights moved, finite losses) and passes `verdict`."""
    assert run.error is None, f"{run.script} seed {run.seed} raised: {run.error}"
    assert verdict(run, module.ALLOWED) == [], "\n".join(verdict(run, module.ALLOWED))
    assert run.steps > 0 and run.moved is True, f"{run.script} did not train: {run.steps} steps, moved {run.moved}"
    assert run.losses and all(math.isfinite(x) for x in run.losses), run.losses
