"""What every subcommand shares: options, pipeline resolution, error handling and exit codes."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..errors import PipelineExit, SignalchainError, UsageError
from ..findings import Finding, exit_code
from ..pipeline import Pipeline, capabilities, load_pipeline
from ..report.progress import is_quiet, set_quiet  # (no rich at import: `--help` stays cheap)
from ._noise import hold_library_noise
from ._paths import ExistingPath, check_output_target

if TYPE_CHECKING:  # the report (rich, numpy, pages) is imported where a command uses it: `--help` stays cheap
    from rich.console import Console

    from ..report import HtmlReport

__all__ = ["DEFAULT_PIPELINE", "BUILTIN_PIPELINES", "BED_LINES", "beds_epilog", "common_options", "hf_options",
           "resolve_pipeline", "resolve", "Resolved", "guarded", "one_line", "exit_origin", "fail", "shield_exits",
           "emit"]

#: With no pipeline named, every command runs on the bundled reference pipeline (DESIGN §3).
DEFAULT_PIPELINE = "signalchain.reference:ReferencePipeline"
#: Short names for the bundled beds.
BUILTIN_PIPELINES = {"reference": DEFAULT_PIPELINE, "hf-bed": "signalchain.reference.hf:HFBedPipeline",
                     "symbolic-bed": "signalchain.reference.symbolic:SymbolicBedPipeline"}
#: One line on each bundled bed, for --help (a test checks that every bed has one).
BED_LINES = {"reference": "the audio reference (the default): captioned clips → codec tokens → a small transformer",
             "hf-bed": "a tiny HF MusicGen (T5 + Encodec + MusicGen decoder), built offline in seconds",
             "symbolic-bed": "60 music21 pieces, a miditok REMI tokenizer and a caption-conditioned decoder"}


def beds_epilog() -> str:
    """The bundled beds, one line each, as a --help epilog (`\\b`: click keeps the lines as they are)."""
    width = max(map(len, BUILTIN_PIPELINES))
    return "\b\nBundled beds (give the name as PIPELINE):\n" + "\n".join(
        f"  {name:<{width}}  {BED_LINES.get(name, BUILTIN_PIPELINES[name])}" for name in BUILTIN_PIPELINES)


def hf_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--hf-musicgen MODEL_DIR --data DATA [--hf-set KEY=VALUE]: a pipeline from a saved HF MusicGen."""
    f = click.option("--hf-set", "hf_set", multiple=True, metavar="KEY=VALUE",
                     help="A setting of the HF pipeline (lr, batch_size, segment_seconds, cond_dropout, …).")(f)
    f = click.option("--data", "data", multiple=True, type=ExistingPath(),
                     help="With --hf-musicgen: an audiofolder, an AudioCraft manifest or a folder (repeatable).")(f)
    f = click.option("--hf-musicgen", "hf_musicgen", type=ExistingPath(file_okay=False), default=None,
                     help="A MusicgenForConditionalGeneration save_pretrained folder (with its tokenizer).")(f)
    return f


def common_options(html: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--json, --html (where the command has a page), --quiet and --debug on a subcommand."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        f = click.option("--debug", is_flag=True,
                         help="Show tracebacks for internal errors, and the libraries' warnings.")(f)
        f = click.option("--quiet", "-q", is_flag=True, expose_value=False, callback=_quiet_flag,
                         help="No progress (bars, lines); the findings and the report still print.")(f)
        if html:
            f = click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
                             callback=lambda ctx, param, value: check_output_target(value) or value,
                             help="Write the self-contained HTML report here.")(f)
        f = click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
                         callback=_json_target,
                         help="Write the machine-readable report here (- : standard output, the rest to stderr).")(f)
        return f

    return deco


def _json_target(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """`--json -`: the report is standard output, so everything said for people goes to stderr; reset
    on every command, so that one invocation's choice never leaks into the next (tests, a Python caller)."""
    from ..report.terminal import human_to_stderr

    check_output_target(value)
    human_to_stderr(value == "-")
    return value


def _quiet_flag(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """`--quiet`: set (or reset) on every command, like `--json -`."""
    set_quiet(value)
    return value


def one_line(text: object, limit: int = 2000) -> str:
    """A message as one line of stderr: its lines joined, overly long ones cut."""
    line = " | ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def fail(message: object, *, internal: BaseException | None = None, debug: bool = False, code: int = 2) -> None:
    """DESIGN §5: one clear line on stderr, a traceback only with --debug, then exit (2 by default)."""
    if internal is not None:
        click.echo(f"signalchain: internal error: {one_line(f'{type(internal).__name__}: {internal}')} "
                   "(rerun with --debug for the traceback)", err=True)
    else:
        click.echo(f"signalchain: error: {one_line(message)}", err=True)
    if debug:
        traceback.print_exc()
    sys.exit(code)


def exit_origin(exc: BaseException) -> str:
    """' at file:line' of the user's code that raised `exc` (empty when it was not theirs)."""
    from ..experiments._crash import crash_origin

    origin = crash_origin(exc)
    return f" at {origin[1]}" if origin else ""


def guarded(f: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command body; map its result and errors to DESIGN §5 exit codes (0, 1, 2)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        debug = bool(kwargs.get("debug"))
        try:
            if debug:  # the libraries' warnings as they come
                code = f(*args, **kwargs) or 0
            else:
                with hold_library_noise() as noise:
                    code = f(*args, **kwargs) or 0
                if noise.total and not is_quiet():
                    click.echo(noise.summary(), err=True)
        except click.exceptions.Exit:
            raise  # click's own ctx.exit(): its code stands
        except (SignalchainError, click.ClickException) as exc:
            fail(exc.format_message() if isinstance(exc, click.ClickException) else str(exc), debug=debug)
        except KeyboardInterrupt:
            fail("interrupted", debug=debug)
        except SystemExit as exc:  # the body never exits: this is code it ran (a pipeline) calling sys.exit
            ctx = click.get_current_context(silent=True)
            fail(f"code run by `{ctx.command_path if ctx else 'signalchain'}` called sys.exit({exc.code!r})"
                 f"{exit_origin(exc)}; a pipeline should raise an exception rather than exit the process",
                 debug=debug)
        except Exception as exc:  # an internal error: one line, the traceback only with --debug
            fail("", internal=exc, debug=debug)
        sys.exit(code)

    return wrapper


class _ExitShield:
    """A pipeline whose methods raise `PipelineExit` where the user's code calls `sys.exit()`.

    `SystemExit` is not an `Exception`: it would pass every `except Exception` of the doctor and
    leak the pipeline's exit code as signalchain's. Turned into an exception (keeping the user's
    frames in its traceback), it becomes the `pipeline.step_failed` finding any crash of the
    pipeline becomes, and the other families go on.
    """

    def __init__(self, pipeline: Pipeline):
        object.__setattr__(self, "_inner", pipeline)

    def __getattr__(self, name: str) -> Any:
        value = getattr(object.__getattribute__(self, "_inner"), name)
        if not inspect.isroutine(value):
            return value

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            except SystemExit as exc:
                err = PipelineExit(f"the pipeline's {name}() called sys.exit({exc.code!r})", code=exc.code)
                raise err.with_traceback(exc.__traceback__) from None

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_inner"), name, value)

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_inner"))


def shield_exits(pipeline: Pipeline) -> Pipeline:
    """`pipeline` with every method's `sys.exit()` turned into a `PipelineExit` exception."""
    return _ExitShield(pipeline)


@dataclass(frozen=True)
class Resolved:
    """A loaded pipeline, its spec (as loaded, recorded in JSON and goldens), as a person named it, and
    where the name came from: "the command line", the project configuration's file, or "the default"."""

    pipeline: Pipeline
    spec: str
    shown: str
    source: str

    @property
    def line(self) -> str:
        """'pipeline train/debug.py:pipeline (from pyproject.toml [tool.signalchain])'."""
        return f"pipeline {self.shown} (from {self.source})"

    @property
    def record(self) -> dict[str, str]:
        return {"spec": self.spec, "source": self.source}


def resolve(spec: str | None = None, faults: Sequence[str] = (), hf_musicgen: str | None = None,
            data: Sequence[str] = (), hf_set: Sequence[str] = (), *, project: bool = True,
            default: bool = True) -> Resolved | None:
    """The pipeline a command runs: the one named on the command line, else the project configuration's
    (`[tool.signalchain]`, see `_project.py`; never a golden's), else the bundled reference pipeline
    (None instead when `default` is False: the caller has its own rule, or none)."""
    source = "the command line"
    if spec is None and hf_musicgen is None and project:
        from ._project import project_config

        cfg = project_config()
        if cfg is not None and cfg.hf_musicgen is not None:
            source = cfg.where + (" and the command line" if data or hf_set else "")
            hf_musicgen, data, hf_set = cfg.hf_musicgen, list(data or cfg.data), [*cfg.hf_set, *hf_set]
            pipe, loaded = _load(None, faults, hf_musicgen, data, hf_set)
            return Resolved(pipe, loaded, f"--hf-musicgen {_relative(hf_musicgen)}", source)
        elif cfg is not None and cfg.pipeline_spec is not None and not (data or hf_set):
            target = cfg.pipeline_spec.rsplit(":", 1)[0]
            if not target.endswith(".py") and str(cfg.path.parent) not in sys.path:
                sys.path.append(str(cfg.path.parent))  # a module of the project, beside its configuration
            pipe, loaded = _load(cfg.pipeline_spec, faults, None, (), ())
            return Resolved(pipe, loaded, str(cfg.pipeline), cfg.where)
    if spec is None and hf_musicgen is None and not (data or hf_set):
        if not default:
            return None
        source = "the default"
    pipe, loaded = _load(spec, faults, hf_musicgen, data, hf_set)
    return Resolved(pipe, loaded, loaded, source)


def _relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


def resolve_pipeline(spec: str | None, faults: Sequence[str] = (), hf_musicgen: str | None = None,
                     data: Sequence[str] = (), hf_set: Sequence[str] = (), *, project: bool = True
                     ) -> tuple[Pipeline, str]:
    """(pipeline, spec) as `resolve` finds them (the project's configuration first when nothing is named)."""
    r = resolve(spec, faults, hf_musicgen, data, hf_set, project=project)
    assert r is not None
    return r.pipeline, r.spec


def _load(spec: str | None, faults: Sequence[str] = (), hf_musicgen: str | None = None,
          data: Sequence[str] = (), hf_set: Sequence[str] = ()) -> tuple[Pipeline, str]:
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
        try:
            pipeline = load_pipeline(spec)
        except SystemExit as exc:  # a module that runs a script when imported (argparse, sys.exit)
            raise UsageError(f"importing pipeline {spec!r} called sys.exit({exc.code!r}){exit_origin(exc)}; a pipeline "
                             "module must not exit when imported (put script code under "
                             "`if __name__ == '__main__':`)") from None
    if faults:
        if "with_faults" not in capabilities(pipeline):
            raise UsageError(
                f"--fault needs a pipeline with with_faults(names), such as the reference pipeline; {spec!r} has none"
            )
        try:
            pipeline = pipeline.with_faults(list(faults))
        except SystemExit as exc:
            raise UsageError(f"pipeline {spec!r}: with_faults({list(faults)}) called sys.exit({exc.code!r})"
                             f"{exit_origin(exc)}") from None
    return pipeline, spec


def emit(con: Console, findings: Sequence[Finding], *, json_path: str | None, html_path: str | None,
         fields: Mapping[str, Any] | None = None, page: Callable[[], HtmlReport] | None = None,
         title: str | None = None, show: Sequence[Any] = (), rendering: str | None = None,
         code: int | None = None) -> int:
    """The tail every command ends with; returns its exit code.

    In order: the findings table under `title` (none when `title` is None), then each of `show`
    printed (a `Text` made with `no_wrap=True` as one line, never wrapped: a command to copy); the
    JSON report (`findings` and `fields`) to --json; the page `page()` builds to --html, under a
    status line `rendering` when given, and where it went; the exit code is `code` when given, else 1
    when any finding is an error (DESIGN §5).
    """
    from rich.table import Table
    from rich.text import Text

    from ..report import print_findings, write_json
    from ..report.progress import Reporter
    from ..report.terminal import keep_words

    if title is not None:
        print_findings(findings, con, title=title)
    for item in show:
        if isinstance(item, Text) and item.no_wrap:  # a command to copy: one line, whatever the width
            con.print(item, soft_wrap=True)
            continue
        con.print(keep_words(item, con.width) if isinstance(item, Table) else item)
    if json_path:
        write_json(json_path, findings, **dict(fields or {}))
    if html_path and page is not None:
        ctx = click.get_current_context(silent=True)
        with Reporter(ctx.info_name if ctx and ctx.info_name else "signalchain") as rep:  # pictures take a while
            rep.say(rendering.rstrip("…") if rendering else f"writing the HTML report {html_path}")
            page().write(html_path)
        con.print(f"report: {html_path}")
    return exit_code(findings) if code is None else code
