"""What every subcommand shares: options, pipeline resolution, error handling and exit codes."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import click

from ..errors import SignalchainError, UsageError
from ..pipeline import capabilities, load_pipeline

__all__ = ["DEFAULT_PIPELINE", "BUILTIN_PIPELINES", "common_options", "hf_options", "resolve_pipeline", "guarded",
           "parse_tolerances"]

#: With no pipeline named, every command runs on the bundled reference pipeline (DESIGN §3).
DEFAULT_PIPELINE = "signalchain.reference:ReferencePipeline"
#: Short names for the bundled beds.
BUILTIN_PIPELINES = {"reference": DEFAULT_PIPELINE, "hf-bed": "signalchain.reference.hf:HFBedPipeline"}


def hf_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--hf-musicgen MODEL_DIR --data DATA [--hf-set KEY=VALUE]: a pipeline from a saved HF MusicGen."""
    f = click.option("--hf-set", "hf_set", multiple=True, metavar="KEY=VALUE",
                     help="A setting of the HF pipeline (lr, batch_size, segment_seconds, cond_dropout, …).")(f)
    f = click.option("--data", "data", multiple=True, type=click.Path(exists=True),
                     help="With --hf-musicgen: an audiofolder, an AudioCraft manifest or a folder (repeatable).")(f)
    f = click.option("--hf-musicgen", "hf_musicgen", type=click.Path(exists=True, file_okay=False), default=None,
                     help="A MusicgenForConditionalGeneration save_pretrained folder (with its tokenizer).")(f)
    return f


def common_options(html: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--json, --html (where the command has a page) and --debug on a subcommand."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        f = click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")(f)
        if html:
            f = click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
                             help="Write the self-contained HTML report here.")(f)
        f = click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
                         help="Write the machine-readable report here.")(f)
        return f

    return deco


def guarded(f: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command body; map its result and errors to DESIGN §5 exit codes (0, 1, 2)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        debug = bool(kwargs.get("debug"))
        try:
            code = f(*args, **kwargs) or 0
        except (SignalchainError, click.ClickException) as exc:
            msg = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
            click.echo(f"signalchain: error: {msg}", err=True)
            if debug:
                traceback.print_exc()
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("signalchain: interrupted", err=True)
            sys.exit(2)
        except Exception as exc:  # an internal error: one line, the traceback only with --debug
            click.echo(f"signalchain: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", err=True)
            if debug:
                traceback.print_exc()
            sys.exit(2)
        sys.exit(code)

    return wrapper


def resolve_pipeline(spec: str | None, faults: Sequence[str] = (), hf_musicgen: str | None = None,
                     data: Sequence[str] = (), hf_set: Sequence[str] = ()) -> tuple[Any, str]:
    """Load the named pipeline (the reference one when None; `hf-bed` for the HF bed), or one made
    from a saved HF MusicGen and its data, and inject catalogue faults if asked."""
    if hf_musicgen is not None:
        if spec:
            raise UsageError(f"give either a pipeline ({spec!r}) or --hf-musicgen, not both")
        if not data:
            raise UsageError("--hf-musicgen needs --data: an audiofolder, an AudioCraft manifest or a folder of audio")
        from ..integrations.hf_musicgen import from_pretrained_dir, parse_settings

        pipeline = from_pretrained_dir(hf_musicgen, list(data), parse_settings(hf_set))
        spec = f"--hf-musicgen {hf_musicgen}"
    else:
        if data or hf_set:
            raise UsageError("--data and --hf-set go with --hf-musicgen MODEL_DIR")
        spec = BUILTIN_PIPELINES.get(spec or "", spec) or DEFAULT_PIPELINE
        pipeline = load_pipeline(spec)
    if faults:
        if "with_faults" not in capabilities(pipeline):
            raise UsageError(f"--fault needs a pipeline with with_faults(names), such as the reference pipeline; {spec!r} has none")
        pipeline = pipeline.with_faults(list(faults))
    return pipeline, spec


def parse_tolerances(items: Sequence[str]) -> dict[str, tuple[float, float | None]]:
    """`STAGE=RTOL[,ATOL]` → {stage: (rtol, atol)}."""
    out: dict[str, tuple[float, float | None]] = {}
    for item in items:
        stage, sep, vals = item.partition("=")
        try:
            if not sep or not stage:
                raise ValueError
            parts = vals.split(",")
            out[stage] = (float(parts[0]), float(parts[1]) if len(parts) > 1 else None)
        except ValueError:
            raise UsageError(f"--tol {item!r} is not STAGE=RTOL[,ATOL] (e.g. --tol logits=1e-3,1e-5)") from None
    return out
