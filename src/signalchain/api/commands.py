"""`doctor`, `audit`, `listen`, `compare`, `capture`: the commands as Python functions (DESIGN §5).

Each runs what its command runs, with the same internals, and returns a `Report` (`results.py`)
instead of printing a table and exiting: `.findings`, `.ok`, `.to_json()`, `.to_html(path)` and a
readable `str()`. A bad argument raises `UsageError` (the command line's exit 2) with the same
one-line message; a pipeline that cannot be loaded raises `PipelineError`.

A pipeline is an object with the `Pipeline` protocol, or a spec as on the command line:
"path/to/file.py:attr", "package.module:attr" or a bundled bed ("reference", "hf-bed",
"symbolic-bed"); None is the bundled reference pipeline.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PipelineError, UsageError
from ..golden import Golden, Tolerance
from ..pipeline import validate_pipeline
from .results import AuditReport, CaptureReport, CompareReport, DoctorReport, ListenReport

if TYPE_CHECKING:
    from ..audit.run import Progress as AuditProgress
    from ..experiments.context import Budget
    from ..pipeline import Pipeline

__all__ = ["doctor", "audit", "listen", "compare", "capture", "history"]

PipelineLike = Any  # a Pipeline object, a spec string, or None (the reference pipeline)
_MAX_SEED = 2**32 - 1  # numpy's seeds stop here


def _names(value: str | Iterable[str] | None, what: str) -> list[str]:
    """A name or names as a list (a lone string is one name, not its letters)."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    try:
        return [os.fspath(v) for v in value]
    except TypeError:
        raise UsageError(f"{what} must be a string or a list of strings, got {value!r}") from None


def _seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
        raise UsageError(f"seed {seed!r} is not a seed: give an integer from 0 to {_MAX_SEED}")
    return seed


def _load(pipeline: PipelineLike, faults: Iterable[str] = ()) -> tuple[Pipeline, str]:
    """The pipeline to run and the spec that names it (the command line's resolution for a string)."""
    pipe, spec, _ = _resolved(pipeline, faults)
    return pipe, spec


def _resolved(pipeline: PipelineLike, faults: Iterable[str] = ()) -> tuple[Pipeline, str, str]:
    """`_load` and where the pipeline came from: as the command line resolves it (a spec, else the
    project's [tool.signalchain], else the reference), or "the caller" for an object."""
    from ..cli._common import resolve
    from ..cli.golden_cmds import inject_faults

    if pipeline is None or isinstance(pipeline, str):
        chosen = resolve(pipeline)
        assert chosen is not None
        pipe, spec, source = chosen.pipeline, chosen.spec, chosen.source
    else:
        pipe = validate_pipeline(pipeline, "the pipeline argument")
        # an object is no code anyone could re-run from a golden: a spec that says so, never a module path
        spec, source = f"<{type(pipe).__name__} object {getattr(pipe, 'name', '?')!r}>", "the caller"
    return inject_faults(pipe, spec, _names(faults, "faults")), spec, source


def doctor(pipeline: PipelineLike = None, *, symptom: str | None = None, families: str | Iterable[str] = (),
           seed: int = 0, budget: str | Budget = "business", faults: str | Iterable[str] = (),
           progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Diagnose a pipeline: run the families of experiments and checks, as `signalchain doctor` does.

    Args:
        pipeline: a `Pipeline` object, or a spec ("train/debug.py:pipeline", "pkg.mod:attr", "hf-bed");
            None is the project's [tool.signalchain] pipeline, else the bundled reference pipeline.
        symptom: what you observe ("flat-loss", "unstable", "nan", "silent", "repetitive",
            "ignores-caption", "too-good-validation", "slow"); selects the families worth running.
        families: a family name or names ("data", "optimisation", …); with `symptom`, both are run.
            Neither: every family.
        seed: the seed of the golden batch and the models built.
        budget: "economy", "business" or "full": how many steps the experiments may take.
        faults: catalogue faults to inject (pipelines with `with_faults`, such as the reference one).
        progress: called with a short description as each family and step starts.

    Returns:
        A `DoctorReport`; `report.ok` is False when any finding is an error.
    """
    from ..cli._common import shield_exits
    from ..experiments.context import BUDGETS
    from ..experiments.doctor import run_doctor, select_families
    from ..pipeline import ProtocolView
    from ..report import render_doctor
    from ..report.doctor_page import strip_audio

    names = _names(families, "families")
    select_families(names, symptom)  # a bad name fails before anything slow runs
    if isinstance(budget, str) and budget not in BUDGETS:
        raise UsageError(f"unknown budget {budget!r}; allowed: {', '.join(BUDGETS)}")
    _seed(seed)
    pipe, spec, source = _resolved(pipeline, faults)
    # shield_exits: a sys.exit() in the pipeline's code is its crash (pipeline.step_failed), as on the command line
    result = run_doctor(ProtocolView(shield_exits(pipe)), names, symptom, seed=seed, budget=budget, progress=progress)
    fields = dict(pipeline=spec, pipeline_source=source, families=result.families, unavailable=result.unavailable,
                  seconds=round(result.seconds, 2), timings=result.timings, metrics=strip_audio(result.metrics))

    def page() -> Any:
        return render_doctor(result.findings, result.metrics, result.families, result.unavailable, result.timings,
                             pipe.name)

    return DoctorReport(result, pipeline=spec, name=pipe.name, fields=fields, page=page)


def _splits(splits: Mapping[str, str] | Iterable[str] | None) -> list[tuple[str, str]]:
    from ..cli.audit_cmd import _parse_splits

    if splits is None:
        return []
    if isinstance(splits, Mapping):
        splits = [f"{name}={os.fspath(path)}" for name, path in splits.items()]
    return _parse_splits(tuple(_names(splits, "splits")))


def audit(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (), *,
          splits: Mapping[str, str] | Iterable[str] | None = None, workers: int = 1,
          max_caption_tokens: int | None = None, stats: str | None = None, sampler: str | None = None,
          cache: bool | str | os.PathLike[str] = True, progress: AuditProgress | None = None,
          engine: str = "local", address: str | None = None, retries: int | None = None,
          file_timeout: float | None = None) -> AuditReport:
    """Audit datasets and their splits without a model, as `signalchain audit` does.

    Args:
        paths: a manifest (.jsonl, .jsonl.gz), an audiofolder or a folder, or several; a folder holding
            train/, valid/, test/ is audited as those splits. MIDI files get the MIDI audit.
        splits: named splits, {"train": PATH, "valid": PATH} (or ["train=PATH", …]), checked against each other.
        workers: processes decoding and fingerprinting.
        max_caption_tokens: flag captions longer than this tokenizer limit.
        stats: the normalisation statistics file the pipeline uses (JSON/safetensors/npz with mean, std).
        sampler: the training sampler's indices or example ids (JSON, .txt, .npy).
        cache: True: the fingerprint cache the command line uses; False: a temporary one; or its path.
        progress: a `signalchain.audit.run.Progress` told the count and each batch measured.
        engine: "local" (worker processes) or "ray" (Ray tasks; the same findings).
        address: with engine="ray", the cluster to join (default $RAY_ADDRESS, else a local Ray of `workers` CPUs).
        retries: a file whose worker (a Ray task, or a process when workers ≥ 2) dies 1 + retries times
            measuring it alone (default 2) is one `file.lost` finding.
        file_timeout: with engine="ray", a file measured for longer (seconds, default 300) is `file.lost`.

    Returns:
        An `AuditReport`. A path with nothing to audit raises `UsageError`, as on the command line.
    """
    from ..audit.cache import default_cache_path
    from ..audit.midi_read import is_midi_dataset
    from ..audit.midi_run import run_midi_audit
    from ..audit.run import run_audit
    from ..cli.audit_cmd import _listen
    from ..report.audit_page import render_audit

    where, named = _names(paths, "paths"), _splits(splits)
    if not where and not named:
        raise UsageError("nothing to audit: give a path (manifest or folder) or splits={NAME: PATH}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"workers must be an integer ≥ 1, got {workers!r}")
    if max_caption_tokens is not None and max_caption_tokens < 1:
        raise UsageError(f"max_caption_tokens must be ≥ 1, got {max_caption_tokens}")
    if engine not in ("local", "ray"):
        raise UsageError(f"engine must be 'local' or 'ray', got {engine!r}")
    if engine != "ray" and (address or file_timeout is not None):
        raise UsageError("address= and file_timeout= apply to engine='ray'")
    midi = is_midi_dataset(where, named)
    if midi and engine == "ray":
        raise UsageError("engine='ray' audits audio datasets; a MIDI audit runs here (workers=)")
    if midi:
        for name, value in (("stats", stats), ("sampler", sampler)):
            if value:
                raise UsageError(f"{name}= applies to audio datasets; these are MIDI files")
        result = run_midi_audit(where, named, workers=workers, max_caption_tokens=max_caption_tokens,
                                progress=progress)
    else:
        cache_path = (default_cache_path() if cache is True else None) if isinstance(cache, bool) else os.fspath(cache)
        result = run_audit(where, named, workers=workers, max_caption_tokens=max_caption_tokens, stats_file=stats,
                           sampler_file=sampler, cache_path=cache_path, progress=progress, engine=engine,
                           address=address, retries=retries, file_timeout=file_timeout)
    if not result.files and not result.findings:  # a typo'd or empty folder must not pass for a clean one
        shown = ", ".join([*where, *(f"{k}={v}" for k, v in named)])
        raise UsageError(f"nothing to audit in {shown}: no audio files, manifest rows or MIDI files found there")
    fields: dict[str, Any] = dict(sources=result.sources, splits=result.splits, matches=result.matches,
                                  files=result.files, search=result.search)
    if not midi:
        fields["cache"] = result.cache
        fields["engine"] = result.engine
    fields["timings"] = result.timings
    return AuditReport(result, midi=midi, fields=fields,
                       page=lambda: render_audit(result.findings, result, [] if midi else _listen(result)))


def listen(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *, rate: int | None = None,
           subtype: str | None = None) -> ListenReport:
    """Check written audio files the way a player reads them, as `signalchain listen` does.

    Args:
        paths: audio files (WAV/FLAC/OGG/MP3…) or folders to search.
        rate: the sample rate the files should have (Hz).
        subtype: the subtype they should have ("PCM_16", "FLOAT", …).

    Returns:
        A `ListenReport`: level, silence, clipping, DC and channel phase per file, and the header's rate,
        subtype and format against what the data hold.
    """
    import soundfile as sf

    from ..audio._files import display_path
    from ..audio.fingerprint import MAX_RATE, MIN_RATE
    from ..audio.io import read_audio
    from ..audio.measure import measure_file
    from ..cli.listen_cmd import AUDIO_SUFFIXES, _collect, _judge
    from ..errors import SignalchainError
    from ..report.listen_page import render_listen

    where = tuple(_names(paths, "paths"))
    if not where:
        raise UsageError("nothing to listen to: give an audio file or a folder")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0):
        raise UsageError(f"rate must be a positive number of Hz, got {rate!r}")
    if subtype is not None:
        subtype = subtype.upper()
        if subtype not in sf.available_subtypes():
            raise UsageError(f"subtype {subtype!r} is not a soundfile subtype; allowed: "
                             f"{', '.join(sorted(sf.available_subtypes()))}")
    files, findings = _collect(where)
    if not files and not findings:
        raise UsageError(f"no audio files ({', '.join(sorted(AUDIO_SUFFIXES))}) under {', '.join(where)}")
    reports, real = [], {}  # real: shown name -> the path to open
    for path in files:
        rep = measure_file(path)
        rep.path = display_path(path)
        real[rep.path] = path
        reports.append(rep)
        findings += _judge(path, rep, rate, subtype)
    expected = "".join([f" · expected rate {rate} Hz" if rate else "",
                        f" · expected subtype {subtype}" if subtype else ""])

    def load(shown: str) -> Any:
        try:
            af = read_audio(real.get(shown, shown))
        except SignalchainError:
            return None
        return (af.audio, af.sample_rate) if MIN_RATE <= af.sample_rate <= MAX_RATE else None

    fields = dict(files=[vars(r) for r in reports], expected_rate=rate, expected_subtype=subtype)
    return ListenReport(findings, reports, expected_rate=rate, expected_subtype=subtype, fields=fields,
                        page=lambda: render_listen(reports, findings, load, expected))


def _tolerances(tolerances: Mapping[str, Any] | None) -> list[str]:
    """{stage: Tolerance | (rtol, atol) | rtol} as the command line's STAGE=RTOL[,ATOL] items."""
    out = []
    for stage, tol in (tolerances or {}).items():
        if isinstance(tol, Tolerance):
            tol = (tol.rtol, tol.atol)
        parts = tol if isinstance(tol, (tuple, list)) else (tol,)
        if not 1 <= len(parts) <= 2 or not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in parts):
            raise UsageError(f"tolerance for stage {stage!r} is {tol!r}: give rtol, (rtol, atol) or a Tolerance")
        out.append(f"{stage}={','.join(repr(float(p)) for p in parts)}")
    return out


def _own_words(text: str) -> str:
    """A message of the command line about its --pipeline option, said of this function's argument."""
    return text.replace("--pipeline SPEC", "pipeline=SPEC").replace("--pipeline", "the pipeline argument")


def compare(golden: str | os.PathLike[str] | Golden, pipeline: PipelineLike = None, *,
            golden2: str | os.PathLike[str] | Golden | None = None, rtol: float = 1e-5, atol: float = 1e-6,
            tolerances: Mapping[str, Any] | None = None, faults: str | Iterable[str] = ()) -> CompareReport:
    """Compare a golden batch with a fresh run of a pipeline (or with `golden2`), as `signalchain compare` does.

    Args:
        golden: the golden's folder (or a loaded `Golden`).
        pipeline: what to re-run: a `Pipeline` object or a spec; None: the golden manifest's spec when it
            is an importable module (a golden is data, never code: a file path needs `pipeline=`).
        golden2: a second golden to compare with instead of a re-run.
        rtol, atol: the float tolerances; `tolerances` per stage: {"logits": (1e-3, 1e-5)}.
        faults: catalogue faults to inject into the re-run pipeline.

    Returns:
        A `CompareReport`: `report.comparison` stage by stage; `str(report)` names the first divergent
        stage with its numbers; `report.ok` is False when the traces diverge.
    """
    from rich.console import Console

    from ..checks.golden import divergence_findings
    from ..cli.golden_cmds import _rerun, parse_stage_tolerances
    from ..experiments.capture import run_golden
    from ..golden import compare_traces, load_golden
    from ..report import render_compare

    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{name} {value!r} is not a tolerance: give a finite number >= 0 (e.g. 1e-5)")
    fault_names = _names(faults, "faults")
    if golden2 is not None and (pipeline is not None or fault_names):
        raise UsageError("give either golden2 or a pipeline/faults to re-run, not both")
    g = golden if isinstance(golden, Golden) else load_golden(golden)
    per_stage = parse_stage_tolerances(_tolerances(tolerances), g.trace, atol)
    ran: dict[str, Any] = {}
    notes: list[str] = []
    if golden2 is not None:
        other = golden2 if isinstance(golden2, Golden) else load_golden(golden2)
        new_trace, label = other.trace, str(other.path if isinstance(golden2, Golden) else golden2)
    else:
        try:
            if pipeline is None or isinstance(pipeline, str):  # the command line's choice and its notes, kept quiet
                said = Console(file=io.StringIO(), width=10_000)
                try:
                    new_trace, label, ran = _rerun(g, pipeline, tuple(fault_names), said)
                except UsageError as exc:  # the command line's option is this function's argument
                    raise UsageError(_own_words(str(exc))) from None
                notes = [_own_words(line.strip()) for line in said.file.getvalue().splitlines() if line.strip()]
                ran["source"] = _own_words(ran.get("source", ""))
            else:
                pipe, spec = _load(pipeline, fault_names)
                seed = int(g.provenance.get("seed") or 0)
                new_trace = run_golden(pipe, seed).trace
                label = f"{pipe.name} now" + (f" with faults {', '.join(fault_names)}" if fault_names else "")
                ran = {"spec": spec, "source": "the pipeline argument", "seed": seed}
                notes = [f"re-ran pipeline {spec} (from the pipeline argument) on the golden batch, seed {seed}"]
        except SystemExit as exc:  # a pipeline that exits must not pass for a clean comparison
            raise PipelineError(f"the pipeline exited (SystemExit {exc.code!r}) instead of running; "
                                "no comparison was made") from None
    comparison = compare_traces(g.trace, new_trace, Tolerance(rtol, atol), per_stage)
    findings = divergence_findings(comparison)
    fields = dict(comparison=comparison.to_dict(), golden=str(g.path), new=label, pipeline=ran or None)
    return CompareReport(comparison, findings, golden=str(g.path), new=label, pipeline=ran or None, fields=fields,
                         notes=notes, page=lambda: render_compare(comparison, g.trace, new_trace, g.provenance,
                                                                  findings, label))


def capture(pipeline: PipelineLike, out: str | os.PathLike[str], *, seed: int = 0,
            faults: str | Iterable[str] = ()) -> CaptureReport:
    """Record a pipeline's golden batch with full values into the folder `out`, as `signalchain capture` does.

    `out` must be missing, empty or an existing golden (anything else is refused before the run).
    Returns a `CaptureReport`; `to_html` writes the inspect page of the saved golden.
    """
    from ..experiments.capture import run_golden
    from ..golden import check_target, collect_provenance, load_golden, save_golden
    from ..report import render_inspect

    _seed(seed)
    target = os.fspath(out)
    check_target(target)  # before the run: refuse to overwrite what is not a golden
    fault_names = _names(faults, "faults")
    pipe, spec, source = _resolved(pipeline, fault_names)
    run = run_golden(pipe, seed)
    path = save_golden(target, run.trace, collect_provenance(pipe, spec=spec, seed=seed, faults=fault_names))
    fields = dict(golden=str(path), pipeline={"spec": spec, "source": source}, stages=run.trace.to_dict()["stages"])
    return CaptureReport(run.trace, Path(path), name=pipe.name, fields=fields,
                         page=lambda: render_inspect(load_golden(path)))


def history(run: str | os.PathLike[str], *, golden: str | None = None, pipeline: str | None = None,
            format: str | None = None) -> Any:
    """Diagnose a finished or failed run from its logs and checkpoints (`signalchain history RUN`).

    `run` is an HF Trainer output folder, a TensorBoard log folder, a Lightning CSVLogger folder, a W&B
    history CSV or an AudioCraft experiment folder; `format` forces one (`signalchain.history.FORMATS`).
    Returns a `HistoryResult` with `.findings`, `.ok`, `.pair` (the checkpoints around the first bad
    step), `.bisect` (the `signalchain bisect --checkpoints` line), `.to_json()` and `.to_html()`.
    A path with no log raises `UsageError`, as on the command line.
    """
    from ..history import HistoryReadError
    from ..history.run import diagnose

    try:
        return diagnose(run, golden=golden, pipeline=pipeline, fmt=format)
    except HistoryReadError as exc:
        raise UsageError(str(exc)) from None
