"""The command line: one entry point, `signalchain`, with subcommands (DESIGN §5)."""

from __future__ import annotations

import click

from .._version import __version__
from .audit_cmd import audit
from .doctor_cmd import doctor
from .faults_cmd import faults
from .golden_cmds import capture, compare, inspect
from .listen_cmd import listen

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


def main() -> None:
    cli(prog_name="signalchain")
