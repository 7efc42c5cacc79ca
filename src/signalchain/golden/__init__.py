"""Layer 2: golden batches on disk, provenance, and trace comparison."""

from ._swap import check_target
from .compare import Comparison, StageDiff, Tolerance, compare_records, compare_traces
from .provenance import collect_provenance, config_hash, git_state, package_versions
from .replay import load_manifest_pipeline, manifest_pipeline_spec
from .schema import manifest_checksum
from .store import SCHEMA, SCHEMA_VERSION, Golden, load_golden, save_golden, wav_name
from .tolerance_file import TOLERANCES, read_tolerances, write_tolerances
from .tolerances import EXACT, dtype_tolerance, resolve_tolerances, stage_tolerances, suggest_tolerances

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "EXACT",
    "TOLERANCES",
    "Comparison",
    "Golden",
    "StageDiff",
    "Tolerance",
    "check_target",
    "collect_provenance",
    "compare_records",
    "compare_traces",
    "config_hash",
    "dtype_tolerance",
    "git_state",
    "load_golden",
    "load_manifest_pipeline",
    "manifest_checksum",
    "manifest_pipeline_spec",
    "package_versions",
    "read_tolerances",
    "resolve_tolerances",
    "save_golden",
    "stage_tolerances",
    "suggest_tolerances",
    "wav_name",
    "write_tolerances",
]
