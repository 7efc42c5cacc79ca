"""Libraries' warnings during a command: counted and hidden, one line says so; --debug lets them through."""

from __future__ import annotations

import io
import logging
import warnings

import click
import numpy as np
import pytest
from click.testing import CliRunner

from signalchain.cli._common import common_options, guarded
from signalchain.cli._noise import hold_library_noise


def test_python_warnings_and_the_transformers_logger_are_counted_not_printed():
    shown = io.StringIO()
    with hold_library_noise() as noise:
        with np.errstate(divide="warn"):
            np.log(np.zeros(1))  # numpy's RuntimeWarning: divide by zero
        warnings.warn("a config attribute is overwritten", UserWarning, stacklevel=1)
        root = logging.getLogger("transformers")  # as transformers sets itself up on first use
        handler = logging.StreamHandler(shown)
        level = root.level
        root.setLevel(logging.WARNING)  # its default (another test may have made transformers quieter)
        root.addHandler(handler)
        root.addHandler(second := logging.StreamHandler(shown))  # (pytest's capture adds handlers too)
        try:
            logging.getLogger("transformers.models.musicgen").warning("Config of the text_encoder is overwritten")
            logging.getLogger("transformers.models.musicgen").error("a real error")
        finally:
            root.removeHandler(handler)
            root.removeHandler(second)
            root.setLevel(level)
    assert noise.counts == {"RuntimeWarning": 1, "UserWarning": 1, "transformers": 1}
    assert shown.getvalue() == "a real error\n" * 2  # an error is not chatter
    assert noise.summary().startswith("3 library warnings hidden") and "--debug" in noise.summary()


def test_after_the_command_the_logger_and_warnings_are_as_before():
    root = logging.getLogger("transformers")
    with hold_library_noise():
        pass
    assert "addHandler" not in root.__dict__
    handler = logging.StreamHandler(io.StringIO())
    root.addHandler(handler)
    try:
        assert not handler.filters
    finally:
        root.removeHandler(handler)


@click.command()
@common_options(html=False)
@guarded
def noisy(json_path: str | None, debug: bool) -> int:
    warnings.warn("something a library says", RuntimeWarning, stacklevel=1)
    click.echo("result")
    return 0


def test_a_command_says_how_many_it_hid_and_debug_shows_them():
    plain = CliRunner().invoke(noisy, [])
    assert plain.exit_code == 0 and plain.stdout == "result\n"
    assert plain.stderr == "1 library warning hidden (RuntimeWarning ×1); --debug shows them\n"
    quiet = CliRunner().invoke(noisy, ["--quiet"])
    assert quiet.stderr == ""
    with pytest.warns(RuntimeWarning, match="something a library says"):  # let through, as Python shows it
        debug = CliRunner().invoke(noisy, ["--debug"])
    assert debug.exit_code == 0 and "hidden" not in debug.stderr
