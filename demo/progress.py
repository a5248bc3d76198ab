"""A small progress display on stderr: one line per step, live while a step runs > 1 s."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

SPINNER = "|/-\\"


class Progress:
    """Steps as ``[  1.2s] label ... done (0.4 s)``; a live line on a terminal for slow steps.

    On a terminal, a step still running after one second gets a ticking line (elapsed time and
    an optional status such as a training job's stage and percentage); elsewhere (logs, CI)
    each step prints once when it starts and once when it ends.
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.start = time.monotonic()
        self._status = ""
        self._lock = threading.Lock()

    def _stamp(self) -> str:
        return f"[{time.monotonic() - self.start:6.1f}s]"

    def note(self, text: str) -> None:
        if self.enabled:
            print(f"{self._stamp()} {text}", file=self.stream, flush=True)

    def status(self, text: str) -> None:
        """Detail shown on the live line of the current step (e.g. '42% fitting gbm')."""
        with self._lock:
            self._status = text

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        began = time.monotonic()
        stop = threading.Event()
        shown = threading.Event()
        self._status = ""
        if not self.live:
            print(f"{self._stamp()} {label} ...", file=self.stream, flush=True)

        def tick() -> None:
            if stop.wait(1.0):
                return
            frame = 0
            while not stop.is_set():
                with self._lock:
                    status = self._status
                elapsed = time.monotonic() - began
                line = f"\r{self._stamp()} {label} {SPINNER[frame % 4]} {elapsed:5.1f}s {status}"
                self.stream.write(line[:160].ljust(100))
                self.stream.flush()
                shown.set()
                frame += 1
                stop.wait(0.25)

        thread = threading.Thread(target=tick, daemon=True) if self.live else None
        if thread is not None:
            thread.start()
        try:
            yield
        except BaseException:
            stop.set()
            self._clear(thread, shown)
            print(f"{self._stamp()} {label} ... FAILED", file=self.stream, flush=True)
            raise
        stop.set()
        self._clear(thread, shown)
        took = time.monotonic() - began
        print(f"{self._stamp()} {label} ... done ({took:.1f} s)", file=self.stream, flush=True)

    def _clear(self, thread: threading.Thread | None, shown: threading.Event) -> None:
        """Wait for the ticker and erase its live line, if it drew one."""
        if thread is not None:
            thread.join()
        if shown.is_set():
            self.stream.write("\r" + " " * 110 + "\r")
