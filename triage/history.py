"""What triage reads: upstream trunk commits in landing order and the downstream runs on them.

A ``History`` is the same whatever it came from: the relay's database
(``triage.source.from_store``), results files (``from_results_files``), or a YAML history
file (``load_yaml``: the format of ``tests/triage/histories/``, also handy for demos).

A ``Run`` is one downstream job at one *dispatched* upstream SHA. ``tested_sha`` is the
torch commit the job says it tested; when it differs from the dispatched SHA the run is
no evidence for the dispatched commit (a missing baseline, never a pass).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crcr.errors import InputError

PASS_OUTCOMES = frozenset({"passed", "xfailed"})
FAIL_OUTCOMES = frozenset({"failed", "error", "xpassed"})
# "flaky" in a results file: failed, then passed on an in-job rerun
FLAKY_OUTCOMES = frozenset({"flaky"})

SUCCESS = "success"
FAILURE = "failure"
_PR_RE = re.compile(r"(?:\(#(\d{1,9})\)\s*$|/pull/(\d{1,9})\b)", re.M)


@dataclass(frozen=True)
class Commit:
    sha: str
    position: int
    pr: int | None = None
    title: str = ""
    push: str | None = None  # commits landed in one push (a ghstack stack) share this
    reverts: str | None = None
    renames: dict[str, str] = field(default_factory=dict)  # old test id -> new test id
    diff_summary: str = ""  # files the commit touched (from the push), for the advisor


@dataclass
class Run:
    """One downstream job at one dispatched upstream SHA."""

    sha: str
    job: str = "test"
    attempt: int = 1
    conclusion: str | None = None  # None: still running (pending carries no evidence)
    tested_sha: str | None = None  # None: the job did not say; taken as the dispatched SHA
    tests: dict[str, str] = field(default_factory=dict)  # test id -> outcome
    messages: dict[str, str] = field(default_factory=dict)  # test id -> failure excerpt
    log: str = ""
    started: float | None = None
    completed: float | None = None
    received: int | None = None
    rerun: bool = False  # requested by triage (a bisection or reproduction run)
    url: str | None = None
    has_results: bool = True  # False: the job ended without a per-test results upload

    @property
    def pending(self) -> bool:
        return self.conclusion is None

    @property
    def baseline_ok(self) -> bool:
        return self.tested_sha is None or self.tested_sha == self.sha


@dataclass
class RerunRecord:
    """A rerun triage already asked for (and whether its result is still awaited)."""

    sha: str
    outstanding: bool = True


@dataclass
class History:
    backend: str
    commits: list[Commit]
    runs: list[Run]
    requests: list[RerunRecord] = field(default_factory=list)
    upstream_repo: str = "pytorch/pytorch"

    def __post_init__(self) -> None:
        self.by_sha = {c.sha: c for c in self.commits}

    def position(self, sha: str) -> int | None:
        commit = self.by_sha.get(sha)
        return commit.position if commit else None

    def between(self, older: str, newer: str) -> list[Commit]:
        """Commits strictly between two SHAs in trunk order."""
        lo, hi = self.position(older), self.position(newer)
        if lo is None or hi is None:
            return []
        return self.commits[lo + 1:hi]


def pr_of_message(message: str) -> int | None:
    """The upstream PR of a landed commit message (``(#123)`` title suffix or a /pull/ link)."""
    for m in _PR_RE.finditer(message or ""):
        return int(m.group(1) or m.group(2))
    return None


def _str(value: Any, what: str) -> str:
    if value is None or isinstance(value, bool | dict | list):
        raise InputError(f"{what} must be a string", hint="see tests/triage/histories/README.md")
    return str(value)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def from_dict(data: dict[str, Any], where: str = "<history>") -> History:
    """A ``History`` from the YAML/JSON history format; InputError on anything malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("commits"), list) or not isinstance(data.get("runs"), list):
        raise InputError(f"{where}: a history needs `commits` and `runs` lists",
                         hint="see tests/triage/histories/README.md")
    commits: list[Commit] = []
    for i, c in enumerate(data["commits"]):
        if not isinstance(c, dict):
            raise InputError(f"{where}: commits[{i}] is not a mapping")
        renames = c.get("renames") or {}
        if not isinstance(renames, dict):
            raise InputError(f"{where}: commits[{i}].renames is not a mapping")
        pr = c.get("pr")
        commits.append(Commit(
            sha=_str(c.get("sha"), f"{where}: commits[{i}].sha"), position=i,
            pr=pr if isinstance(pr, int) and not isinstance(pr, bool) else None,
            title=str(c.get("title") or ""), push=None if c.get("push") is None else str(c["push"]),
            reverts=None if c.get("reverts") is None else str(c["reverts"]),
            renames={str(k): str(v) for k, v in renames.items()},
            diff_summary=str(c.get("diff") or "")[:2000],
        ))
    if len({c.sha for c in commits}) != len(commits):
        raise InputError(f"{where}: a commit SHA appears twice")
    runs: list[Run] = []
    for i, r in enumerate(data["runs"]):
        if not isinstance(r, dict):
            raise InputError(f"{where}: runs[{i}] is not a mapping")
        tests = r.get("tests") or {}
        if not isinstance(tests, dict):
            raise InputError(f"{where}: runs[{i}].tests is not a mapping")
        attempt = r.get("attempt", 1)
        runs.append(Run(
            sha=_str(r.get("sha"), f"{where}: runs[{i}].sha"),
            job=str(r.get("job") or "test"),
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 1,
            conclusion=None if r.get("conclusion") is None else str(r["conclusion"]),
            tested_sha=(str(r["tested"]) if r.get("tested") is not None else None) if "tested" in r else None,
            tests={str(k): str(v) for k, v in tests.items()},
            messages={str(k): str(v) for k, v in (r.get("messages") or {}).items()},
            log=str(r.get("log") or ""), started=_num(r.get("started")), completed=_num(r.get("completed")),
            received=r.get("received") if isinstance(r.get("received"), int) else None,
            rerun=bool(r.get("rerun", False)), url=r.get("url") if isinstance(r.get("url"), str) else None,
            has_results=bool(tests) or r.get("conclusion") == SUCCESS,
        ))
    requests = [RerunRecord(sha=str(q.get("sha")), outstanding=bool(q.get("outstanding", True)))
                for q in data.get("requests") or [] if isinstance(q, dict)]
    return History(backend=str(data.get("backend") or "backend"), commits=commits, runs=runs, requests=requests,
                   upstream_repo=str(data.get("upstream_repo") or "pytorch/pytorch"))


def load_yaml(path: Path | str) -> History:
    """Read a history file (YAML or JSON)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(f"history file {path} does not exist", hint="see tests/triage/histories/ for examples")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not YAML/JSON ({type(exc).__name__})") from exc
    return from_dict(data, str(path))


def from_results_files(paths: list[Path], backend: str, commits_file: Path | None = None) -> History:
    """Offline: a history from ``crcr run --results`` files.

    Each file is one run at its ``run.upstream_sha``. Trunk order comes from
    ``commits_file`` (one SHA per line, oldest first, e.g. ``git rev-list --reverse``);
    without it, the order the runs started in (an approximation: say so in the report).
    """
    from crcr.contracts.results import load_results

    loaded = []
    for path in paths:
        results = load_results(path)
        sha = results.run.upstream_sha
        if not sha:
            raise InputError(f"{path}: run.upstream_sha is not set, so the commit it tested is unknown",
                             hint="crcr run records it when torch was built from a known commit; pass --history instead")
        loaded.append((path, results, sha))
    if commits_file is not None:
        if not commits_file.is_file():
            raise InputError(f"commits file {commits_file} does not exist",
                             hint="git rev-list --reverse GOOD..BAD > commits.txt")
        order = [line.split()[0] for line in commits_file.read_text().splitlines() if line.strip()]
    else:
        order = []
        for _, _results, sha in sorted(loaded, key=lambda x: (x[1].run.started_at or "", x[2])):
            if sha not in order:
                order.append(sha)
    commits = [Commit(sha=s, position=i) for i, s in enumerate(dict.fromkeys(order))]
    known = {c.sha for c in commits}
    runs = []
    for path, results, sha in loaded:
        if sha not in known:
            raise InputError(f"{path}: upstream_sha {sha} is not in the commits file",
                             hint="list every commit of the range in --commits")
        failed_any = any(t.outcome in FAIL_OUTCOMES for t in results.tests)
        runs.append(Run(
            sha=sha, job=results.run.device or "test", tested_sha=sha,
            conclusion=FAILURE if failed_any else SUCCESS,
            tests={t.id: t.outcome for t in results.tests},
            messages={t.id: t.message for t in results.tests if t.message},
            log="\n".join(t.message or "" for t in results.failed())[:4000],
        ))
    return History(backend=backend, commits=commits, runs=runs)
