"""`signalchain doctor`: run the diagnosis families on a pipeline and report what is wrong where."""

from __future__ import annotations

import click

from ..experiments.names import PRESETS, SYMPTOMS
from ..pipeline import ProtocolView
from ..report import console
from ..report.progress import Reporter
from ._clock import elapsed
from ._common import beds_epilog, common_options, emit, guarded, hf_options, resolve, shield_exits
from ._project import option_or_config
from .golden_cmds import fault_option, inject_faults

__all__ = ["doctor"]


def run_doctor(*args, **kwargs):  # type: ignore[no-untyped-def]
    """`experiments.doctor.run_doctor`, imported when a doctor runs (it brings torch): `--help` stays cheap."""
    from ..experiments.doctor import run_doctor as run

    return run(*args, **kwargs)


@click.command(epilog=beds_epilog())
@click.argument("pipeline", required=False)
@click.option("--family", "families", multiple=True, metavar="F", help="Run this family (repeatable); default: all.")
@click.option("--symptom", type=click.Choice(list(SYMPTOMS)), default=None,
              help="What you observe; selects the families worth running.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--budget", type=click.Choice(list(PRESETS)), default="business", show_default=True,
              help="How many steps the experiments may take.")
@fault_option
@hf_options
@common_options()
@guarded
def doctor(pipeline: str | None, families: tuple[str, ...], symptom: str | None, seed: int, budget: str,
           faults: tuple[str, ...], hf_musicgen: str | None, data: tuple[str, ...], hf_set: tuple[str, ...],
           json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Diagnose PIPELINE: run the families of experiments and checks, and report the earliest bad stage.

    PIPELINE defaults to the project's [tool.signalchain] pipeline, else the reference pipeline;
    `hf-bed` is the bundled HF MusicGen bed, and --hf-musicgen MODEL_DIR --data DATA a saved HF
    MusicGen with a dataset. The families are audio, data, numerics, optimisation, precision,
    conditioning, generation, output and splits, or those a --symptom selects."""
    from ..experiments.doctor import select_families
    from ..report import render_doctor
    from ..report.doctor_page import strip_audio

    con = console()
    names, _ = select_families(families, symptom)  # fail fast on a bad name
    seed, budget = option_or_config("seed", seed), option_or_config("budget", budget)
    chosen = resolve(pipeline, (), hf_musicgen, data, hf_set)
    assert chosen is not None
    spec = chosen.spec
    pipe = inject_faults(chosen.pipeline, spec, faults)  # an unknown fault is a usage error naming the catalogue
    con.print(chosen.line, markup=False)
    with Reporter("doctor", total=len(names)) as rep:  # a bar on a terminal, timed lines in a log
        # shield_exits: a sys.exit() in the pipeline's code is its crash (pipeline.step_failed), not our exit code
        result = run_doctor(ProtocolView(shield_exits(pipe)), families, symptom, seed=seed, budget=budget,
                            progress=lambda what: rep.item(what) if what in names else rep.say(what))
    ran = (f"families run: {', '.join(result.families)} in {elapsed():.1f} s"
           + (f"; not available yet: {', '.join(result.unavailable)}" if result.unavailable else ""))
    return emit(
        con,
        result.findings,
        title=f"doctor · {pipe.name} · {', '.join(result.families)}",
        show=[ran],
        json_path=json_path,
        fields=dict(
            pipeline=spec,
            pipeline_source=chosen.source,
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
