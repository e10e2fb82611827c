"""Progress of a run: a rich bar on a terminal, plain lines in CI or when piped."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Any, TextIO


def interactive(stream: TextIO = sys.stderr) -> bool:
    """A live bar only for a person at a terminal; CI logs get plain lines."""
    return stream.isatty() and not os.environ.get("CI") and os.environ.get("TERM") != "dumb"


class Progress:
    """Receives the supervisor's events; shows counts as tests finish."""

    def __init__(self, stream: TextIO = sys.stderr, *, live: bool | None = None, every_s: float = 10.0) -> None:
        self.stream = stream
        self.live = interactive(stream) if live is None else live
        self.every_s = every_s
        self.total = 0
        self.done = 0
        self.counts: Counter[str] = Counter()
        self._last_line = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]crcr run"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.description}"), TimeElapsedColumn(),
                console=Console(file=self.stream), transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("collecting", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "collected" and self.total:
            self._print(f"pytest restarted with the {len(event.get('ids', []))} tests left")
        elif kind == "collected":
            self.total = len(event.get("ids", []))
            if event.get("pick_missing_count"):
                shown = ", ".join(event.get("pick_missing", [])[:3])
                self._print(f"warning: {event['pick_missing_count']} picked tests were not collected here "
                            f"(e.g. {shown}); the pick may be for another torch version or checkout")
            if self._bar is not None:
                self._bar.update(self._task, total=self.total, description="")
            else:
                self._print(f"collected {self.total} tests")
        elif kind == "result" and not self.total and event.get("error_class") == "CollectionError":
            first = str(event.get("message") or event["id"]).splitlines()[0]
            self._print(f"collection error: {first}")
        elif kind == "result":
            self.done += 1
            self.counts[event.get("outcome", "?")] += 1
            if event.get("error_class") in ("Crash", "Timeout"):
                self._print(f"{event['error_class'].lower()}: {event['id']} (recorded as error, continuing)")
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done, description=self._describe())
            elif time.monotonic() - self._last_line >= self.every_s:
                self._print(f"[{self.done}/{self.total}] {self._describe()}")

    def _print(self, line: str) -> None:
        self._last_line = time.monotonic()
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)
