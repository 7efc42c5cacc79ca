"""Write the HF bed to disk as a user would have it: a `save_pretrained` model folder (with its
tokenizer) and an HF audiofolder dataset (`metadata.jsonl` + WAV files), for `--hf-musicgen`."""

from __future__ import annotations

import json
from pathlib import Path

import soundfile as sf

from .tiny import TinyConfig, bed_clips, tiny_model, tiny_tokenizer

__all__ = ["write_model", "write_audiofolder"]


def write_model(folder: str | Path, seed: int = 0, cfg: TinyConfig | None = None) -> Path:
    cfg = cfg or TinyConfig()
    folder = Path(folder)
    tok = tiny_tokenizer(cfg.max_text_len)
    tiny_model(seed, cfg, len(tok)).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def write_audiofolder(folder: str | Path, n: int = 20, seed: int = 0) -> Path:
    """`n` captioned clips as an audiofolder: `train/` and `validation/` (every fifth clip)."""
    folder = Path(folder)
    for split in ("train", "validation"):
        (folder / split).mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[str]] = {"train": [], "validation": []}
    for i, clip in enumerate(bed_clips(n, seed)):
        split = "validation" if i % 5 == 4 else "train"
        name = f"{clip.source_id}.wav"
        sf.write(folder / split / name, clip.audio.T, clip.sample_rate, subtype="PCM_16")
        rows[split].append(json.dumps({"file_name": name, "text": clip.caption, "source_id": clip.source_id}))
    for split, lines in rows.items():
        (folder / split / "metadata.jsonl").write_text("".join(line + "\n" for line in lines))
    return folder
