"""Text from outside crcr (a test's error message, a probe's exception, a run's log excerpt) made fit for a plan
reason: terminal escape sequences (torch's ``UnpicklingError`` colours its hints) and other control characters are
removed, tabs and line breaks become spaces. A plan reason is read by people and written to YAML; an error text
must never be able to stop a plan from being written."""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACE = re.compile(r"[\t\n\r]+")


def plain(text: str) -> str:
    """``text`` without escape sequences or control characters, on one line."""
    return _SPACE.sub(" ", _CONTROL.sub("", _ESCAPE.sub("", _SPACE.sub(" ", text))))
