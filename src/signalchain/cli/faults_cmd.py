"""`signalchain faults`: score the fault catalogue (detected, localised) and the clean control."""

from __future__ import annotations

import click
from rich.table import Table

from ..errors import UsageError
from ..experiments.names import PRESETS
from ..pipeline import capabilities
from ..report import console
from ..report.progress import Reporter
from ._common import DEFAULT_PIPELINE, beds_epilog, common_options, emit, guarded, resolve_pipeline

__all__ = ["faults"]


def score_catalogue(*args, **kwargs):  # type: ignore[no-untyped-def]
    """`experiments.scoring.score_catalogue`, imported when a catalogue runs (torch): `--help` stays cheap."""
    from ..experiments.scoring import score_catalogue as score

    return score(*args, **kwargs)


def _rows_table(rows: list[dict], with_results: bool) -> Table:
    t = Table(title="fault catalogue" + (" · score" if with_results else ""))
    for col in ("fault", "group", "expected id @ stage") + (
        ("found", "detected", "localised") if with_results else ("cause",)
    ):
        t.add_column(col, overflow="fold")
    mark = {True: "[green]yes[/green]", False: "[red]no[/red]"}
    for r in rows:
        expected = f"{', '.join(r['expected_ids'])} @ {r['expected_stage']}"
        if with_results:
            t.add_row(
                r["name"],
                r["family"],
                expected,
                ", ".join(r["found_ids"]) or "—",
                mark[r["detected"]],
                mark[r["localised"]],
            )
        else:
            t.add_row(r["name"], r["family"], expected, r["cause"])
    return t


@click.command(epilog=beds_epilog())
@click.argument("pipeline", required=False)
@click.option("--group", "families", multiple=True, metavar="G",
              help="Only faults of this catalogue group (repeatable; `--list` shows each fault's group).")
@click.option("--family", "old_family", multiple=True, hidden=True)
@click.option("--fault", "names", multiple=True, metavar="NAME", help="Only this fault (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="Print the catalogue without running it.")
@click.option("--workers", type=int, default=None, help="Parallel processes (default: CPU count).")
@click.option("--seeds", default="0,1,2,3,4", show_default=True, help="Seeds of the clean control.")
@click.option("--budget", type=click.Choice(list(PRESETS)), default="business", show_default=True)
@click.option("--all-families", is_flag=True, help="Examine each fault with every family, not only its symptom's.")
@common_options()
@guarded
def faults(pipeline: str | None, families: tuple[str, ...], old_family: tuple[str, ...], names: tuple[str, ...],
           list_only: bool, workers: int | None, seeds: str, budget: str, all_families: bool,
           json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Run the fault catalogue of PIPELINE (default: the reference) through every family of checks.

    `--group` picks faults by their catalogue group (flat_loss, nonfinite, …); `--family`, on every
    other command, names a doctor family (data, numerics, …), a different vocabulary."""
    if old_family:
        raise UsageError(f"faults takes --group for catalogue groups (was --family): --group {old_family[0]}; "
                         "--family names doctor families on the other commands")
    con = console()
    pipe, spec = resolve_pipeline(pipeline, project=False)  # its own catalogue: never the project configuration
    if "fault_catalogue" not in capabilities(pipe):
        raise UsageError(
            f"{spec or DEFAULT_PIPELINE!r} has no fault_catalogue(); only pipelines with a catalogue can be scored"
        )
    from ..experiments.scoring import FaultRow
    from ..report import render_faults

    catalogue = pipe.fault_catalogue()
    known = {f["name"] for f in catalogue}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown fault {unknown[0]!r}; `signalchain faults --list` lists the {len(known)} faults")
    chosen = [f for f in catalogue if (not families or f["family"] in families) and (not names or f["name"] in names)]
    if families and not chosen:
        raise UsageError(f"no fault in groups {list(families)}; groups: {sorted({f['family'] for f in catalogue})}")
    if list_only:
        rows = [
            FaultRow(
                name=f["name"],
                family=f["family"],
                cause=f["cause"],
                expected_ids=list(f["expected_ids"]),
                expected_stage=f["expected_stage"],
                symptom=f.get("symptom"),
            ).to_dict(results=False)
            for f in chosen
        ]
        return emit(con, [], show=[_rows_table(rows, with_results=False)], json_path=json_path,
                    fields={"faults": rows}, html_path=None, code=0)
    try:
        control_seeds = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds {seeds!r} is not a comma-separated list of integers") from None
    with Reporter("faults", total=len(chosen) + len(control_seeds)) as rep:  # a bar, or timed lines in a log
        rep.say(f"{len(chosen)} faults and {len(control_seeds)} clean seeds")
        score = score_catalogue(spec, chosen, control_seeds, workers, budget, by_symptom=not all_families,
                                progress=lambda what: rep.advance(1, what))
    result = score.to_dict()
    s = result["summary"]
    lines = [
        _rows_table(result["faults"], with_results=True),
        f"detected {s['detected']}/{s['faults']} · localised {s['localised']}/{s['faults']} · "
        f"clean control over seeds {control_seeds}: {result['control']['errors']} error findings · {s['seconds']} s",
    ]
    lines += [f"  control seed {f['seed']}: [{'red' if f['severity'] == 'error' else 'yellow'}]{f['severity']}[/] "
              f"{f['id']} @ {f['stage']}: {f['message']}" for f in result["control"]["findings"]]
    return emit(con, [], show=lines, json_path=json_path, fields=result, html_path=html_path,
                page=lambda: render_faults(result), code=1 if result["control"]["errors"] else 0)
