"""The command line: one entry point, `signalchain`, with subcommands (DESIGN §5).

The group is lazy: a subcommand's module (and what it imports: torch, matplotlib, transformers…)
is imported only when that subcommand runs or shows its own help, so `signalchain --help` and
`--version` start in a fraction of a second. `COMMANDS` names each subcommand's module and the
short help the group's listing shows; tests/cli/test_startup.py keeps it equal to the docstrings.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import click

from .._version import __version__
from ._clock import begin
from ._common import fail

__all__ = ["main", "cli", "COMMANDS"]

#: name -> (module under signalchain.cli, attribute, short help: the first sentence of its docstring).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "capture": ("golden_cmds", "capture", "Record the golden batch of PIPELINE with full values."),
    "compare": ("golden_cmds", "compare",
                "Compare GOLDEN with GOLDEN2, or with a fresh run of the pipeline as the code is now."),
    "inspect": ("golden_cmds", "inspect",
                "Show every stage of GOLDEN in pipeline order; --html adds pictures and audio players."),
    "doctor": ("doctor_cmd", "doctor", "Diagnose PIPELINE: run the families of experiments and checks, and report "
               "the earliest bad stage."),
    "faults": ("faults_cmd", "faults",
               "Run the fault catalogue of PIPELINE (default: the reference) through every family of checks."),
    "audit": ("audit_cmd", "audit",
              "Audit datasets (AudioCraft manifests, HF audiofolders, folders) and their splits, without a model."),
    "listen": ("listen_cmd", "listen",
               "Check audio files (WAV/FLAC/OGG/MP3; folders are searched): level, silence, clipping, float "
               "overshoot, DC, channel phase, and the header's rate, subtype and format against what the data hold."),
    "bisect": ("bisect_cmd", "bisect",
               "Find the first commit between --good and --bad whose golden run diverges where --bad's does."),
    "verify": ("verify_cmd", "verify",
               "Confirm that a fix solved the right problem: run the --symptom's families (or --family) on the "
               "failing state (--before, --before-fault) and the fixed one (--after, --after-fault) over --seeds "
               "seeds, and test that (1) every error of the failing state is gone and the symptom's measure "
               "improved, (2) the control families show no new error, (3) the verdict holds on every seed."),
    "history": ("history_cmd", "history",
                "Diagnose a finished or failed run from its logs (HF Trainer, TensorBoard, Lightning CSV, W&B CSV, "
                "AudioCraft) and checkpoints, without re-running it."),
    "zoo": ("zoo_cmd", "zoo",
            "Run the doctor on every member of a zoo of clean pipelines (default: the bundled one) over several "
            "seeds; any error is a false alarm (exit 1), and each warning is listed with its rate."),
}


class LazyCommands(MutableMapping[str, click.Command]):
    """The group's commands: every name of `COMMANDS` is listed, and its module is imported on the
    first lookup (`cli.commands[name]`, `.get`, `.values()`); membership and listing import nothing."""

    def __init__(self, table: dict[str, tuple[str, str, str]]):
        self._table: dict[str, tuple[str, str, str]] = dict(table)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in self._table:
                raise KeyError(name)
            module, attr, _ = self._table[name]
            self._loaded[name] = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._table.pop(name, None)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._table or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._table, *self._loaded]))

    def __len__(self) -> int:
        return len(set(self._table) | set(self._loaded))

    def short_help(self, name: str, limit: int) -> str:
        """The listing's help for `name`, from the table while its module is not imported."""
        if name in self._loaded or name not in self._table:
            return self[name].get_short_help_str(limit)
        return click.utils.make_default_short_help(self._table[name][2], limit)


class SignalchainGroup(click.Group):
    """The group, with click's own errors in the house style (DESIGN §5), and lazy subcommands.

    click prints a usage error as three lines (usage, "Try --help", the error) and exits 1 for some
    of them; here every one is a single line on stderr and exit 2, whichever subcommand it came
    from. Anything that escapes a subcommand unguarded is an internal error: one line, exit 2.
    """

    commands: LazyCommands

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            begin()
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        begin(whole_process=args is None)  # the times a command prints run from here
        argv = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in argv
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # bare `signalchain`: its help, as click shows it
            exc.show()
            sys.exit(2)
        except click.ClickException as exc:  # a usage error: unknown option, missing argument, bad choice…
            ctx = getattr(exc, "ctx", None)
            where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
            fail(f"{exc.format_message().rstrip('.')}{where}", debug=False)
        except click.Abort:
            fail("interrupted", debug=debug)
        except Exception as exc:  # escaped a subcommand that is not guarded: still one line
            fail("", internal=exc, debug=debug)
        sys.exit(rv if isinstance(rv, int) else 0)  # --help, --version: click returns their code

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with each short help from `COMMANDS` (no subcommand is imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        with formatter.section("Commands"):
            formatter.write_dl([(n, self.commands.short_help(n, limit)) for n in names])


@click.group(cls=SignalchainGroup, commands=LazyCommands(COMMANDS),
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="signalchain")
def cli() -> None:
    """Find the earliest stage where a music model's training goes wrong, and listen to every stage."""


def main() -> None:
    cli(prog_name="signalchain")
