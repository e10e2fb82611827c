"""Signals: per test (and per job) the ordered outcomes over upstream trunk commits.

Every run is turned into observations, one per test it ran and one for the job itself:

- ``pass`` / ``fail``: evidence about the commit the run *tested*;
- ``flake``: a failure matching a known flaky rule, or a test the job itself reran
  into a pass (outcome ``flaky``): evidence of flakiness, never of a break;
- ``infra``: the machine failed (log matches an infra pattern, or the job ended
  without running tests): no evidence about the code;
- ``pending``: still running: no evidence;
- ``missing_baseline``: the job tested another torch commit than the one dispatched:
  no evidence for the dispatched commit (its results count for the commit it tested,
  when that commit is in the history).

A commit's status in a signal is ``P`` (only passes), ``F`` (only failures), ``X``
(both, or a flake: the commit cannot both break and not break a test) or ``None``
(no evidence). Tests renamed upstream (``Commit.renames``) are followed: results under
the old id before the rename continue the new id's series.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from triage.history import FAIL_OUTCOMES, FLAKY_OUTCOMES, PASS_OUTCOMES, SUCCESS, History, Run
from triage.rules import Rules

EVIDENCE = ("pass", "fail", "flake")
NO_RESULTS_CONCLUSIONS = frozenset({"cancelled", "timed_out", "startup_failure", "stale"})


@dataclass
class Obs:
    status: str  # pass | fail | flake | infra | pending | missing_baseline
    run: Run
    excerpt: str = ""
    reason: str = ""  # the infra kind or flaky rule that decided it


@dataclass
class Signal:
    key: str  # a test id, or "job:<name>" for job-level outcomes
    job: str
    points: dict[int, list[Obs]] = field(default_factory=lambda: defaultdict(list))

    @property
    def is_job(self) -> bool:
        return self.key.startswith("job:")

    def status_at(self, pos: int) -> str | None:
        kinds = {o.status for o in self.points.get(pos, ()) if o.status in EVIDENCE}
        if not kinds:
            return None
        if "flake" in kinds or kinds == {"pass", "fail"}:
            return "X"
        return "P" if kinds == {"pass"} else "F"

    def series(self) -> list[tuple[int, str]]:
        """(position, status) of every commit with evidence, oldest first."""
        out = []
        for pos in sorted(self.points):
            status = self.status_at(pos)
            if status is not None:
                out.append((pos, status))
        return out

    def observations(self, pos: int, status: str) -> list[Obs]:
        return [o for o in self.points.get(pos, ()) if o.status == status]


@dataclass
class Signals:
    tests: dict[str, Signal]
    jobs: dict[str, Signal]
    notes: list[str] = field(default_factory=list)
    missing_baselines: list[Obs] = field(default_factory=list)


def _canonical(history: History, test: str, pos: int) -> str:
    """The test's id as of the newest commit (renames landed after ``pos`` applied in order)."""
    for commit in history.commits[pos + 1:]:
        if commit.renames and test in commit.renames:
            test = commit.renames[test]
    return test


def _excerpt(text: str, limit: int = 600) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 15] + " ... [cut]"


def build(history: History, rules: Rules) -> Signals:
    """All signals of a history (runs in any arrival order; positions come from trunk order)."""
    tests: dict[str, Signal] = {}
    jobs: dict[str, Signal] = {}
    out = Signals(tests, jobs)
    renames = any(c.renames for c in history.commits)
    for run in history.runs:
        dispatched = history.position(run.sha)
        if dispatched is None:
            out.notes.append(f"a run of {run.job} names commit {run.sha[:12]}, which is not on the analysed trunk: ignored")
            continue
        job = jobs.setdefault(run.job, Signal(f"job:{run.job}", run.job))
        if run.pending:
            job.points[dispatched].append(Obs("pending", run))
            continue
        pos = dispatched
        if not run.baseline_ok:
            obs = Obs("missing_baseline", run, reason=f"tested {str(run.tested_sha)[:12]}, dispatched {run.sha[:12]}")
            job.points[dispatched].append(obs)
            out.missing_baselines.append(obs)
            tested = history.position(run.tested_sha or "")
            if tested is None:
                continue
            pos = tested  # the results are evidence for the commit that was really tested
        if run.conclusion != SUCCESS and (not run.has_results or run.conclusion in NO_RESULTS_CONCLUSIONS):
            kind = rules.infra_kind(run.log)
            rule = None if kind else rules.flaky_rule(run.job, run.log)
            if rule:
                job.points[pos].append(Obs("flake", run, _excerpt(run.log), rule))
            else:
                job.points[pos].append(Obs("infra", run, _excerpt(run.log), kind or "no test results"))
            if run.has_results:  # partial results of a killed job: its passes still count
                for test, outcome in run.tests.items():
                    if outcome in PASS_OUTCOMES:
                        name = _canonical(history, test, pos) if renames else test
                        tests.setdefault(name, Signal(name, run.job)).points[pos].append(Obs("pass", run))
            continue
        failed_here = False
        for test, outcome in run.tests.items():
            name = _canonical(history, test, pos) if renames else test
            if outcome in PASS_OUTCOMES:
                obs = Obs("pass", run)
            elif outcome in FLAKY_OUTCOMES:
                obs = Obs("flake", run, _excerpt(run.messages.get(test, "")), "passed on an in-job rerun")
            elif outcome in FAIL_OUTCOMES:
                text = run.messages.get(test) or run.log
                rule = rules.flaky_rule(run.job, text)
                kind = None if rule else rules.infra_kind(text)
                if rule:
                    obs = Obs("flake", run, _excerpt(text), rule)
                elif kind:
                    obs = Obs("infra", run, _excerpt(text), kind)
                else:
                    obs = Obs("fail", run, _excerpt(text))
                    failed_here = True
            else:  # skipped and friends say nothing about the commit
                continue
            tests.setdefault(name, Signal(name, run.job)).points[pos].append(obs)
        if run.conclusion == SUCCESS or failed_here:
            job.points[pos].append(Obs("pass", run))  # the job ran; failures are the tests' story
        else:
            kind = rules.infra_kind(run.log)
            job.points[pos].append(Obs("infra", run, _excerpt(run.log), kind) if kind
                                   else Obs("fail", run, _excerpt(run.log), "job failed without a failing test"))
    return out


def tests_seen_before(signals: Signals, pos: int) -> bool:
    """Did any job produce per-test results at a commit older than ``pos``?"""
    return any(p < pos and any(o.status == "pass" for o in obs) for s in signals.jobs.values()
               for p, obs in s.points.items())
