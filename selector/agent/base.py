"""What every agent returns: a schema-validated answer per test, plus usage."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crcr.contracts.inventory import InventoryTest
from selector.agent.tools import Tools

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MAX_REASON_CHARS = 400


class AgentAnswer(BaseModel):
    """One decision; anything outside this shape is rejected."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=1000)
    mode: Literal["run", "skip", "xfail", "xfail_strict"]
    reason: str = Field(min_length=8, max_length=MAX_REASON_CHARS)
    confidence: Literal["high", "medium", "low"]

    @field_validator("reason")
    @classmethod
    def _plain(cls, v: str) -> str:
        if _CONTROL.search(v):
            raise ValueError("reason holds control characters")
        if not v.strip():
            raise ValueError("reason is empty")
        return v.strip()


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cost_usd: float = 0.0
    rejected: list[str] = field(default_factory=list)  # why answers were refused

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.requests += other.requests
        self.cost_usd += other.cost_usd
        self.rejected += other.rejected


class Agent(Protocol):
    name: str

    def decide(self, tests: list[InventoryTest], tools: Tools) -> tuple[dict[str, AgentAnswer], Usage]:
        """Answers for (a subset of) ``tests``; tests without an answer stay undecided."""
        ...


def validate_answers(raw: object, asked: set[str]) -> tuple[dict[str, AgentAnswer], list[str]]:
    """Keep only well-formed answers about tests that were asked, once each."""
    accepted: dict[str, AgentAnswer] = {}
    rejected: list[str] = []
    items = raw.get("decisions") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        return {}, ["answer is not an object with a 'decisions' list"]
    for i, item in enumerate(items[: len(asked) * 2 + 10]):
        try:
            answer = AgentAnswer.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            rejected.append(f"decision {i}: {'.'.join(map(str, first['loc']))}: {first['msg']}")
            continue
        if answer.id not in asked:
            rejected.append(f"decision {i}: {answer.id[:80]!r} was not asked about")
            continue
        if answer.id in accepted:
            rejected.append(f"decision {i}: {answer.id[:80]!r} answered twice")
            continue
        accepted[answer.id] = answer
    return accepted, rejected
