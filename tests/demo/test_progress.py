"""The demo's progress display: plain lines off a terminal, a live line on one."""

from __future__ import annotations

import io
import time

import pytest

from demo.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_progress_prints_start_and_end_lines():
    stream = io.StringIO()
    progress = Progress(stream)
    with progress.step("loading"):
        pass
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("loading ...") and "loading ... done" in lines[1]


def test_live_line_appears_only_for_steps_longer_than_a_second():
    stream = FakeTerminal()
    progress = Progress(stream)
    with progress.step("quick"):
        pass
    assert "\r" not in stream.getvalue()
    with progress.step("slow"):
        progress.status("42% fitting")
        time.sleep(1.4)
    text = stream.getvalue()
    assert "\r" in text and "42% fitting" in text and "slow ... done" in text


def test_failed_step_is_reported_and_the_error_propagates():
    stream = io.StringIO()
    with pytest.raises(ValueError), Progress(stream).step("upload"):
        raise ValueError("boom")
    assert "upload ... FAILED" in stream.getvalue()


def test_disabled_progress_is_silent():
    stream = io.StringIO()
    progress = Progress(stream, enabled=False)
    with progress.step("x"):
        progress.note("y")
    assert stream.getvalue() == ""
