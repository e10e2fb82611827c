"""Progress: a rich bar for a person at a terminal, plain lines for CI logs."""

from __future__ import annotations

import io

from runners.progress import Progress, interactive

EVENTS = [
    {"kind": "collected", "ids": ["a", "b", "c"], "pick_missing_count": 0},
    {"kind": "result", "id": "a", "outcome": "passed"},
    {"kind": "result", "id": "b", "outcome": "error", "error_class": "Crash"},
    {"kind": "collected", "ids": ["c"]},
    {"kind": "result", "id": "c", "outcome": "failed"},
]


def _feed(progress: Progress) -> None:
    with progress:
        for event in EVENTS:
            progress(event)


def test_plain_lines_in_ci_name_crashes_and_restarts(monkeypatch):
    monkeypatch.setenv("CI", "true")
    out = io.StringIO()
    assert not interactive(out)
    _feed(Progress(out, every_s=0.0))
    text = out.getvalue()
    assert "collected 3 tests" in text
    assert "crash: b (recorded as error, continuing)" in text
    assert "pytest restarted with the 1 tests left" in text
    assert "[3/3] error=1 failed=1 passed=1" in text


def test_live_bar_renders_counts(monkeypatch):
    out = io.StringIO()
    _feed(Progress(out, live=True))
    text = out.getvalue()
    assert "crcr run" in text and "3/3" in text
    assert "crash: b" in text
