"""Selection plans: one YAML file per upstream test file, and the one resolver.

A plan file (``configs/selections/<backend>/<upstream file>.yaml``)::

    schema_version: 1
    backend: snpu
    upstream: {file: test/test_ops.py, torch: 2.13.0, git: cf30153c4c13}
    defaults: {mode: skip, reason: "not yet classified"}
    tests:
      - id: TestCommonPRIVATEUSE1::test_compare_cpu_softmax_snpu_float32
        mode: run
        reason: softmax is an snpu core kernel and float32 is supported
        source: rules
      - id: TestCommonPRIVATEUSE1::test_compare_cpu_.*_float64     # a pattern
        mode: skip
        reason: snpu has no float64 units
        source: reviewer

Entry ids are relative to the upstream file (``Class::method``). An id is matched
exactly first; otherwise as a pattern with ``re.fullmatch``. Resolution order:
source precedence (reviewer > logs > agent > rules), then an exact id beats a
pattern, then the later entry in the file wins. A test no entry matches gets the
file's ``defaults``. This module is the only implementation of that rule: the
runners' pytest plugin and the selector both call it.

Loading never constructs Python objects from YAML tags (PyYAML's safe loader, the C
one from libyaml when PyYAML has it: same documents, ~10x faster) and refuses files
over ``MAX_PLAN_BYTES``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crcr.errors import ContractError, InputError

Mode = Literal["run", "skip", "xfail", "xfail_strict"]
Source = Literal["rules", "agent", "logs", "reviewer"]
MODES: tuple[str, ...] = ("run", "skip", "xfail", "xfail_strict")
SOURCES: tuple[str, ...] = ("rules", "agent", "logs", "reviewer")
# higher wins
SOURCE_RANK: dict[str, int] = {"rules": 0, "agent": 1, "logs": 2, "reviewer": 3}
MAX_PLAN_BYTES = 8 * 1024 * 1024
PLAN_SCHEMA_VERSION = 1

_REGEX_CHARS = re.compile(r"[\\.*+?()\[\]{}|^$]")
# the safe loader, in C when PyYAML was built with libyaml (it constructs no Python objects from tags either)
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
GRAM = 4  # pattern literals are indexed by their first GRAM characters


@lru_cache(maxsize=65536)
def _compiled(pattern: str) -> re.Pattern[str]:
    """``re.compile`` with a cache as large as a plan (``re``'s own keeps 512 patterns)."""
    return re.compile(pattern)


def is_pattern(entry_id: str) -> bool:
    """True when an entry id uses regex syntax (and so may match many tests)."""
    return bool(_REGEX_CHARS.search(entry_id))


def required_literals(pattern: str) -> tuple[str, ...]:
    """Runs of plain characters (outside groups, classes and counts; escapes undone) that every
    ``re.fullmatch`` of ``pattern`` contains; none when the pattern alternates at the top."""
    if "(?" in pattern:
        return ()  # inline flags (case folding, verbose) or lookarounds: no safe literal
    runs: list[str] = []
    cur, depth, i = "", 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if depth == 0 and not nxt.isalnum():
                cur += nxt
            else:
                runs.append(cur)
                cur = ""
            i += 2
            continue
        if c == "|" and depth == 0:
            return ()
        if c in "*?{" and cur:
            cur = cur[:-1]  # the quantified character may be absent
        if c in "([{":
            depth += 1
        if c in ".*+?()[]{}|^$" or depth:
            runs.append(cur)
            cur = ""
        else:
            cur += c
        if c in ")]}":
            depth = max(0, depth - 1)
        i += 1
    runs.append(cur)
    return tuple(r for r in runs if r)


class Evidence(BaseModel):
    """Why logs (or a reviewer) set a mode: what was observed, where."""

    model_config = ConfigDict(extra="allow")

    run: str | None = None
    error: str | None = None
    excerpt: str | None = Field(None, max_length=2000)
    outcome: str | None = None
    commit: str | None = None


class PlanEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    mode: Mode
    reason: str
    source: Source = "rules"
    evidence: Evidence | None = None
    fingerprint: str | None = None
    confidence: Literal["high", "medium", "low"] | None = None
    proposal: Mode | None = Field(None, description="a mode the bot proposes but a person must apply")

    @field_validator("reason")
    @classmethod
    def _reason_not_empty(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("reason must say why (it is empty)")
        return v

    @field_validator("id")
    @classmethod
    def _id_compiles(cls, v: str) -> str:
        if is_pattern(v):
            try:
                _compiled(v)
            except re.error as exc:
                raise ValueError(f"id is not a valid pattern: {exc}") from exc
        return v

    @cached_property
    def regex(self) -> re.Pattern[str] | None:
        return _compiled(self.id) if is_pattern(self.id) else None


class PlanDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Mode = "skip"
    reason: str = "not yet classified"


class Upstream(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str = Field(min_length=1, description="upstream test file, e.g. test/test_ops.py")
    torch: str | None = None
    git: str | None = None


class PlanFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    backend: str = Field(min_length=1)
    upstream: Upstream
    defaults: PlanDefaults = PlanDefaults()
    tests: list[PlanEntry] = Field(default_factory=list)

    @cached_property
    def _index(self) -> tuple[dict[str, list[tuple[int, PlanEntry]]], list[tuple[int, PlanEntry]]]:
        exact: dict[str, list[tuple[int, PlanEntry]]] = {}
        patterns: list[tuple[int, PlanEntry]] = []
        for index, entry in enumerate(self.tests):
            exact.setdefault(entry.id, []).append((index, entry))
            if entry.regex is not None:
                patterns.append((index, entry))
        return exact, patterns

    @cached_property
    def _literals(self) -> dict[int, str]:
        # One plain substring each pattern's matches must contain, a cheap test before the regex
        # (about 5x faster on a plan with a thousand patterns). The leading run is usually the
        # class name every id of the file shares, so a later run is the selective one.
        out = {}
        for i, e in self._index[1]:
            runs = required_literals(e.id)
            out[i] = max(runs[1:], key=len) if len(runs) > 1 else (runs[0] if runs else "")
        return out

    @cached_property
    def _by_gram(self) -> tuple[dict[str, list[tuple[int, PlanEntry]]], list[tuple[int, PlanEntry]]]:
        # Patterns by the first GRAM characters of their literal: a test id is checked only
        # against patterns whose literal starts with one of its own GRAM-grams (a literal the
        # id contains starts with one of them), plus those with shorter literals.
        grams: dict[str, list[tuple[int, PlanEntry]]] = {}
        short: list[tuple[int, PlanEntry]] = []
        lits = self._literals
        for i, e in self._index[1]:
            if len(lits[i]) >= GRAM:
                grams.setdefault(lits[i][:GRAM], []).append((i, e))
            else:
                short.append((i, e))
        return grams, short

    @cached_property
    def _resolved(self) -> dict[str, Decision]:
        return {}

    def resolve(self, test_id: str) -> Decision:
        """The decision for ``test_id`` (relative ``Class::method``) in this file."""
        cached = self._resolved.get(test_id)
        if cached is not None:
            return cached
        decision = self._resolve(test_id)
        if len(self._resolved) < 1_000_000:
            self._resolved[test_id] = decision
        return decision

    def _resolve(self, test_id: str) -> Decision:
        exact, _ = self._index
        lits = self._literals
        grams, short = self._by_gram
        best: tuple[int, int, int] | None = None
        chosen: PlanEntry | None = None
        candidates = [(1, i, e) for i, e in exact.get(test_id, ())]
        maybe = list(short)
        if grams:
            for gram in {test_id[k:k + GRAM] for k in range(len(test_id) - GRAM + 1)}:
                maybe += grams.get(gram, ())
        candidates += [(0, i, e) for i, e in maybe
                       if lits[i] in test_id and e.id != test_id and e.regex.fullmatch(test_id)]
        for is_exact, index, entry in candidates:
            key = (SOURCE_RANK[entry.source], is_exact, index)
            if best is None or key > best:
                best, chosen = key, entry
        if chosen is None:
            return Decision(self.defaults.mode, self.defaults.reason, "default", None, self.upstream.file)
        return Decision(chosen.mode, chosen.reason, chosen.source, chosen, self.upstream.file)


@dataclass(frozen=True)
class Decision:
    """What a plan says about one test: mode, why, who said it, and the entry."""

    mode: str
    reason: str
    source: str  # rules | agent | logs | reviewer | default | unplanned
    entry: PlanEntry | None
    file: str | None

    @property
    def entry_id(self) -> str | None:
        return self.entry.id if self.entry else None


def split_test_id(test_id: str) -> tuple[str, str]:
    """``test/test_ops.py::Cls::test_x`` -> (``test/test_ops.py``, ``Cls::test_x``)."""
    if "::" not in test_id:
        raise InputError(f"test id {test_id!r} has no '::'", hint="ids look like test/test_ops.py::Class::test_name")
    file, rest = test_id.split("::", 1)
    return file, rest


class Plan:
    """All plan files of one backend, indexed by upstream file."""

    def __init__(self, backend: str, files: dict[str, PlanFile], digest: str, paths: dict[str, Path] | None = None):
        self.backend = backend
        self.files = files
        self.digest = digest
        self.paths = paths or {}

    def resolve(self, test_id: str) -> Decision:
        """Decision for a full test id; tests of files the plan does not cover are ``unplanned``."""
        file, rest = split_test_id(test_id)
        plan_file = self.files.get(file)
        if plan_file is None:
            return Decision("skip", f"no plan file covers {file}", "unplanned", None, None)
        return plan_file.resolve(rest)

    def __iter__(self) -> Iterator[PlanFile]:
        return iter(self.files[k] for k in sorted(self.files))


def _load_yaml_text(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader (SafeLoader or CSafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ContractError(f"{where}{line}: not valid YAML ({problem})", hint="fix the YAML syntax") from exc


def parse_plan_file(text: str, where: str = "<plan>") -> PlanFile:
    """Validate one plan file's text; errors name the file and the entry."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PLAN_BYTES:
        raise ContractError(
            f"{where}: plan file is larger than {MAX_PLAN_BYTES // (1024 * 1024)} MiB",
            hint="split it or use pattern entries for tests that share a decision",
        )
    data = _load_yaml_text(text, where)
    if not isinstance(data, dict):
        raise ContractError(f"{where}: expected a mapping with schema_version, backend, upstream, tests")
    try:
        return PlanFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        entry_hint = ""
        if first["loc"][:1] == ("tests",) and len(first["loc"]) > 1 and isinstance(first["loc"][1], int):
            tests = data.get("tests") or []
            idx = first["loc"][1]
            if idx < len(tests) and isinstance(tests[idx], dict):
                entry_hint = f" (entry id {tests[idx].get('id')!r})"
        raise ContractError(
            f"{where}: {loc}{entry_hint}: {first['msg']}",
            hint="modes are run, skip, xfail, xfail_strict; every entry needs a non-empty reason",
        ) from exc


def plan_files_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.yaml") if p.is_file())


def load_plan(directory: Path | str) -> Plan:
    """Load every plan file under ``directory`` (one backend)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"plan directory {directory} does not exist", hint="pass --plan configs/selections/<backend>")
    files: dict[str, PlanFile] = {}
    paths: dict[str, Path] = {}
    digest = hashlib.sha256()
    backend: str | None = None
    for path in plan_files_in(directory):
        raw = path.read_bytes()
        if len(raw) > MAX_PLAN_BYTES:
            raise ContractError(f"{path}: plan file is larger than {MAX_PLAN_BYTES // (1024 * 1024)} MiB")
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(raw)
        plan_file = parse_plan_file(raw.decode("utf-8", "replace"), str(path))
        if backend is None:
            backend = plan_file.backend
        elif plan_file.backend != backend:
            raise ContractError(f"{path}: backend {plan_file.backend!r} differs from {backend!r} in the same directory")
        if plan_file.upstream.file in files:
            raise ContractError(
                f"{path}: upstream file {plan_file.upstream.file} is also planned in {paths[plan_file.upstream.file]}",
                hint="keep one plan file per upstream test file",
            )
        files[plan_file.upstream.file] = plan_file
        paths[plan_file.upstream.file] = path
    if not files:
        raise InputError(f"plan directory {directory} holds no plan files (*.yaml)", hint="run crcr select plan first")
    return Plan(backend or "", files, digest.hexdigest()[:16], paths)


def plan_path_for(root: Path, upstream_file: str) -> Path:
    """``test/nn/test_conv.py`` -> ``<root>/nn/test_conv.yaml`` (mirrors upstream's layout)."""
    rel = upstream_file[len("test/"):] if upstream_file.startswith("test/") else upstream_file
    if rel.endswith(".py"):
        rel = rel[:-3]
    candidate = (root / f"{rel}.yaml").resolve()
    if not str(candidate).startswith(str(root.resolve())):
        raise InputError(f"upstream file {upstream_file!r} would be written outside {root}")
    return candidate


def decisions(plan: Plan, test_ids: Iterable[str]) -> dict[str, Decision]:
    return {tid: plan.resolve(tid) for tid in test_ids}
