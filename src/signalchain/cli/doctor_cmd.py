"""`signalchain doctor`: run the diagnosis families on a pipeline and report what is wrong where."""

from __future__ import annotations

import click

from ..experiments.context import BUDGETS
from ..experiments.doctor import SYMPTOMS, run_doctor, select_families
from ..pipeline import ProtocolView
from ..report import console, render_doctor
from ..report.doctor_page import strip_audio
from ..report.progress import Reporter
from ._common import common_options, emit, guarded, hf_options, resolve_pipeline, shield_exits
from .golden_cmds import fault_option, inject_faults

__all__ = ["doctor"]


@click.command()
@click.argument("pipeline", required=False)
@click.option("--family", "families", multiple=True, metavar="F", help="Run this family (repeatable); default: all.")
@click.option("--symptom", type=click.Choice(list(SYMPTOMS)), default=None,
              help="What you observe; selects the families worth running.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--budget", type=click.Choice(list(BUDGETS)), default="business", show_default=True,
              help="How many steps the experiments may take.")
@fault_option
@hf_options
@common_options()
@guarded
def doctor(pipeline: str | None, families: tuple[str, ...], symptom: str | None, seed: int, budget: str,
           faults: tuple[str, ...], hf_musicgen: str | None, data: tuple[str, ...], hf_set: tuple[str, ...],
           json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Diagnose PIPELINE (default: the reference pipeline; `hf-bed` for the bundled HF MusicGen bed;
    or --hf-musicgen MODEL_DIR --data DATA for a saved HF MusicGen and a dataset): run the families of experiments
    and checks (audio, data, numerics, optimisation, precision, conditioning, generation, output, splits), or
    those a --symptom selects, and report the earliest stage where something goes wrong."""
    con = console()
    names, _ = select_families(families, symptom)  # fail fast on a bad name
    pipe, spec = resolve_pipeline(pipeline, (), hf_musicgen, data, hf_set)
    pipe = inject_faults(pipe, spec, faults)  # an unknown fault is a usage error naming the catalogue
    with Reporter("doctor", total=len(names)) as rep:  # a bar on a terminal, timed lines in a log
        # shield_exits: a sys.exit() in the pipeline's code is its crash (pipeline.step_failed), not our exit code
        result = run_doctor(ProtocolView(shield_exits(pipe)), families, symptom, seed=seed, budget=budget,
                            progress=lambda what: rep.item(what) if what in names else rep.say(what))
    ran = (f"families run: {', '.join(result.families)} in {result.seconds:.1f} s"
           + (f"; not available yet: {', '.join(result.unavailable)}" if result.unavailable else ""))
    return emit(
        con,
        result.findings,
        title=f"doctor · {pipe.name} · {', '.join(result.families)}",
        show=[ran],
        json_path=json_path,
        fields=dict(
            pipeline=spec,
            families=result.families,
            unavailable=result.unavailable,
            seconds=round(result.seconds, 2),
            timings=result.timings,
            metrics=strip_audio(result.metrics),
        ),
        html_path=html_path,
        page=lambda: render_doctor(
            result.findings, result.metrics, result.families, result.unavailable, result.timings, pipe.name
        ),
    )
