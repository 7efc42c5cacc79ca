"""`signalchain doctor --hf-musicgen MODEL_DIR --data DATA`: a pipeline from a `save_pretrained`
folder (model and its processor or tokenizer) and a dataset on disk, without writing Python."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import UsageError
from .pipeline import HFMusicgenPipeline

__all__ = ["from_pretrained_dir", "parse_settings", "SETTINGS"]

#: The settings `--hf-set KEY=VALUE` may change, with their types.
SETTINGS: dict[str, type] = {"batch_size": int, "segment_seconds": float, "lr": float, "text_lr_scale": float,
                             "weight_decay": float, "cond_dropout": float, "guidance_scale": float,
                             "max_text_len": int, "clip_grad": float, "train_text_encoder": bool, "amp": str,
                             "valid_every": int, "caption_column": str, "cache_codes": int}


def parse_settings(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in SETTINGS:
            raise UsageError(f"--hf-set {item!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(SETTINGS))}")
        kind = SETTINGS[key]
        try:
            if kind is bool:
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(raw)
                out[key] = raw.lower() in ("true", "1", "yes")
            else:
                out[key] = kind(raw)
        except ValueError:
            raise UsageError(f"--hf-set {item!r}: {raw!r} is not a {kind.__name__}") from None
    return out


def _tokenizer(folder: Path) -> Any:
    """The processor's tokenizer saved in `folder`, else its tokenizer."""
    from transformers import AutoProcessor, AutoTokenizer

    try:
        proc = AutoProcessor.from_pretrained(str(folder))
        return getattr(proc, "tokenizer", proc)
    except Exception:
        try:
            return AutoTokenizer.from_pretrained(str(folder))
        except Exception as exc:
            raise UsageError(f"{folder}: no processor or tokenizer saved beside the model "
                             f"({type(exc).__name__}: {exc}); save one with tokenizer.save_pretrained({str(folder)!r})"
                             ) from None


def from_pretrained_dir(model_dir: str | Path, data: str | Path | Sequence[str | Path],
                        settings: Mapping[str, Any] | None = None, *, option: str | None = "--hf-musicgen"
                        ) -> HFMusicgenPipeline:
    """`HFMusicgenPipeline.from_pretrained`: the model folder's processor or tokenizer found (unless
    `settings` gives one); problems named after `option` (the CLI's) or the folder (Python's)."""
    folder = Path(model_dir)
    what = f"{option} {str(folder)!r}" if option else str(folder)
    if not (folder / "config.json").is_file():
        raise UsageError(f"{what}: no config.json there; give a folder written by "
                         "MusicgenForConditionalGeneration.save_pretrained")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UsageError(f"{option or 'HFMusicgenPipeline.from_pretrained'} needs transformers: "
                         "pip install 'signalchain[hf]'") from None
    kw = {"name": f"hf-musicgen:{folder.name}", **dict(settings or {})}
    if kw.get("tokenizer") is None and kw.get("processor") is None:
        kw["tokenizer"] = _tokenizer(folder)
    return HFMusicgenPipeline(folder, data=data, **kw)
