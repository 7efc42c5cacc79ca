"""Fit the tiny bed's codec once, offline, and store it as data (`assets/tiny_codec.safetensors`).

A freshly initialised Encodec decodes every code to near-silence: its random decoder ignores them,
so no check that listens to decoded tokens could work on the bed. A real MusicGen ships a trained
codec; the bed ships a small fitted one. The encoder stays as initialised (seed 0) with its
codebooks seeded from its own frames (`tiny.fill_codebooks`); the decoder is fitted to reconstruct
the reference clips from their codes (multi-resolution log-spectrum and waveform L1).

    .venv/bin/python -m signalchain.reference.hf.train_codec   # about a minute on 2 cores
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

ASSET = Path(__file__).parent / "assets" / "tiny_codec.safetensors"


def _spectral_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = (x - y).abs().mean()
    for n in (256, 512, 1024):
        win = torch.hann_window(n)
        sx = torch.stft(x.reshape(-1, x.shape[-1]), n, n // 4, window=win, return_complex=True).abs()
        sy = torch.stft(y.reshape(-1, y.shape[-1]), n, n // 4, window=win, return_complex=True).abs()
        loss = loss + (torch.log(sx + 1e-4) - torch.log(sy + 1e-4)).abs().mean() + (sx - sy).abs().mean()
    return loss


def fit(steps: int = 600, seed: int = 0) -> dict[str, torch.Tensor]:
    from .tiny import TinyConfig, _configs, bed_clips, fill_codebooks, resample_clip, tiny_tokenizer

    from transformers import MusicgenForConditionalGeneration

    cfg = TinyConfig()
    torch.manual_seed(seed)
    model = MusicgenForConditionalGeneration(_configs(cfg, len(tiny_tokenizer())))
    codec = model.audio_encoder
    fill_codebooks(model, cfg, seed=0)
    clips = [resample_clip(c.audio.mean(0, keepdims=True), c.sample_rate, cfg.sample_rate)
             for c in bed_clips(48, seed=7, short_every=0)]
    rng = np.random.default_rng(seed)
    seg = cfg.sample_rate
    opt = torch.optim.Adam(codec.decoder.parameters(), lr=3e-3)
    bw = codec.config.target_bandwidths[0]
    t0 = time.time()
    for step in range(steps):
        batch = []
        for i in rng.choice(len(clips), 8):
            a = clips[int(i)]
            s = int(rng.integers(0, max(1, a.shape[-1] - seg)))
            batch.append(a[:, s : s + seg])
        x = torch.from_numpy(np.stack(batch))
        with torch.no_grad():
            codes = codec.encode(x, bandwidth=bw).audio_codes
        y = codec.decode(codes, [None]).audio_values[..., : x.shape[-1]]
        loss = _spectral_loss(y, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {float(loss):.3f} ({time.time() - t0:.0f} s)")
    return {k: v.detach().contiguous() for k, v in codec.state_dict().items()}


def main() -> None:
    from safetensors.torch import save_file

    torch.set_num_threads(2)
    state = fit()
    ASSET.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(ASSET))
    print(f"wrote {ASSET} ({ASSET.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
