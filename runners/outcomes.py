"""Turning pytest's reports of one test into one outcome, error class and excerpt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crcr.contracts.results import MAX_EXCERPT_CHARS, scrub

# PyTorch's OpInfo wrapper re-raises failures as a bare Exception naming the sample;
# the class worth recording is the one it wraps.
_GENERIC = {"Exception"}


@dataclass(frozen=True)
class Verdict:
    outcome: str
    error_class: str | None
    message: str | None
    rerunnable: bool


def error_class(exc: BaseException) -> str:
    """The exception's class name, looking through torch's generic re-raise wrappers."""
    seen = 0
    while type(exc).__name__ in _GENERIC and seen < 5:
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc, seen = inner, seen + 1
    return type(exc).__name__


def excerpt(text: str | None) -> str | None:
    """A bounded, scrubbed excerpt: the end of a long text is where the error is."""
    if not text:
        return None
    text = text.strip()
    if len(text) > MAX_EXCERPT_CHARS - 40:
        text = "[...]\n" + text[-(MAX_EXCERPT_CHARS - 60):]
    return scrub(text)


def _skip_reason(report: Any) -> str | None:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    return str(longrepr) if longrepr else None


def classify(reports: list[Any]) -> Verdict:
    """Outcome of a test from its setup/call/teardown reports (pytest's own semantics)."""
    by_when = {r.when: r for r in reports}
    setup, call, teardown = by_when.get("setup"), by_when.get("call"), by_when.get("teardown")
    for report in (setup, call):
        if report is not None and hasattr(report, "wasxfail"):
            if report.skipped:
                return Verdict("xfailed", None, excerpt(str(report.wasxfail) or None), False)
            if report.passed:
                return Verdict("xpassed", None, excerpt(str(report.wasxfail) or None), False)
    if setup is not None and setup.failed:
        return _failure("error", setup)
    if setup is not None and setup.skipped:
        return Verdict("skipped", None, excerpt(_skip_reason(setup)), False)
    if call is not None and call.failed:
        text = str(call.longrepr) if isinstance(call.longrepr, str) else ""
        # strict xfail that passed: re-running cannot change the plan's verdict
        rerunnable = not text.startswith("[XPASS(strict)]")
        verdict = _failure("failed", call)
        return Verdict(verdict.outcome, verdict.error_class or ("XPassStrict" if not rerunnable else None),
                       verdict.message, rerunnable)
    if call is not None and call.skipped:
        return Verdict("skipped", None, excerpt(_skip_reason(call)), False)
    if teardown is not None and teardown.failed:
        return _failure("error", teardown)
    return Verdict("passed", None, None, False)


def with_subtests(verdict: Verdict, failed_subtests: list[Any]) -> Verdict:
    """A test whose own report passed but one of whose ``self.subTest(...)`` blocks failed has failed.

    pytest (9 and later) reports each failing unittest subtest as a report of its own and the test itself as
    passed; upstream tests that loop over cases inside ``subTest`` (``test_native_mha``) would otherwise be
    recorded green while every case failed. The first failing subtest gives the error class and message. Under an
    xfail mark (the plan's ``xfail``) a failing subtest is reported as an expected failure and the test item as an
    unexpected pass (or, strict, a failure): such a test failed as expected, so it is ``xfailed``.
    """
    if not failed_subtests:
        return verdict
    first = failed_subtests[0]
    describe = getattr(first, "_sub_test_description", None)
    where = describe() if callable(describe) else "(<subtest>)"
    expected = hasattr(first, "wasxfail")
    if verdict.outcome == "xpassed" or (verdict.outcome == "failed" and verdict.error_class == "XPassStrict"):
        return Verdict("xfailed", None, excerpt(f"a subtest failed as expected, the first {where}"), False)
    if verdict.outcome != "passed" or expected:
        return verdict
    failed = _failure("failed", first)
    message = f"{len(failed_subtests)} subtest(s) failed; the first, {where}:\n{failed.message or ''}"
    return Verdict("failed", failed.error_class, excerpt(message), True)


def _failure(outcome: str, report: Any) -> Verdict:
    message = getattr(report, "crcr_message", None) or report.longreprtext
    return Verdict(outcome, getattr(report, "crcr_error_class", None), excerpt(message), True)
