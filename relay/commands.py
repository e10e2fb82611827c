"""``/ci`` commands in PR comments: parsing only (relay/command_actions.py executes them).

A command is a whole line of a newly created comment on a pull request::

    /ci run [backend ...]      release held targets (trust gating) for the PR's head SHA
    /ci retry [backend ...]    re-run failed jobs, through the check run's re-run path
    /ci cancel [backend ...]   cancel open jobs and their downstream runs
    /ci status                 each backend's latest job for the head SHA
    /ci select [backend]       what each backend would run for this PR, and why
    /ci help                   this list

Lines inside fenced or indented code blocks and quoted lines (``>``) are not commands;
the prefix is ASCII ``/ci`` in lower case followed by a space or the end of the line,
so look-alikes (fullwidth letters, a Cyrillic "es" for the c) are plain text. Arguments are backend names
(a device or an ``owner/repo``, or its repo part) of letters, digits, ``.``, ``_``,
``-`` and one ``/``; anything else makes the command invalid, never a path or a
shell word. At most ``MAX_COMMANDS`` distinct commands of one comment are taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from crcr.errors import ConfigError

COMMANDS = ("run", "retry", "cancel", "status", "select", "help")
USAGE = {
    "run": "/ci run [backend ...]",
    "retry": "/ci retry [backend ...]",
    "cancel": "/ci cancel [backend ...]",
    "status": "/ci status",
    "select": "/ci select [backend]",
    "help": "/ci help",
}
MAX_ARGS = {"run": 20, "retry": 20, "cancel": 20, "status": 0, "select": 1, "help": 0}
MAX_COMMANDS = 5
MAX_BODY_CHARS = 65536  # GitHub's own limit on a comment body: nothing beyond it is real
MAX_LINE_CHARS = 1000
BACKEND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(?:/[A-Za-z0-9._-]{1,100})?$")
_COMMAND_LINE = re.compile(r"^ {0,3}/ci(?:[ \t]+(?P<rest>.*))?$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_QUOTE = re.compile(r"^ {0,3}>")


@dataclass(frozen=True)
class Parsed:
    """One command line: ``name`` is one of COMMANDS, or ``invalid`` with ``error`` saying why."""

    name: str
    args: tuple[str, ...] = ()
    error: str | None = None
    word: str = ""  # the command word as written (for invalid ones), made safe to quote

    @property
    def valid(self) -> bool:
        return self.error is None


def _safe_word(word: str) -> str:
    """An untrusted word fit to quote back: letters, digits, ``_`` and ``-`` only."""
    return re.sub(r"[^A-Za-z0-9_-]", "?", word[:40])


def parse_line(rest: str) -> Parsed:
    """The part after ``/ci``: the command word and its arguments, checked."""
    words = rest.split()
    if not words:
        return Parsed("invalid", error="no command given")
    word, args = words[0], words[1:]
    if word not in COMMANDS:
        return Parsed("invalid", error=f"unknown command `{_safe_word(word)}`", word=_safe_word(word))
    if len(args) > MAX_ARGS[word]:
        if MAX_ARGS[word] == 0:
            return Parsed("invalid", error=f"`/ci {word}` takes no arguments", word=word)
        return Parsed("invalid", error=f"`/ci {word}` takes at most {MAX_ARGS[word]} backend(s)", word=word)
    bad = [a for a in args if not BACKEND_RE.match(a) or ".." in a]
    if bad:
        return Parsed("invalid", error=f"`{_safe_word(bad[0])}` is not a backend name", word=word)
    return Parsed(word, tuple(dict.fromkeys(args)))


def parse_comment(body: Any) -> list[Parsed]:
    """Every command of a comment body, in order, duplicates dropped, at most MAX_COMMANDS."""
    if not isinstance(body, str):
        return []
    found: list[Parsed] = []
    seen: set[Parsed] = set()
    fence: str | None = None
    for raw in body[:MAX_BODY_CHARS].splitlines():
        m = _FENCE.match(raw)
        if m:
            marker = m.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is not None or _QUOTE.match(raw) or raw.startswith(("\t", "    ")):
            continue
        line = raw.rstrip()
        if len(line) > MAX_LINE_CHARS:
            continue
        m = _COMMAND_LINE.match(line)
        if m is None:
            continue
        parsed = parse_line(m.group("rest") or "")
        if parsed in seen:
            continue
        seen.add(parsed)
        found.append(parsed)
        if len(found) >= MAX_COMMANDS:
            break
    return found


# -- configuration (the allowlist's crcr.commands) ------------------------------------------
@dataclass(frozen=True)
class SelectSpec:
    """How ``/ci select`` previews one backend: ``crcr select pick`` with these inputs."""

    backend: str
    plan: str
    inventory: str
    budget_s: float | None = None


@dataclass(frozen=True)
class CommandsConfig:
    select: dict[str, SelectSpec] = field(default_factory=dict)  # owner/repo -> spec


def _bad(where: str, what: str) -> ConfigError:
    return ConfigError(f"allowlist crcr.commands{where}: {what}",
                       hint="see docs/configuration.md#trust-gating-and-ci-commands")


def parse_commands_config(spec: Any, repos: set[str]) -> CommandsConfig:
    """``crcr.commands``: ``select: {owner/repo: {backend, plan, inventory, budget_s}}``."""
    if spec is None:
        return CommandsConfig()
    if not isinstance(spec, dict) or set(spec) - {"select"}:
        raise _bad("", "expected a mapping with the key select")
    sel = spec.get("select") or {}
    if not isinstance(sel, dict):
        raise _bad(".select", "expected a mapping of owner/repo -> {backend, plan, inventory}")
    out: dict[str, SelectSpec] = {}
    for repo, item in sel.items():
        if repo not in repos:
            raise _bad(f".select.{repo}", "this repo is not in L1..L4")
        if not isinstance(item, dict) or set(item) - {"backend", "plan", "inventory", "budget_s"}:
            raise _bad(f".select.{repo}", "expected backend, plan, inventory and optionally budget_s")
        vals = [item.get(k) for k in ("backend", "plan", "inventory")]
        if not all(isinstance(v, str) and v for v in vals) or not BACKEND_RE.match(vals[0]):
            raise _bad(f".select.{repo}", "backend, plan and inventory must be non-empty strings")
        budget = item.get("budget_s")
        if budget is not None and (not isinstance(budget, int | float) or isinstance(budget, bool) or budget <= 0):
            raise _bad(f".select.{repo}.budget_s", "must be a positive number of seconds")
        out[repo] = SelectSpec(vals[0], vals[1], vals[2], float(budget) if budget is not None else None)
    return CommandsConfig(select=out)
