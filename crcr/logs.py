"""Structured logging: every line carries the delivery id, repo and PR when known.

``configure_logging(settings)`` installs one handler on the ``crcr`` logger: JSON lines
(``log_format=json``, or ``auto`` when stderr is not a terminal) or readable text
(``[d:<delivery> repo#pr] message``). ``log_context(delivery_id=..., repo=..., pr=...)``
binds the fields for the current thread/task. Values that look like secrets (tokens,
PEM keys, signatures, ``Authorization`` headers) are masked in every record.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

_CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("crcr_log_context", default=None)
CONTEXT_KEYS = ("delivery_id", "repo", "pr", "target", "dispatch_id")

# GitHub token prefixes, bearer headers, PEM blocks, HMAC signatures, JWTs
_SECRET_PATTERNS = [
    re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"(?i)(authorization:?\s*(?:bearer|token)\s+)\S+"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"sha256=[0-9a-fA-F]{64}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
]


def redact(text: str) -> str:
    """``text`` with anything that looks like a credential replaced by ``***``."""
    for pat in _SECRET_PATTERNS:
        if pat.groups:
            text = pat.sub(lambda m: (m.group(1) if m.group(0) != m.group(1) else "") + "***", text)
        else:
            text = pat.sub("***", text)
    return text


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Bind delivery_id / repo / pr / target fields to every log line inside the block."""
    merged = {**(_CONTEXT.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _CONTEXT.set(merged)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _CONTEXT.get() or {}
        for key in CONTEXT_KEYS:
            if not hasattr(record, key):
                setattr(record, key, ctx.get(key))
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        tags = []
        if getattr(record, "delivery_id", None):
            tags.append(f"d:{record.delivery_id}")
        repo = getattr(record, "repo", None)
        if repo:
            pr = getattr(record, "pr", None)
            tags.append(f"{repo}#{pr}" if pr else str(repo))
        if getattr(record, "target", None):
            tags.append(f"-> {record.target}")
        prefix = f"[{' '.join(tags)}] " if tags else ""
        ts = dt.datetime.fromtimestamp(record.created, dt.UTC).strftime("%H:%M:%S")
        line = f"{ts} {record.levelname:<7} {record.name}: {prefix}{redact(record.getMessage())}"
        if record.exc_info:
            line += "\n" + redact(self.formatException(record.exc_info))
        return line


class _CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time.

    A handler bound to the stderr object of the moment breaks once that object is
    replaced and closed (an in-process CLI call under a test's capture, a daemonised
    process): every later record would then print "--- Logging error ---".
    """

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # the stream is always the current stderr
        pass


def configure_logging(log_format: str = "auto", level: str = "INFO", stream: Any = None) -> logging.Handler:
    """Install crcr's handler on the ``crcr`` logger (idempotent) and return it."""
    follow_stderr = stream is None
    stream = stream or sys.stderr
    fmt = log_format
    if fmt == "auto":
        fmt = "text" if getattr(stream, "isatty", lambda: False)() else "json"
    logger = logging.getLogger("crcr")
    for h in list(logger.handlers):
        if getattr(h, "_crcr", False):
            logger.removeHandler(h)
    handler = _CurrentStderrHandler() if follow_stderr else logging.StreamHandler(stream)
    handler._crcr = True  # type: ignore[attr-defined]
    handler.addFilter(_ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return handler
