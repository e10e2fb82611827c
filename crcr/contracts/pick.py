"""A pick: the plan's runnable tests ranked for one diff, each with a reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crcr.errors import ContractError, InputError


class PickedTest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    score: float = 0.0
    reason: str = Field(min_length=1)
    estimated_s: float | None = None


class DroppedTest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    reason: str = Field(min_length=1)


class SignalScore(BaseModel):
    """What one signal said about a picked file: its weighted score and why."""

    model_config = ConfigDict(extra="forbid")
    signal: str
    score: float
    why: str = Field(min_length=1)


class PickedFile(BaseModel):
    """An upstream test file in the pick, with the signals that put it there."""

    model_config = ConfigDict(extra="forbid")
    file: str = Field(description="upstream test file, e.g. test/test_nn.py")
    score: float = 0.0
    estimated_s: float = Field(0.0, description="measured duration (test-times.json or the backend's own results)")
    reason: str = Field(min_length=1)
    signals: list[SignalScore] = Field(default_factory=list, description="counted signals, highest first")
    trial: list[SignalScore] = Field(default_factory=list, description="signals in trial mode: scored, not counted")
    tests: list[str] = Field(default_factory=list, description="test ids of this file the plan knows, in run order")


class Pick(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    backend: str
    upstream_sha: str | None = None
    pr: int | None = None
    budget_s: float | None = None
    plan_digest: str | None = None
    tests: list[PickedTest] = Field(default_factory=list, description="in the order to run them")
    dropped: list[DroppedTest] = Field(default_factory=list, description="notable tests left out, and why")
    files: list[PickedFile] = Field(default_factory=list, description="upstream test files in the order to run them")
    total_s: float | None = Field(None, description="duration of every candidate file (for the selection rate)")
    empty_reason: str | None = Field(None, description="why nothing was picked, when nothing was")


def load_pick(path: Path | str) -> Pick:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"pick file {path} does not exist", hint="write one with: crcr select pick --out FILE")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ContractError(f"{path}: not valid JSON ({exc.msg} at line {getattr(exc, 'lineno', '?')})",
                            hint="pick files are JSON written by crcr select pick") from exc
    try:
        return Pick.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ContractError(f"{path}: {loc}: {first['msg']}", hint="pick files are JSON written by crcr select pick") from exc
