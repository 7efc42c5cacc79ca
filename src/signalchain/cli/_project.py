"""The project configuration: `[tool.signalchain]` in the user's `pyproject.toml`, or `signalchain.toml`.

    [tool.signalchain]                       # signalchain.toml: the same keys, at top level
    pipeline = "train/debug.py:pipeline"     # or: hf_musicgen = "models/musicgen" + data = ["data/train"]
    seed = 0                                 # defaults of the commands that take them
    budget = "economy"
    out = "golden/"

Found by walking up from the current folder to the first `signalchain.toml`, or `pyproject.toml` with
a `[tool.signalchain]` table (in one folder, `signalchain.toml` comes first); the walk stops at the
folder holding `.git` (the top of the project) or at the root. Paths in it are relative to the file's
folder. An explicit argument always wins over it, and a golden never names code to run (DESIGN §5).
A bad key or type is a `UsageError` naming the file and the key (one line, exit 2).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

__all__ = ["ProjectConfig", "find_config", "load_config", "project_config", "option_or_config", "KEYS"]

#: The keys a configuration may hold.
KEYS = ("pipeline", "hf_musicgen", "data", "hf_set", "seed", "budget", "out")
_MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class ProjectConfig:
    """One project's settings, paths already made absolute against the file's folder."""

    path: Path  # the file it came from
    pipeline: str | None = None  # as written (for messages)
    pipeline_spec: str | None = None  # as loaded: a file path made absolute
    hf_musicgen: str | None = None
    data: tuple[str, ...] = ()
    hf_set: tuple[str, ...] = ()  # KEY=VALUE, as --hf-set takes them
    seed: int | None = None
    budget: str | None = None
    out: str | None = None

    @property
    def where(self) -> str:
        """'pyproject.toml [tool.signalchain]' or 'signalchain.toml', as a person names it."""
        name = _shown(self.path)
        return f"{name} [tool.signalchain]" if self.path.name == "pyproject.toml" else name

    @property
    def has_pipeline(self) -> bool:
        return self.pipeline is not None or self.hf_musicgen is not None


def _shown(path: Path) -> str:
    """The path relative to the current folder (`../pyproject.toml` from a subfolder)."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


def _toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise UsageError(f"{path}: reading the project configuration needs Python 3.11 or `pip install tomli`"
                             ) from None
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _table(path: Path) -> dict[str, Any] | None:
    """The settings `path` holds for signalchain, or None when it holds none."""
    doc = _toml(path)
    if path.name == "signalchain.toml":
        return doc
    tool = doc.get("tool")
    table = tool.get("signalchain") if isinstance(tool, dict) else None
    if table is not None and not isinstance(table, dict):
        raise UsageError(f"{path}: tool.signalchain must be a table ([tool.signalchain]), not a "
                         f"{type(table).__name__}")
    return table


def find_config(start: str | Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The first file above `start` (default: the current folder) that configures signalchain, and its
    table; None when there is none before the project's top (.git) or the root."""
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        for name in ("signalchain.toml", "pyproject.toml"):
            path = folder / name
            if path.is_file():
                table = _table(path)
                if table is not None:
                    return path, table
        if (folder / ".git").exists():
            return None
    return None


def _bad(path: Path, prefix: str, key: str, why: str) -> UsageError:
    return UsageError(f"{path}: {prefix}{key}: {why}")


def _is_path_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def load_config(path: Path, table: dict[str, Any]) -> ProjectConfig:
    """Validate `table` (read from `path`) into a `ProjectConfig`; a bad key or value is a UsageError."""
    from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

    from ..experiments.context import BUDGETS

    prefix = "[tool.signalchain] " if path.name == "pyproject.toml" else ""
    unknown = [k for k in table if k not in KEYS]
    if unknown:
        near = difflib.get_close_matches(unknown[0], KEYS, n=1)
        raise _bad(path, prefix, unknown[0], "unknown key" + (f" (did you mean {near[0]!r}?)" if near else "")
                   + f"; the keys are {', '.join(KEYS)}")

    class Model(BaseModel):
        model_config = ConfigDict(strict=True, extra="forbid")
        pipeline: str | None = None
        hf_musicgen: str | None = None
        data: str | list[str] = []
        hf_set: dict[str, str | int | float | bool] | list[str] = {}
        seed: int | None = None
        budget: str | None = None
        out: str | None = None

        @field_validator("seed")
        @classmethod
        def _seed(cls, v: int | None) -> int | None:
            if v is not None and not 0 <= v <= _MAX_SEED:
                raise ValueError(f"{v} is not a seed: give an integer from 0 to {_MAX_SEED}")
            return v

        @field_validator("budget")
        @classmethod
        def _budget(cls, v: str | None) -> str | None:
            if v is not None and v not in BUDGETS:
                raise ValueError(f"{v!r} is not a budget: one of {', '.join(BUDGETS)}")
            return v

    try:
        m = Model.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"][:1]) or "?"
        msg = err["msg"].removeprefix("Value error, ")
        raise _bad(path, prefix, key, f"{msg} (got {err.get('input')!r})") from None
    folder = path.parent
    if m.pipeline is not None and m.hf_musicgen is not None:
        raise _bad(path, prefix, "pipeline", "give either pipeline or hf_musicgen, not both")
    data = [m.data] if isinstance(m.data, str) else list(m.data)
    hf_set = list(m.hf_set) if isinstance(m.hf_set, list) else [
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in m.hf_set.items()]
    if m.hf_musicgen is None and (data or hf_set):
        raise _bad(path, prefix, "data" if data else "hf_set", "goes with hf_musicgen = \"MODEL_DIR\"")
    if m.hf_musicgen is not None and not data:
        raise _bad(path, prefix, "hf_musicgen", "needs data = [\"DATA\", …]: an audiofolder, an AudioCraft "
                   "manifest or a folder of audio")
    if hf_set:
        from ..integrations.hf_musicgen.load import parse_settings

        try:
            parse_settings(hf_set)
        except UsageError as exc:
            raise _bad(path, prefix, "hf_set", str(exc).removeprefix("--hf-set ")) from None
    spec = m.pipeline
    if spec is not None:
        if ":" not in spec:
            raise _bad(path, prefix, "pipeline", f"{spec!r} has no ':attr'; name it as path/to/file.py:attr or "
                       "package.module:attr")
        target, attr = spec.rsplit(":", 1)
        if _is_path_spec(target):
            spec = f"{(folder / Path(target).expanduser()).resolve()}:{attr}"
    return ProjectConfig(
        path=path, pipeline=m.pipeline, pipeline_spec=spec,
        hf_musicgen=str((folder / m.hf_musicgen).resolve()) if m.hf_musicgen is not None else None,
        data=tuple(str((folder / d).resolve()) for d in data), hf_set=tuple(hf_set), seed=m.seed,
        budget=m.budget, out=str(folder / m.out) if m.out is not None else None)


def project_config(start: str | Path | None = None) -> ProjectConfig | None:
    """The current project's configuration, validated; None when the project has none."""
    found = find_config(start)
    return load_config(*found) if found is not None else None


def option_or_config(param: str, value: Any, key: str | None = None) -> Any:
    """`value` of the current command's option `param`, or the project configuration's `key` (default:
    the same name) when the option was left at its default: an explicit option wins."""
    import click
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source(param) not in (ParameterSource.DEFAULT, None):
        return value
    cfg = project_config()
    configured = getattr(cfg, key or param, None) if cfg is not None else None
    return value if configured is None else configured
