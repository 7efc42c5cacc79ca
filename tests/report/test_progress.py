"""Progress: timed plain lines in a log, nothing when quiet or done within the grace time."""

from __future__ import annotations

import io
import re
import time

from signalchain.report.progress import Reporter, is_quiet, set_quiet

LINE = re.compile(r"^\[\s*(\d+\.\d) s\] audit: (.*)$")


def lines(buf: io.StringIO) -> list[tuple[float, str]]:
    out = []
    for raw in buf.getvalue().splitlines():
        m = LINE.match(raw)
        assert m, f"not a progress line: {raw!r}"
        out.append((float(m.group(1)), m.group(2)))
    return out


def test_a_log_gets_one_timed_line_per_phase_and_batch_counts():
    buf = io.StringIO()
    with Reporter("audit", mode="lines", grace=0.0, every=0.0, heartbeat=60, stream=buf) as rep:
        rep.say("reading")
        rep.start(32)
        rep.advance(16)
        rep.advance(16)
        rep.say("searching")
    got = [text for _, text in lines(buf)]
    assert got == ["reading", "reading (16/32)", "reading (32/32)", "searching (32/32)"]
    times = [t for t, _ in lines(buf)]
    assert times == sorted(times) and all(t >= 0 for t in times)


def test_items_are_counted_as_they_start():
    buf = io.StringIO()
    with Reporter("audit", total=3, mode="lines", grace=0.0, heartbeat=60, stream=buf) as rep:
        for name in ("audio", "data", "numerics"):
            rep.item(name)
        rep.say("numerics: a step")
    assert [text for _, text in lines(buf)] == ["audio (1/3)", "data (2/3)", "numerics (3/3)",
                                                "numerics: a step (3/3)"]


def test_a_silent_stretch_gets_a_still_line():
    buf = io.StringIO()
    with Reporter("audit", mode="lines", grace=0.0, heartbeat=0.2, stream=buf) as rep:
        rep.say("fingerprinting")
        deadline = time.monotonic() + 30
        while "still" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert ("still fingerprinting" in [text for _, text in lines(buf)])


def test_a_quick_command_says_nothing():
    """Within the grace time nothing is printed: an instant usage error stays one line on stderr."""
    buf = io.StringIO()
    with Reporter("audit", mode="lines", grace=60.0, stream=buf) as rep:
        rep.say("reading")
    assert buf.getvalue() == ""


def test_quiet_and_the_off_mode_print_nothing():
    buf = io.StringIO()
    set_quiet(True)
    try:
        assert is_quiet()
        with Reporter("audit", grace=0.0, stream=buf) as rep:
            assert rep.mode == "off"
            rep.say("reading")
            rep.note("a result")
            rep.advance(3)
    finally:
        set_quiet(False)
    assert buf.getvalue() == ""


def test_a_pipe_or_ci_gets_lines_not_a_bar(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert Reporter("audit", stream=io.StringIO()).mode == "lines"  # not a terminal
    monkeypatch.setenv("CI", "true")
    assert Reporter("audit").mode == "lines"
