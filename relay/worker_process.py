"""``crcr serve``'s dispatch worker as a child process, woken through a pipe.

Sending a dispatch is CPU work in Python (PyGithub, JSON, HTTP): in the API process it
competes with intake for the one interpreter lock, and intake throughput and latency
suffer (see BENCHMARKS.md). So ``crcr serve`` runs its worker as ``crcr worker`` in a
child process at a lower CPU priority (``nice``), and wakes it on every enqueue by
writing a byte to the child's stdin (a non-blocking write: a full pipe means the child
has wake-ups pending anyway). The child exits when the pipe closes (the parent died),
and the parent restarts a child that exits on its own. The database rows stay the
truth: a child killed mid-send loses nothing (the sweeper sends those rows again).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any

log = logging.getLogger("crcr.relay")

NICE = 10  # the child's CPU priority below the API's: intake first, sending when there is room


WAKE, BUSY = b"w", b"b"  # the bytes the child reads: wake a worker; intake is busy (crcr.queue.IntakeHold)


class PipeWakeup:
    """A ``crcr.queue.Wakeup`` look-alike whose ``notify`` wakes the child through its stdin."""

    BUSY_EVERY_S = 0.05  # at most one busy byte per interval (the child holds for longer)

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.fd: int | None = None
        self.clock = clock
        self._busy_at = -1.0

    def _write(self, data: bytes) -> None:
        fd = self.fd
        if fd is None:
            return
        try:
            os.write(fd, data)
        except (BlockingIOError, BrokenPipeError, OSError):
            pass  # full: wake-ups are pending; gone: the supervisor restarts the child

    def notify(self, n: int = 1) -> None:
        self._write(WAKE * max(1, min(n, 64)))

    def busy(self) -> None:
        now = self.clock()
        if now - self._busy_at >= self.BUSY_EVERY_S:
            self._busy_at = now
            self._write(BUSY)

    def wait(self, timeout: float) -> bool:  # pragma: no cover - only the child waits
        raise NotImplementedError


class WorkerProcess:
    """Start, supervise and stop one ``crcr worker --wake-stdin`` child."""

    def __init__(self, *, workers: int, nice: int = NICE) -> None:
        self.argv = [sys.executable, "-m", "crcr.cli.main", "worker", "--workers", str(workers), "--no-migrate",
                     "--wake-stdin", "--nice", str(nice)]
        self.wakeup = PipeWakeup()
        self.proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="crcr-worker-supervisor", daemon=True)

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE)
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.wakeup.fd = self.proc.stdin.fileno()

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    def _supervise(self) -> None:
        while not self._stopping.is_set():
            proc = self.proc
            code = proc.wait() if proc is not None else None
            if self._stopping.is_set():
                return
            log.error("the dispatch worker process exited with %s; starting a new one", code)
            if self._stopping.wait(1.0):
                return
            self._spawn()

    def stop(self, timeout: float = 15.0) -> None:
        """Close the wake pipe: the child finishes running sends and exits (killed after ``timeout``)."""
        self._stopping.set()
        proc = self.proc
        if proc is None:
            return
        self.wakeup.fd = None
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
