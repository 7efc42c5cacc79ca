"""`signalchain zoo`: run the doctor on a zoo of clean pipelines, where any error is a false one."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from .._version import __version__
from ..errors import UsageError
from ..experiments.names import PRESETS
from ..report import console
from ..report.progress import Reporter
from ._common import common_options, emit, guarded

if TYPE_CHECKING:  # the scoring (torch) is imported when a zoo runs: `--help` stays cheap
    from ..experiments.scoring import ZooRun

__all__ = ["zoo"]

#: The bundled zoo (user layer, named by string like the default pipeline: nothing below imports it).
DEFAULT_ZOO = "signalchain.reference.zoo"
_FAMILY_ORDER = ("audio", "data", "numerics", "optimisation", "precision", "conditioning", "generation", "output",
                 "splits", "performance", "compile", "profile")


def _load_zoo(spec: str) -> Any:
    try:
        zoo = importlib.import_module(spec)
    except ImportError as exc:
        raise UsageError(f"cannot import zoo {spec!r}: {exc}") from None
    for attr in ("members", "prepare"):
        if not callable(getattr(zoo, attr, None)):
            raise UsageError(f"zoo {spec!r} has no {attr}(); a zoo module offers members(), fast() and prepare()")
    return zoo


def _earlier_runs(log: Path, same: dict[str, Any], say: Any) -> list[tuple[ZooRun, str]]:
    """The runs a stopped zoo wrote, one JSON line each; a torn last line or another budget is skipped."""
    from ..experiments.scoring import ZooRun

    out, skipped = [], 0
    for n, line in enumerate(log.read_text().splitlines(), 1):
        try:
            d = json.loads(line)
            if any(d.get(k) != v for k, v in same.items()):
                skipped += 1
                continue
            out.append((ZooRun.from_dict(d), str(d["part"])))
        except (ValueError, KeyError, TypeError):
            say(f"zoo: {log}:{n} is not a whole run record; it is run again")
    say(f"zoo: resuming with {len(out)} runs from {log}" + (f" ({skipped} from another budget or family set)"
                                                            if skipped else ""))
    return out


def _names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _cell(cell: dict[str, dict[str, int]] | None, seeds: int) -> str:
    if not cell:
        return "·"
    parts = [f"[red]E {fid}{f' ×{n}' if seeds > 1 else ''}[/red]" for fid, n in sorted(cell["error"].items())]
    parts += [f"[yellow]W {fid}{f' ×{n}' if seeds > 1 else ''}[/yellow]" for fid, n in sorted(cell["warning"].items())]
    return "\n".join(parts) or "·"


def _table(result: dict[str, Any]) -> Table:
    fams = [f for f in _FAMILY_ORDER if f in result["families"]]
    t = Table(title=f"clean-pipeline zoo · seeds {result['seeds']} · E error, W warning (×seeds)")
    t.add_column("member", overflow="fold")
    for f in fams:
        t.add_column(f, overflow="fold")
    t.add_column("E/W", justify="right")
    for row in result["table"]:
        other = {k: v for k, v in row["families"].items() if k not in fams}
        cells = [_cell(row["families"].get(f), row["seeds"]) for f in fams]
        if other:
            cells[-1] += "\n" + "\n".join(_cell(v, row["seeds"]) for v in other.values())
        failed = f" [red]{row['failed_runs']} failed[/red]" if row["failed_runs"] else ""
        t.add_row(row["member"], *cells, f"{row['errors']}/{row['warnings']}{failed}")
    return t


def _alarms_table(result: dict[str, Any]) -> Table:
    t = Table(title="false alarms per id (share of member × seed runs where it fired)")
    for col in ("id", "errors", "warnings", "rate", "members"):
        t.add_column(col, overflow="fold")
    for fid, row in result["false_alarms"].items():
        rate = f"{row['runs']}/{row['of']} ({100 * row['rate']:.1f} %)"
        t.add_row(fid, str(row["errors"]), str(row["warnings"]), rate, ", ".join(row["members"]))
    return t


@click.command()
@click.argument("zoo_spec", metavar="[ZOO]", required=False)
@click.option("--members", "member_names", default=None, metavar="A,B", help="Only these members.")
@click.option("--fast", is_flag=True, help="Only the fast subset (the members CI runs).")
@click.option("--bed", "beds", multiple=True, metavar="BED", help="Only members on this bed (reference, hf, symbolic).")
@click.option("--seeds", default="0,1,2", show_default=True, help="Seeds each member runs with.")
@click.option("--families", "family_names", default=None, metavar="F,G",
              help="Only these families (default: every family each member can run).")
@click.option("--workers", type=int, default=None, help="Parallel processes (default: CPU count, at most 8).")
@click.option("--budget", type=click.Choice(list(PRESETS)), default="business", show_default=True)
@click.option("--resume", is_flag=True,
              help="With --json: keep the runs already in <json>.runs.jsonl (same budget and families), run the rest.")
@click.option("--list", "list_only", is_flag=True, help="List the members and why each is clean, without running.")
@common_options(html=False)
@guarded
def zoo(zoo_spec: str | None, member_names: str | None, fast: bool, beds: tuple[str, ...], seeds: str,
        family_names: str | None, workers: int | None, budget: str, resume: bool, list_only: bool,
        json_path: str | None, debug: bool) -> int:
    """Run the doctor on every member of a zoo of clean pipelines (default: the bundled one) over
    several seeds; any error is a false alarm (exit 1), and each warning is listed with its rate.

    The performance family judges wall-clock time: it runs after the others, one run at a time.
    """
    from ..experiments.doctor import select_families

    con = console()
    zoo_mod = _load_zoo(zoo_spec or DEFAULT_ZOO)
    catalogue = list(zoo_mod.members())
    known = {m["name"]: m for m in catalogue}
    if member_names and fast:
        raise UsageError("give --members or --fast, not both")
    everyone = [m["name"] for m in catalogue]
    wanted = _names(member_names) if member_names else (list(zoo_mod.fast()) if fast else everyone)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise UsageError(f"unknown zoo member {unknown[0]!r}; `signalchain zoo --list` lists the {len(known)} members")
    chosen = [known[n] for n in wanted if not beds or known[n]["bed"] in beds]
    if not chosen:
        raise UsageError(f"no member on bed(s) {list(beds)}; beds: {sorted({m['bed'] for m in catalogue})}")
    if list_only:
        t = Table(title=f"clean-pipeline zoo · {len(chosen)} members")
        for col in ("member", "bed", "settings", "why it is clean"):
            t.add_column(col, overflow="fold")
        for m in chosen:
            t.add_row(m["name"], m["bed"] + (f" (pretrained {m['pretrained']})" if m["pretrained"] else ""),
                      ", ".join(f"{k}={v}" for k, v in m["tags"].items()), m["why"])
        return emit(con, [], show=[t], json_path=json_path, html_path=None,
                    fields={"signalchain": __version__, "members": chosen}, code=0)
    try:
        seed_list = [int(s) for s in _names(seeds)]
    except ValueError:
        raise UsageError(f"--seeds {seeds!r} is not a comma-separated list of integers") from None
    families = _names(family_names) if family_names else []
    if families:
        select_families(families)  # unknown names are usage errors
    with Reporter("zoo") as rep:  # lines above a bar on a terminal, timed lines in a log; none with --quiet
        score, earlier = _run(zoo_mod, chosen, seed_list, families, workers, budget, resume, json_path,
                              lambda line: rep.note(line.removeprefix("zoo: ")))
    result = score.to_dict()
    s = result["summary"]
    lines: list[Any] = [_table(result)]
    if result["false_alarms"]:
        lines.append(_alarms_table(result))
    failed = f", {s['failed_runs']} runs failed" if s["failed_runs"] else ""
    lines.append(f"{s['members']} members × {len(seed_list)} seeds = {s['runs']} runs: {s['errors']} errors "
                 f"({s['runs_with_error']} runs), {s['warnings']} warnings ({s['runs_with_warning']} runs)"
                 f"{failed} · {s['seconds']} s"
                 + (f" (this run; {len(earlier)} runs kept from the log)" if earlier else ""))
    return emit(con, [], show=lines, json_path=json_path, html_path=None,
                fields={"signalchain": __version__, **result}, code=1 if s["errors"] else 0)


def _run(zoo_mod: Any, chosen: list[dict[str, Any]], seed_list: list[int], families: list[str],
         workers: int | None, budget: str, resume: bool, json_path: str | None,
         say: Any) -> tuple[Any, list[tuple[ZooRun, str]]]:
    """Prepare the members and run them (each run appended to the --json file's log as it ends)."""
    from ..experiments.scoring import score_zoo

    zoo_mod.prepare([m["name"] for m in chosen], say)
    say(f"zoo: {len(chosen)} members × seeds {seed_list} ({budget}); performance runs last, one at a time")
    if resume and (not json_path or json_path == "-"):
        raise UsageError("--resume reads the runs a zoo wrote beside its --json file: give --json FILE too")
    on_run = None
    earlier: list[tuple[ZooRun, str]] = []
    if json_path and json_path != "-":  # each run as it ends, one JSON line: a long zoo keeps what it measured
        log = Path(f"{json_path}.runs.jsonl")
        log.parent.mkdir(parents=True, exist_ok=True)
        same = {"budget": budget, "families": sorted(families)}
        if resume and log.exists():
            earlier = _earlier_runs(log, same, say)
            if log.read_bytes()[-1:] not in (b"", b"\n"):  # a torn last line: new runs start on their own
                with log.open("a") as fh:
                    fh.write("\n")
        else:
            log.write_text("")

        def on_run(run: Any, part: str) -> None:
            with log.open("a") as fh:
                fh.write(json.dumps({**run.to_dict(), "part": part, **same}, default=str) + "\n")

    score = score_zoo(chosen, seed_list, families, workers, budget, progress=say, on_run=on_run, earlier=earlier)
    return score, earlier
