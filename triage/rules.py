"""Log patterns: infra failures (configurable) and known flaky failures (PyTorch's rules).

Infra patterns say "the machine, not the code": timeouts, lost runners, out of memory,
network. They are regular expressions grouped by kind; ``--infra-patterns FILE`` (YAML
``{kind: [regex, ...]}``) replaces the defaults. Known flaky rules come from
``crcr/data/pytorch-stats/flaky-rules.json`` (PyTorch's own list: a rule applies to a
job whose name contains the rule's ``name`` and whose log matches one of its
``captures``). A rule whose capture matches anything (``.*``) is skipped: it would call
every failure of that job a flake.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from crcr.errors import InputError

DEFAULT_INFRA_PATTERNS: dict[str, list[str]] = {
    "lost_runner": [
        r"lost communication with the server",
        r"runner has received a shutdown signal",
        r"job was not acquired by Runner",
        r"The operation was canceled",
        r"runner .{0,40}(?:went offline|disconnected)",
    ],
    "timeout": [
        r"The action has timed out",
        r"has exceeded the maximum execution time",
        r"Timeout \(\d+\) exceeded",
        r"\bjob (?:was )?timed out\b",
    ],
    "oom": [
        r"CUDA out of memory",
        r"\bOut of memory\b",
        r"Killed process \d+ .{0,40}(?:oom|out of memory)",
        r"MemoryError\b",
        r"o space left on device",
    ],
    "network": [
        r"Connection timed out",
        r"connect ETIMEDOUT",
        r"Temporary failure in name resolution",
        r"Could not resolve host",
        r"Failed to connect to \S+ port \d+",
        r"Connection reset by peer",
        r"HTTP Error 50[234]",
    ],
}

FLAKY_RULES_PATH = Path(__file__).resolve().parent.parent / "crcr" / "data" / "pytorch-stats" / "flaky-rules.json"
_MATCH_ALL = {".*", ".+", "^.*$", ""}


@dataclass(frozen=True)
class FlakyRule:
    name: str
    captures: tuple[re.Pattern[str], ...]


@dataclass
class Rules:
    infra: dict[str, list[re.Pattern[str]]]
    flaky: list[FlakyRule]

    def infra_kind(self, text: str) -> str | None:
        """The infra kind whose pattern matches ``text`` (None: not an infra failure)."""
        if not text:
            return None
        for kind, patterns in self.infra.items():
            if any(p.search(text) for p in patterns):
                return kind
        return None

    def flaky_rule(self, job: str, text: str) -> str | None:
        """The known flaky rule matching this job's failure (``name: capture``), or None."""
        if not text:
            return None
        for rule in self.flaky:
            if rule.name.lower() not in job.lower():
                continue
            for capture in rule.captures:
                if capture.search(text):
                    return f"{rule.name}: {capture.pattern}"
        return None


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InputError(f"{where}: {pattern!r} is not a regular expression ({exc})") from exc


def load_flaky_rules(path: Path = FLAKY_RULES_PATH) -> list[FlakyRule]:
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not JSON ({exc})") from exc
    rules = []
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        captures = tuple(_compile(c, str(path)) for c in entry.get("captures") or []
                         if isinstance(c, str) and c.strip() not in _MATCH_ALL)
        if captures:
            rules.append(FlakyRule(entry["name"], captures))
    return rules


def load_rules(infra_file: Path | None = None, flaky_file: Path | None = None) -> Rules:
    """The default rules, or those of ``infra_file`` (YAML ``{kind: [regex, ...]}``)."""
    patterns = DEFAULT_INFRA_PATTERNS
    if infra_file is not None:
        import yaml

        if not infra_file.is_file():
            raise InputError(f"infra patterns file {infra_file} does not exist")
        try:
            data = yaml.safe_load(infra_file.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise InputError(f"{infra_file}: not YAML ({type(exc).__name__})") from exc
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise InputError(f"{infra_file}: expected a mapping of kind -> list of regular expressions",
                             hint="e.g. {oom: ['CUDA out of memory'], lost_runner: ['shutdown signal']}")
        patterns = {str(k): [str(p) for p in v] for k, v in data.items()}
    infra = {kind: [_compile(p, "infra pattern") for p in pats] for kind, pats in patterns.items()}
    return Rules(infra=infra, flaky=load_flaky_rules(flaky_file or FLAKY_RULES_PATH))
