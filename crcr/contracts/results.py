"""Run results: what happened to every test of one job (the runners write it).

``crcr run --results FILE`` writes it (JUnit XML beside it); ``crcr report`` posts the
counts in CRCR's callback and uploads the whole file to the relay's ``/results``;
the selector refines plans from it and triage reads it across commits.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crcr.errors import ContractError, InputError

RESULTS_SCHEMA_VERSION = 1
MAX_EXCERPT_CHARS = 2000
Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "flaky"]
OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "flaky")

# Things that look like credentials are replaced before an excerpt is stored or sent.
_SECRET_PATTERNS = [
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"github_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{10,}"),
    re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWTs
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"(?i)((?:token|secret|password|api[_-]?key|authorization)\s*[=:]\s*)(\S+)"),
]


def scrub(text: str | None, limit: int = MAX_EXCERPT_CHARS) -> str | None:
    """Bound ``text`` and replace anything that looks like a secret with ``***``."""
    if text is None:
        return None
    for pattern in _SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "***", text)
        else:
            text = pattern.sub("***", text)
    if len(text) > limit:
        text = text[: limit - 20] + "\n... [truncated]"
    return text


class TestResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    __test__ = False  # not a pytest class

    id: str = Field(description="full pytest id")
    outcome: Outcome
    duration_s: float = 0.0
    error_class: str | None = Field(None, description="exception class name, e.g. NotImplementedError")
    message: str | None = Field(None, description="bounded, scrubbed excerpt")
    repro: str | None = Field(None, description="command that reproduces this test alone")
    plan_mode: str | None = None
    plan_reason: str | None = None
    plan_source: str | None = None
    attempts: list[str] = Field(default_factory=list, description="outcome of each attempt (reruns)")
    counters: dict[str, Any] | None = Field(None, description="snpu counters (cycles, bytes, sticks, ...)")

    @field_validator("message")
    @classmethod
    def _bounded(cls, v: str | None) -> str | None:
        return scrub(v)


class PlanCounts(BaseModel):
    """How the run's tests relate to the plan: planned, unplanned, and how many really ran."""

    model_config = ConfigDict(extra="forbid")

    planned: int = Field(0, description="tests a plan file covers (an entry or the file's defaults)")
    by_default: int = Field(0, description="of the planned, tests no entry matched (the file's defaults decided)")
    unplanned: int = Field(0, description="tests of files no plan file covers (all of them without --plan)")
    unplanned_policy: str = Field("run", description="what happened to unplanned tests: run | skip | error")
    unplanned_files: dict[str, int] = Field(default_factory=dict, description="unplanned tests per upstream file")
    run: int = Field(0, description="tests that executed (passed, failed, errored, xfailed, xpassed, flaky)")


class RunMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    run_id: str = Field(description="unique id of this run")
    device: str
    torch_version: str | None = None
    torch_git: str | None = None
    upstream_sha: str | None = Field(None, description="upstream commit under test, when known")
    source: str | None = Field(None, description="embedded | pytorch-src")
    plan_digest: str | None = None
    pick_digest: str | None = None
    shard: str | None = Field(None, description="I/N")
    host: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    command: str | None = None
    crcr_version: str | None = None
    plan_counts: PlanCounts | None = Field(None, description="planned / unplanned / run counts")


class RunResults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = RESULTS_SCHEMA_VERSION
    run: RunMeta
    tests: list[TestResult] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = Counter(t.outcome for t in self.tests)
        return {o: c.get(o, 0) for o in OUTCOMES}

    def ran(self) -> int:
        """Tests that executed: not skipped, and not a file that failed to import."""
        return sum(1 for t in self.tests
                   if t.outcome != "skipped" and t.error_class != "CollectionError")

    def failed(self) -> list[TestResult]:
        return [t for t in self.tests if t.outcome in ("failed", "error")]

    def callback_counts(self) -> dict[str, int]:
        """CRCR's ``test_results`` shape: passed / failed / skipped."""
        c = self.counts()
        return {
            "passed": c["passed"] + c["xfailed"] + c["flaky"],
            "failed": c["failed"] + c["error"] + c["xpassed"],
            "skipped": c["skipped"],
        }

    def write(self, path: Path) -> None:
        from crcr.fileio import atomic_write_text

        atomic_write_text(path, self.model_dump_json(indent=1, exclude_none=True) + "\n")


def parse_results(data: bytes | str | dict[str, Any], where: str = "<results>") -> RunResults:
    try:
        obj = json.loads(data) if isinstance(data, bytes | str) else data
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ContractError(f"{where}: not valid JSON ({exc})",
                            hint="results files come from crcr run --results") from exc
    try:
        return RunResults.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ContractError(f"{where}: {loc}: {first['msg']}", hint="results files come from crcr run --results") from exc


def load_results(path: Path | str) -> RunResults:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"results file {path} does not exist", hint="crcr run --results FILE writes one")
    return parse_results(path.read_bytes(), str(path))
