"""What a golden batch's manifest.json may hold, checked before anything reads its contents.

The manifest is untrusted data. It is parsed as strict JSON (no NaN, no duplicate keys, bounded
nesting, text UTF-8 can encode), its own checksum is verified (sha256 of its canonical JSON without
the checksum field), and its structure is validated by pydantic in strict mode (no bool for an
int, no string for a number). Every violation becomes a `GoldenFileError` that names the file, the
field and what was expected.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import GoldenFileError

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "CHECKSUM_FIELD",
    "MAX_MANIFEST_BYTES",
    "MAX_DEPTH",
    "Manifest",
    "StageEntry",
    "canonical_json",
    "manifest_checksum",
    "seal",
    "parse_manifest",
    "validate_manifest",
]

SCHEMA = "signalchain.golden"
#: 2: the manifest carries `manifest_sha256`, a checksum of itself. Version 1 had none.
SCHEMA_VERSION = 2
CHECKSUM_FIELD = "manifest_sha256"
MAX_MANIFEST_BYTES = 64 << 20
#: Deeper than any stage value a pipeline taps in practice, far below Python's recursion limit.
MAX_DEPTH = 64
_KINDS = ("tensor", "audio", "text", "json", "scalar")

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0, le=1 << 62)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class WavRef(_Strict):
    path: Annotated[str, Field(min_length=1, max_length=300)]
    segments: list[Annotated[list[Count], Field(min_length=2, max_length=2)]]


class RenderedRef(_Strict):
    """The rendering of a notes stage, for listening (`rendered.py`): where it lies and what made it."""

    path: Annotated[str, Field(min_length=1, max_length=300)]
    segments: list[Annotated[list[Count], Field(min_length=2, max_length=2)]]
    sample_rate: Annotated[int, Field(gt=0, le=1 << 31)]
    renderer: Annotated[str, Field(max_length=1000)]


class StageMeta(BaseModel):
    """Tap metadata: free JSON, except the keys signalchain itself reads back."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    sample_rate: Annotated[float, Field(gt=0, le=1 << 31)] | None = None  # strict float takes ints, not bools
    cardinality: Annotated[int, Field(gt=0, le=1 << 31)] | None = None
    lengths: list[Count] | None = None
    wav: WavRef | None = None
    rendered: RenderedRef | None = None


class SafetensorsValue(_Strict):
    storage: Literal["safetensors"]
    key: str
    sha256: Sha256


class InlineValue(_Strict):
    storage: Literal["inline"]
    data: Any
    sha256: Sha256


class StageEntry(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    order: Count
    kind: Literal[_KINDS]  # type: ignore[valid-type]
    dtype: Annotated[str, Field(pattern=r"^[A-Za-z0-9_]{1,32}$")]
    shape: Annotated[list[Count], Field(max_length=32)]
    device: Annotated[str, Field(max_length=64)]
    summary: dict[str, Any]
    meta: StageMeta
    value: Annotated[SafetensorsValue | InlineValue, Field(discriminator="storage")]


class Provenance(BaseModel):
    """Where the golden came from: free JSON, except the keys `compare` acts on."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    seed: Annotated[int, Field(ge=0, lt=1 << 32)] | None = None
    pipeline: str | None = None
    pipeline_spec: Annotated[str, Field(max_length=1000)] | None = None
    faults: list[str] = []


class Manifest(_Strict):
    schema_: Literal["signalchain.golden"] = Field(alias="schema")
    schema_version: Literal[2]
    manifest_sha256: Sha256
    provenance: Provenance
    files: dict[str, Sha256]
    stages: Annotated[list[StageEntry], Field(max_length=100_000)]
    problems: list[dict[str, Any]]


def canonical_json(obj: Any) -> bytes:
    """The one byte form a manifest's checksum is taken over: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON without its checksum field."""
    body = {k: v for k, v in manifest.items() if k != CHECKSUM_FIELD}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def seal(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its self-checksum set."""
    return {**manifest, CHECKSUM_FIELD: manifest_checksum(manifest)}


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_loads(raw: bytes) -> Any:
    """UTF-8 strict JSON: no NaN/Infinity, a key twice in one object is `_DuplicateKey` (a ValueError)."""
    return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _check_tree(root: Any, mpath: Path) -> None:
    """Bounded depth, finite numbers, text UTF-8 can encode; iterative, so depth cannot crash it."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if len(loc) > MAX_DEPTH:
            raise GoldenFileError(f"{mpath}: field {_where(loc[:8])}… nests deeper than {MAX_DEPTH} levels; "
                                  "a golden manifest is never that deep: the file is damaged or crafted")
        if isinstance(node, dict):
            for key, value in node.items():
                _check_text(key, loc + (key,), mpath)
                stack.append((value, loc + (key,)))
        elif isinstance(node, list):
            stack.extend((value, loc + (i,)) for i, value in enumerate(node))
        elif isinstance(node, str):
            _check_text(node, loc, mpath)
        elif isinstance(node, float) and not math.isfinite(node):
            raise GoldenFileError(f"{mpath}: field {_where(loc)} is {node!r}, not a finite number "
                                  "(the manifest is strict JSON)")


def _check_text(text: str, loc: tuple[Any, ...], mpath: Path) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise GoldenFileError(f"{mpath}: field {_where(loc)} holds a lone surrogate ({_short(text)}), "
                              "not text UTF-8 can encode: the file is damaged or crafted") from None


def parse_manifest(raw: bytes, mpath: Path) -> dict[str, Any]:
    """Strict JSON → a manifest dict of the supported schema whose self-checksum holds."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise GoldenFileError(f"{mpath}: is {len(raw)} bytes, more than a golden manifest may hold "
                              f"({MAX_MANIFEST_BYTES}); it is not a signalchain manifest")
    try:
        obj = strict_loads(raw)
    except _DuplicateKey as exc:
        raise GoldenFileError(
            f"{mpath}: is not valid JSON (key {str(exc)!r} appears twice in one object); "
            "the file is damaged or was edited"
        ) from None
    except UnicodeError as exc:
        raise GoldenFileError(
            f"{mpath}: is not valid JSON (not UTF-8: {exc}); the file is damaged or truncated"
        ) from None
    except RecursionError:
        raise GoldenFileError(
            f"{mpath}: is not valid JSON (nested too deeply to read); the file is damaged or crafted"
        ) from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, an integer past Python's digit limit
        raise GoldenFileError(f"{mpath}: is not valid JSON ({exc}); the file is damaged or truncated") from None
    if not isinstance(obj, dict):
        raise GoldenFileError(f"{mpath}: is not a signalchain golden manifest (a JSON {type(obj).__name__}, "
                              "expected an object)")
    _check_tree(obj, mpath)
    schema, version = obj.get("schema"), obj.get("schema_version")
    if schema != SCHEMA:
        raise GoldenFileError(f"{mpath}: is not a signalchain golden manifest (schema {_short(schema)}, "
                              f"expected {SCHEMA!r})")
    if type(version) is not int:
        raise GoldenFileError(f"{mpath}: field schema_version is {_short(version)}; expected an integer "
                              f"({SCHEMA_VERSION})")
    if version == 1:
        raise GoldenFileError(f"{mpath}: schema version 1 was written by an older signalchain, before "
                              "manifests carried their own checksum, so it cannot be verified; re-capture "
                              f"it with `signalchain capture --out {mpath.parent}`")
    if version != SCHEMA_VERSION:
        raise GoldenFileError(f"{mpath}: schema version {version} is not supported (this signalchain reads "
                              f"{SCHEMA_VERSION}); recapture it or use the signalchain that wrote it")
    recorded = obj.get(CHECKSUM_FIELD)
    if not isinstance(recorded, str):
        raise GoldenFileError(f"{mpath}: lacks its self-checksum {CHECKSUM_FIELD!r}; "
                              "refused as tampered - re-capture the golden")
    actual = manifest_checksum(obj)
    if actual != recorded:
        raise GoldenFileError(f"{mpath}: was changed after capture (its sha256 {actual[:12]}… does not match "
                              f"its recorded {CHECKSUM_FIELD} {recorded[:12]}…); a hand-edited manifest is "
                              "refused as tampering - re-capture the golden")
    return obj


def validate_manifest(obj: dict[str, Any], mpath: Path) -> Manifest:
    """The structure, strictly typed; the first violation names its field and what was expected."""
    try:
        return Manifest.model_validate(obj, strict=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        got = f"; got {_short(first['input'])}" if first.get("type") != "missing" else ""
        raise GoldenFileError(f"{mpath}: field {_where(tuple(first['loc']))}: {first['msg']}{got}{more}") from None
    except RecursionError:
        raise GoldenFileError(f"{mpath}: nested too deeply to validate; the file is damaged or crafted") from None
