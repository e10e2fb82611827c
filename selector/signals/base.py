"""The one interface every pick signal implements, and what signals read.

A signal looks at one change (the PR's paths, hunks and text) and the universe of
candidate upstream test files, and returns a score in (0, 1] with a reason for each
file it has something to say about. Scores are deterministic: the same change and
universe give the same answer. The pick multiplies each score by the signal's weight
and adds them up; a signal in trial mode is scored and reported but not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from crcr.contracts.inventory import InventoryTest
from selector.covmap import CoverageMap
from selector.diffparse import FileDiff
from selector.importgraph import ImportGraph


@dataclass(frozen=True)
class Hit:
    score: float  # 0 < score <= 1
    why: str
    tests: tuple[str, ...] = ()  # test ids inside the file the signal points at, where it knows them


@dataclass
class Change:
    """One PR or push: changed paths (with hunks where a diff was read) and the PR text (data only)."""

    paths: list[str]
    diffs: list[FileDiff] = field(default_factory=list)
    text: str = ""

    @classmethod
    def from_diffs(cls, diffs: list[FileDiff], text: str = "", extra_paths: list[str] | None = None) -> Change:
        paths = sorted({d.path for d in diffs} | set(extra_paths or ()))
        return cls(paths=paths, diffs=diffs, text=text)


@dataclass
class Universe:
    """The candidate upstream test files and what signals may consult about them."""

    durations: dict[str, float]  # test/<file>.py -> seconds
    tests: dict[str, list[InventoryTest]] = field(default_factory=dict)  # file -> known tests
    graph: ImportGraph | None = None
    op_families: dict[str, set[str]] = field(default_factory=dict)  # OpInfo key -> OpInfo list names
    op_names: dict[str, set[str]] = field(default_factory=dict)  # a name code uses (relu, softmax) -> OpInfo keys
    failures: dict[str, int] = field(default_factory=dict)  # file -> failures in stored runs
    keyword_weights: dict[str, float] = field(default_factory=dict)  # path keyword -> precision
    coverage: CoverageMap | None = None  # test file -> torch functions it executes (selector.covmap)

    @property
    def files(self) -> list[str]:
        return sorted(self.durations)


class Signal:
    """Base class: ``name`` (kebab-case), ``weight`` (what one full score is worth), ``score``."""

    name = "signal"
    weight = 1.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:  # pragma: no cover - interface
        raise NotImplementedError


_DOC_PATH = re.compile(r"(^docs/|\.(md|rst|txt)$|^LICENSE|^NOTICE|^CODEOWNERS$|^\.github/(ISSUE_TEMPLATE|PULL_REQUEST))")


def is_docs_only(paths: list[str]) -> bool:
    """True when every changed path is documentation (and there is at least one)."""
    return bool(paths) and all(_DOC_PATH.search(p) for p in paths)
