"""CRCR's callback body and the triage verdict (schema v1).

What CRCR's callback action really sends is accepted: ``schema_version`` as the
string ``"1"`` or the int, ``conclusion: null`` and ``started_at: null`` while in
progress, and self-scheduled runs (``nightly``/``periodic``) whose ``delivery_id`` is
the upstream commit SHA, and ``test_results`` in any JSON shape (stored as sent).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_FAILED_TESTS = 1000
MAX_VERDICT_BYTES = 16 * 1024


class TestCounts(BaseModel):
    model_config = ConfigDict(extra="allow")
    __test__ = False

    passed: int = Field(0, ge=0)
    failed: int = Field(0, ge=0)
    skipped: int = Field(0, ge=0)


class Workflow(BaseModel):
    model_config = ConfigDict(extra="allow")

    schema_version: int = 1
    status: Literal["queued", "in_progress", "completed"]
    conclusion: str | None = None
    name: str | None = Field(None, max_length=200)
    url: str | None = Field(None, max_length=2000)
    run_id: str | None = Field(None, max_length=100)
    run_attempt: str | None = Field(None, max_length=20)
    job_name: str | None = Field(None, max_length=200)
    check_run_id: str | None = Field(None, max_length=100)
    started_at: str | None = None
    completed_at: str | None = None
    # any JSON, as CRCR forwards it (its action passes the TEST_RESULTS input through
    # json.loads: an object of counts usually, a list or a scalar sometimes); the counts
    # are read from it where it is CRCR's {passed, failed, skipped} object (see counts())
    test_results: Any = None
    artifact_url: str | None = Field(None, max_length=2000)

    @field_validator("schema_version", mode="before")
    @classmethod
    def _schema_version(cls, v: Any) -> int:
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if v != 1:
            raise ValueError("schema_version must be 1")
        return 1

    def counts(self) -> TestCounts | None:
        """``test_results`` as passed/failed/skipped counts, or None when it is another shape."""
        if not isinstance(self.test_results, dict):
            return None
        try:
            return TestCounts.model_validate(self.test_results)
        except ValueError:
            return None

    @field_validator("run_id", "run_attempt", "check_run_id", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class SuspectedUpstream(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pr: int | None = None
    commit: str | None = Field(None, max_length=64)
    reason: str | None = Field(None, max_length=300)


class VerdictEvidence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job: str = Field("", max_length=300)
    test: str = Field("", max_length=500)
    log_url: str | None = Field(None, pattern=r"^https://")
    excerpt: str = Field("", max_length=1000)


class Analyzer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = ""
    version: str = ""
    model: str = ""
    prompt_version: str = ""


class TriageVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    category: Literal["upstream", "backend", "infra", "flake", "unknown"]
    confidence: Literal["high", "medium", "low"]
    summary: str = Field(max_length=1000)
    suspected_upstream: SuspectedUpstream | None = None
    evidence: list[VerdictEvidence] = Field(default_factory=list, max_length=10)
    reproduced_on_retry: bool = False
    analyzer: Analyzer = Analyzer()
    analyzed_at: str


class CallbackBody(BaseModel):
    """``POST /callback`` body. Identity never comes from here: it comes from the token."""

    model_config = ConfigDict(extra="allow")

    event_type: str = Field("pull_request", max_length=100)
    delivery_id: str = Field(min_length=1, max_length=300)
    payload: dict[str, Any] | None = None
    workflow: Workflow
    failed_tests: list[str] | None = Field(None, max_length=MAX_FAILED_TESTS)
    # kept raw: a malformed verdict is dropped whole by the relay, never half-applied
    triage_verdict: dict[str, Any] | None = None
