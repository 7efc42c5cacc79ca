"""Figures as people read them: no zero-rounded durations, counts with the right noun, short paths."""

from __future__ import annotations

import math
import os

import pytest

from signalchain._units import duration, plural, short_path


@pytest.mark.parametrize("seconds, text", [
    (4e-5, "40.0 µs"), (3.8e-6, "3.8 µs"), (0.0123, "12.3 ms"), (0.00099996, "1 ms"), (0.9996, "1 s"),
    (12.345, "12.3 s"), (123.4, "123 s"), (0.0, "0 s"), (-0.002, "-2 ms"), (None, "—"), (math.nan, "—"),
])
def test_duration_picks_the_unit_that_keeps_the_digits(seconds, text):
    assert duration(seconds) == text


def test_no_nonzero_duration_reads_as_zero():
    for exp in range(-8, 3):
        for mantissa in (1.0, 1.49, 5.0, 9.99):
            value = mantissa * 10.0 ** exp
            number = duration(value).split()[0].lstrip("<")
            assert float(number) > 0, (value, duration(value))


@pytest.mark.parametrize("n, noun, text", [
    (1, "file", "1 file"), (2, "file", "2 files"), (0, "file", "0 files"), (1, "match", "1 match"),
    (3, "match", "3 matches"), (12000, "example", "12,000 examples"), (1, "MIDI file", "1 MIDI file"),
])
def test_plural(n, noun, text):
    assert plural(n, noun) == text


def test_short_path_cuts_a_library_to_its_package_and_keeps_others():
    lib = "/env/lib/python3.11/site-packages/transformers/models/encodec/modeling_encodec.py:153"
    assert short_path(lib) == "transformers/models/encodec/modeling_encodec.py:153"
    assert short_path(os.path.join(os.getcwd(), "train", "debug.py:7")) == os.path.join("train", "debug.py:7")
    assert short_path(os.path.join(os.sep, "elsewhere", "train.py:17")) == os.path.join(os.sep, "elsewhere",
                                                                                         "train.py:17")
