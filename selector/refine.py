"""``crcr select refine``: run results update plan modes, with evidence, as ``source: logs``.

Policy (stated here and in docs/selector.md):

- a ``run`` test that fails or errors on the backend becomes ``skip`` when the error
  says the backend lacks the operation or dtype (``NotImplementedError`` and its
  subclasses such as ``SnpuUnsupportedOpError``, ``SnpuDtypeError``, "not implemented",
  "unsupported"), since running it buys nothing; otherwise ``xfail`` (non-strict), so a
  later fix shows up as an xpass;
- a ``skip`` test that passed every time it ran (a run with the plan not applied)
  becomes ``run``;
- an ``xfail``/``xfail_strict`` test that passes (``xpassed``/``passed``) gets a
  promotion proposal (``proposal: run``); its mode stays until a person applies it;
- a test with mixed outcomes on one commit (passed in one run or attempt, failed in
  another; or reported ``flaky``) becomes ``xfail`` (non-strict tolerates both) with
  the reason ``flaky`` and the runs that disagree;
- a ``reviewer`` entry is never changed; the conflict is reported instead.

Every observation is also appended to the history file ``explain`` reads.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crcr.contracts.plan import Decision, Plan, plan_path_for, split_test_id
from crcr.contracts.results import RunResults, TestResult
from crcr.fileio import atomic_write_text
from selector.plaintext import plain
from selector.planfiles import merge_plan_text, write_plan_file

# Errors that say the backend lacks the operation or the dtype (snpu: SnpuUnsupportedOpError is a
# NotImplementedError, SnpuDtypeError a TypeError): running such a test again buys nothing.
UNSUPPORTED = re.compile(
    r"NotImplementedError|UnsupportedOp|DtypeError|not implemented|no kernel|unsupported|not supported|refuses", re.I)
FAILED = ("failed", "error")
PASSED = ("passed", "xpassed")


@dataclass
class Observation:
    test_id: str
    outcome: str
    run: str
    commit: str | None
    error: str | None
    excerpt: str | None


@dataclass
class RefineReport:
    observed: int = 0
    changed: list[tuple[str, str, str]] = field(default_factory=list)  # id, old mode, new mode
    proposals: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    reviewer_conflicts: list[str] = field(default_factory=list)
    unplanned: int = 0
    files_written: int = 0


def observations(results: list[RunResults]) -> dict[str, list[Observation]]:
    obs: dict[str, list[Observation]] = defaultdict(list)
    for r in results:
        commit = r.run.upstream_sha or r.run.torch_git
        for t in r.tests:
            outcomes = t.attempts or [t.outcome]
            for outcome in outcomes:
                obs[t.id].append(Observation(t.id, outcome, r.run.run_id, commit, t.error_class, _excerpt(t)))
            if t.attempts and t.outcome not in t.attempts:
                obs[t.id].append(Observation(t.id, t.outcome, r.run.run_id, commit, t.error_class, _excerpt(t)))
    return obs


def _excerpt(t: TestResult) -> str | None:
    if not t.message:
        return None
    line = next((ln for ln in t.message.splitlines() if ln.strip()), "")
    return line[:300]


def _is_flaky(obs: list[Observation]) -> tuple[bool, str | None]:
    if any(o.outcome == "flaky" for o in obs):
        return True, next(o.commit for o in obs if o.outcome == "flaky")
    by_commit: dict[str | None, set[str]] = defaultdict(set)
    for o in obs:
        if o.outcome in PASSED:
            by_commit[o.commit].add("pass")
        elif o.outcome in FAILED:
            by_commit[o.commit].add("fail")
    for commit, kinds in by_commit.items():
        if kinds == {"pass", "fail"}:
            return True, commit
    return False, None


def _evidence(o: Observation) -> dict[str, Any]:
    ev: dict[str, Any] = {"run": o.run, "outcome": o.outcome}
    if o.error:
        ev["error"] = o.error
    if o.excerpt:
        ev["excerpt"] = o.excerpt
    if o.commit:
        ev["commit"] = o.commit
    return ev


def refine_entries(plan: Plan, obs: dict[str, list[Observation]], report: RefineReport) -> dict[str, list[dict[str, Any]]]:
    """New or updated ``logs`` entries per upstream file."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tid in sorted(obs):
        items = obs[tid]
        report.observed += 1
        if "::" not in tid:
            continue  # not a pytest id; nothing in a plan can name it
        file, rel = split_test_id(tid)
        decision = plan.resolve(tid)
        if decision.source == "unplanned":
            report.unplanned += 1
            continue
        flaky, commit = _is_flaky(items)
        last = items[-1]
        failing = next((o for o in reversed(items) if o.outcome in FAILED), None)
        entry: dict[str, Any] | None = None
        if flaky:
            runs = sorted({o.run for o in items})
            entry = {"id": rel, "mode": "xfail", "source": "logs",
                     "reason": f"[logs:flaky] mixed outcomes on commit {commit or 'unknown'} across runs {', '.join(runs[:4])}",
                     "evidence": _evidence(failing or last)}
            report.flaky.append(tid)
        elif decision.mode == "run" and failing is not None and last.outcome in FAILED:
            unsupported = bool(UNSUPPORTED.search(f"{failing.error or ''} {failing.excerpt or ''}"))
            mode = "skip" if unsupported else "xfail"
            why = "the backend lacks the operation" if unsupported else "it fails on the backend"
            entry = {"id": rel, "mode": mode, "source": "logs",
                     "reason": f"[logs:failure] {why}: {plain(failing.error or 'failure')} in run {failing.run}",
                     "evidence": _evidence(failing)}
        elif decision.mode == "skip" and all(o.outcome in PASSED for o in items):
            # Only a run with the plan not applied executes a skipped test; if it passed every
            # time, the bot's skip was wrong (a reviewer's skip is kept, below).
            entry = {"id": rel, "mode": "run", "source": "logs",
                     "reason": f"[logs:pass] planned skip but passed in run {last.run} ({len(items)} of {len(items)} passed)",
                     "evidence": _evidence(last)}
        elif decision.mode in ("xfail", "xfail_strict") and last.outcome in PASSED:
            entry = {"id": rel, "mode": decision.mode, "source": "logs", "proposal": "run",
                     "reason": f"[logs:xpass] expected to fail but passed in run {last.run}; proposed for promotion to run",
                     "evidence": _evidence(last)}
            report.proposals.append(tid)
        if entry is None:
            continue
        if decision.source == "reviewer":
            report.reviewer_conflicts.append(f"{tid}: reviewer says {decision.mode}; logs suggest {entry['mode']}"
                                             + (" (promotion)" if entry.get("proposal") else ""))
            continue
        if entry["mode"] != decision.mode:
            report.changed.append((tid, decision.mode, entry["mode"]))
        out[file].append(entry)
    return out


def append_history(path: Path, obs: dict[str, list[Observation]]) -> None:
    lines = [json.dumps({"id": o.test_id, "outcome": o.outcome, "run": o.run, "commit": o.commit, "error": o.error,
                         "excerpt": o.excerpt}, sort_keys=True)
             for tid in sorted(obs) for o in obs[tid]]
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    atomic_write_text(path, old + "".join(line + "\n" for line in lines))


def refine(plan_dir: Path, plan: Plan, results: list[RunResults], history: Path | None = None,
           dry_run: bool = False) -> RefineReport:
    report = RefineReport()
    obs = observations(results)
    by_file = refine_entries(plan, obs, report)
    if dry_run:
        return report
    for file, entries in sorted(by_file.items()):
        path = plan.paths.get(file) or plan_path_for(plan_dir, file)
        existing = path.read_text(encoding="utf-8")
        pf = plan.files[file]
        header = {"backend": pf.backend, "upstream": {"file": file}}
        text = merge_plan_text(existing, header, entries, str(path), owned=frozenset({"logs"}), delete_missing=False)
        if text != existing:
            write_plan_file(path, text)
            report.files_written += 1
    if history is not None:
        append_history(history, obs)
    return report


def accuracy(plan: Plan, results: list[RunResults]) -> dict[str, Any]:
    """Share of plan modes confirmed by execution of every test (the plan not applied).

    run is confirmed by a pass; skip and xfail by a failure or error; an upstream xfail
    (outcome ``xfailed``) confirms either.
    """
    confirmed = total = 0
    wrong: dict[str, int] = defaultdict(int)
    for r in results:
        for t in r.tests:
            if t.outcome in ("skipped", "flaky"):
                continue
            d = plan.resolve(t.id)
            if d.source == "unplanned":
                continue
            total += 1
            # xfailed: upstream itself expects the failure; it keeps CI green under run and it
            # confirms that skipping it loses nothing
            ok = (d.mode == "run" and t.outcome in (*PASSED, "xfailed")) or (d.mode != "run" and t.outcome in (*FAILED, "xfailed"))
            if ok:
                confirmed += 1
            else:
                wrong[f"{d.mode} but {t.outcome}"] += 1
    return {"tests": total, "confirmed": confirmed, "accuracy": confirmed / total if total else 0.0,
            "wrong": dict(sorted(wrong.items()))}


class RecordedPlan:
    """The plan as the runs applied it: each test's mode, reason and source as its newest
    result recorded them (``plan_mode``/``plan_reason``/``plan_source``), for a place that
    has results but not the plan files (the relay's dashboard)."""

    def __init__(self, results: list[RunResults]) -> None:
        self.decisions: dict[str, Decision] = {}
        for r in results:
            for t in r.tests:
                if t.plan_mode and "::" in t.id:
                    self.decisions[t.id] = Decision(t.plan_mode, t.plan_reason or "", t.plan_source or "default",
                                                    None, t.id.split("::", 1)[0])

    def resolve(self, test_id: str) -> Decision:
        return self.decisions.get(test_id) or Decision("skip", "no result recorded the plan's mode", "unplanned",
                                                       None, None)


def proposals(results: list[RunResults]) -> dict[str, Any]:
    """What ``crcr select refine --dry-run`` would propose from ``results`` (oldest first),
    against the plan as those runs applied it: one row per test whose entry would change
    (mode, or a promotion proposal), plus the reviewer entries refine would keep."""
    plan = RecordedPlan(results)
    report = RefineReport()
    by_file = refine_entries(plan, observations(results), report)  # type: ignore[arg-type]
    rows = []
    for file, entries in sorted(by_file.items()):
        for e in entries:
            tid = f"{file}::{e['id']}"
            now = plan.resolve(tid)
            kind = ("flaky" if tid in report.flaky else "promotion" if e.get("proposal")
                    else "mode" if e["mode"] != now.mode else "evidence")
            rows.append({"test": tid, "kind": kind, "mode": now.mode, "source": now.source,
                         "proposed_mode": e.get("proposal") or e["mode"], "reason": e["reason"],
                         "evidence": e.get("evidence") or {}})
    return {"observed": report.observed, "runs": len(results), "proposals": rows,
            "reviewer_conflicts": list(report.reviewer_conflicts)}


def _may_change(t: dict[str, Any]) -> bool:
    """Whether this observation can make ``refine_entries`` write an entry for its test: a
    failure, error or flaky outcome, or a pass of a test the plan does not run."""
    outcome = t.get("outcome")
    return outcome in (*FAILED, "flaky") or (outcome in PASSED and t.get("plan_mode") not in (None, "run"))


def proposals_from_bodies(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """``proposals`` over stored results bodies (crcr results JSON, oldest first); a body the
    results contract refuses raises ContractError. Only the tests some observation of which
    can change an entry are parsed (a full-suite upload is mostly passes of run tests, which
    refine leaves alone): the proposals are the same, at a fraction of the cost."""
    from crcr.contracts.results import parse_results

    observed: set[str] = set()
    wanted: set[str] = set()
    for body in bodies:
        for t in body.get("tests") or [] if isinstance(body, dict) else []:
            if isinstance(t, dict):
                observed.add(str(t.get("id")))
                if _may_change(t):
                    wanted.add(str(t.get("id")))
    narrowed = [{**b, "tests": [t for t in b.get("tests") or [] if isinstance(t, dict) and str(t.get("id")) in wanted]}
                if isinstance(b, dict) else b for b in bodies]
    out = proposals([parse_results(b, f"results upload {i + 1}") for i, b in enumerate(narrowed)])
    out["observed"] = len(observed)
    return out
