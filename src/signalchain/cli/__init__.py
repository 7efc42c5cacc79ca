"""The command line: one entry point, `signalchain`, with subcommands (DESIGN §5)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from .._version import __version__
from ._common import fail
from .audit_cmd import audit
from .bisect_cmd import bisect
from .doctor_cmd import doctor
from .faults_cmd import faults
from .golden_cmds import capture, compare, inspect
from .listen_cmd import listen
from .verify_cmd import verify
from .zoo_cmd import zoo

__all__ = ["main", "cli"]


class SignalchainGroup(click.Group):
    """The group, with click's own errors in the house style (DESIGN §5).

    click prints a usage error as three lines (usage, "Try --help", the error) and exits 1 for some
    of them; here every one is a single line on stderr and exit 2, whichever subcommand it came
    from. Anything that escapes a subcommand unguarded is an internal error: one line, exit 2.
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
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


@click.group(cls=SignalchainGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="signalchain")
def cli() -> None:
    """Find the earliest stage where a music model's training goes wrong, and listen to every stage."""


cli.add_command(capture)
cli.add_command(compare)
cli.add_command(inspect)
cli.add_command(doctor)
cli.add_command(faults)
cli.add_command(audit)
cli.add_command(listen)
cli.add_command(bisect)
cli.add_command(verify)
cli.add_command(zoo)


def main() -> None:
    cli(prog_name="signalchain")
