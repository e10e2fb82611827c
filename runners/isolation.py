"""Surviving tests that kill the interpreter: a supervisor around the pytest subprocess.

The plugin writes ``start`` before each test and ``result`` after it, flushed at once.
When the pytest process dies (a segfault, an abort, or the per-test watchdog ending a
hang), the test that started and never finished is the culprit: it is recorded as an
``error`` (``Crash`` with the signal, or ``Timeout``) with the tail of faulthandler's
traceback, and pytest is started again on the tests not yet run. A watchdog here kills
the process group if even faulthandler cannot end a hang (timeout plus a grace period).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crcr.contracts.results import scrub
from crcr.errors import InputError
from runners.errors import CollectionError

# after this many crashes in one run the rest is reported as not run, not retried forever
MAX_RESTARTS = 200
_GRACE_S = 30.0
_PYTEST_USAGE_ERROR = 4
_POLL_S = 0.1


@dataclass
class ChildSpec:
    """How to start one pytest process: argv, cwd, env; resume ids go through a file."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    config_path: Path
    only_ids_path: Path
    log_path: Path
    timeout_s: float | None


@dataclass
class Outcome:
    """What the supervisor saw: result events per id (in order), collection info, restarts."""

    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    collected: list[str] | None = None
    collected_total: int = 0
    torch_version: str | None = None
    torch_git: str | None = None
    restarts: int = 0
    exitstatus: int | None = None
    pick_missing: int = 0
    unplanned_refused: dict[str, int] | None = None  # files no plan covers, under --unplanned error


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class Supervisor:
    def __init__(self, spec: ChildSpec, events_path: Path, crash_path: Path,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.spec = spec
        self.events_path = events_path
        self.crash_path = crash_path
        self.on_event = on_event or (lambda _e: None)
        self.outcome = Outcome()

    def run(self) -> Outcome:
        """Run pytest until every collected test has a result."""
        resume: list[str] | None = None
        while True:
            started: dict[str, float] = {}
            offset = self.events_path.stat().st_size if self.events_path.exists() else 0
            crash_offset = self.crash_path.stat().st_size if self.crash_path.exists() else 0
            self._set_resume(resume)
            returncode, done = self._run_child(started, offset)
            if done and self.outcome.exitstatus == _PYTEST_USAGE_ERROR:
                errors = [line for line in self._log_tail().splitlines() if line.startswith("ERROR")]
                raise InputError("pytest refused the arguments: " + ("; ".join(errors[-3:]) or "usage error"),
                                 hint="check the -k expression and the --file paths")
            if done:
                return self.outcome
            if self.outcome.collected is None:
                tail = self._log_tail()
                if returncode == _PYTEST_USAGE_ERROR:
                    raise InputError(f"pytest refused the arguments:\n{tail.strip()}",
                                     hint="check the -k expression and the --file paths")
                raise CollectionError(
                    f"pytest died before collecting tests ({_signal_name(returncode)}):\n{tail}",
                    hint="run the same selection with plain pytest to see the import error",
                )
            culprit = next((i for i in reversed(list(started)) if i not in self.outcome.results), None)
            if culprit is not None:
                self._record_crash(culprit, returncode, crash_offset, started[culprit])
            remaining = [i for i in self.outcome.collected if i not in self.outcome.results]
            if not remaining:
                return self.outcome
            self.outcome.restarts += 1
            if culprit is None or self.outcome.restarts > MAX_RESTARTS:
                why = ("pytest exited without naming a culprit" if culprit is None
                       else f"more than {MAX_RESTARTS} crashes")
                for test_id in remaining:
                    self._record({"kind": "result", "id": test_id, "outcome": "error", "error_class": "NotRun",
                                  "message": f"not run: {why} ({_signal_name(returncode)})", "duration_s": 0.0})
                return self.outcome
            resume = remaining

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            return self.spec.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def _set_resume(self, resume: list[str] | None) -> None:
        cfg = json.loads(self.spec.config_path.read_text(encoding="utf-8"))
        if resume is None:
            cfg["only_ids_path"] = None
        else:
            self.spec.only_ids_path.write_text(json.dumps(resume), encoding="utf-8")
            cfg["only_ids_path"] = str(self.spec.only_ids_path)
        self.spec.config_path.write_text(json.dumps(cfg), encoding="utf-8")

    def _run_child(self, started: dict[str, float], offset: int) -> tuple[int, bool]:
        done = False
        with open(self.spec.log_path, "ab") as log:
            proc = subprocess.Popen(self.spec.argv, cwd=self.spec.cwd, env=self.spec.env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                with open(self.events_path, "a+", encoding="utf-8") as events:
                    events.seek(offset)
                    buffer = ""
                    while True:
                        exited = proc.poll() is not None
                        chunk = events.read()
                        if chunk:
                            buffer += chunk
                            *lines, buffer = buffer.split("\n")
                            for line in lines:
                                done = self._handle(line, started) or done
                        if exited:
                            break
                        self._watchdog(proc, started)
                        time.sleep(_POLL_S)
            except BaseException:
                _kill_group(proc)
                raise
        return proc.returncode, done

    def _handle(self, line: str, started: dict[str, float]) -> bool:
        if not line.strip():
            return False
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return False  # a line cut by a crash mid-write
        kind = event.get("kind")
        if kind == "collected" and self.outcome.collected is None:
            self.outcome.collected = list(event["ids"])
            self.outcome.collected_total = int(event.get("total", 0))
            self.outcome.torch_version = event.get("torch_version")
            self.outcome.torch_git = event.get("torch_git")
            self.outcome.pick_missing = int(event.get("pick_missing_count", 0))
        elif kind == "unplanned":
            self.outcome.unplanned_refused = {str(k): int(v) for k, v in (event.get("files") or {}).items()}
        elif kind == "start":
            started[event["id"]] = time.monotonic()
        elif kind == "result":
            self._record(event)
        elif kind == "done":
            self.outcome.exitstatus = event.get("exitstatus")
            self.on_event(event)
            return True
        if kind != "result":
            self.on_event(event)
        return False

    def _record(self, event: dict[str, Any]) -> None:
        self.outcome.results[event["id"]] = event
        self.on_event(event)

    def _watchdog(self, proc: subprocess.Popen[bytes], started: dict[str, float]) -> None:
        if not self.spec.timeout_s or not started:
            return
        last = next(reversed(started))
        if last in self.outcome.results:
            return
        if time.monotonic() - started[last] > self.spec.timeout_s + _GRACE_S:
            _kill_group(proc)

    def _record_crash(self, culprit: str, returncode: int, crash_offset: int, started_at: float) -> None:
        text = ""
        if self.crash_path.exists():
            with open(self.crash_path, encoding="utf-8", errors="replace") as fh:
                fh.seek(crash_offset)
                text = fh.read()
        timed_out = "Timeout (" in text or (self.spec.timeout_s is not None and returncode == -signal.SIGKILL)
        if timed_out:
            error_class = "Timeout"
            summary = f"test ran longer than the per-test timeout of {self.spec.timeout_s:g} s and was stopped"
        else:
            error_class = "Crash"
            summary = f"the test process died ({_signal_name(returncode)}) while this test ran"
        # faulthandler prints the innermost frame first: the head of its dump names the culprit line
        head = "\n".join(text.strip().splitlines()[:30])
        self._record({
            "kind": "result", "id": culprit, "outcome": "error", "error_class": error_class,
            "message": scrub(summary + ("\n" + head if head else "")),
            "duration_s": round(time.monotonic() - started_at, 6),
        })


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the pytest process and anything it started (it leads its own session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
