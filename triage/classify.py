"""Classification: what each signal says, and the one call for the backend, with evidence.

Per signal (``classify_signal``), over the commits with evidence, oldest first:

- **new break**: the newest commits fail; the last passing commit before them is the
  *last good*, the first failing one the *first bad*. Commits between them without
  evidence (untested, pending, infra, missing baseline) make a *gap*: the suspect is a
  range until bisection fills it. A break is *confirmed* when the failure at the first
  bad commit was reproduced (two failing runs) or is *sandwiched*: a run of the same
  test on an older commit started before the failure and finished after it, so the pool
  was healthy around it (an outage fails everything in a time window).
- **flaky**: a commit with both a pass and a failure (or a known flaky rule, or an
  in-job rerun that passed), or a single failing commit between passing ones.
- **born red**: fails since it first appeared and never passed, while the job had
  results before: a backend gap, not an upstream regression.
- **recovered**: failed on two or more consecutive commits, passes again now.
- **no baseline**: fails with nothing green before it: no upstream-fault verdict.

The backend's call (``classify``) takes the earliest open break (it is the root of
the others), else born red, infra, flaky, recovered, in that order. Pending runs and
missing baselines never count as passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from triage.history import Commit, History
from triage.rules import Rules
from triage.signals import Obs, Signal, Signals, build, tests_seen_before

# autorevert's own thresholds for acting with confidence: >= 3 failing, >= 2 passing commits
MIN_FAILURES_HIGH = 3
MIN_SUCCESSES_HIGH = 2
CATEGORY = {"new_break": "upstream", "recovered": "upstream", "born_red": "backend", "infra": "infra",
            "flaky": "flake", "none": "unknown", "no_baseline": "unknown"}


@dataclass
class Finding:
    signal: Signal
    kind: str  # new_break | flaky | born_red | recovered | no_baseline | ok
    last_good: int | None = None
    first_bad: int | None = None
    gap: list[int] = field(default_factory=list)
    n_fail: int = 0  # failing commits in the open block
    n_pass: int = 0  # passing commits before it
    reproduced: bool = False
    sandwiched: bool = False
    flaky_before: bool = False  # failed intermittently earlier: needs a reproduction and >= 3 failing commits
    why: str = ""

    @property
    def confirmed(self) -> bool:
        return self.reproduced or self.sandwiched


@dataclass
class Analysis:
    """The backend's call. ``action``: revert | forward_fix | skip_in_plan | ignore_flake |
    infra_ticket | bisect | wait | none."""

    backend: str
    kind: str
    category: str
    confidence: str
    action: str
    summary: str
    suspect: Commit | None = None
    last_good: Commit | None = None
    first_bad: Commit | None = None
    gap: list[Commit] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # the signals behind the call
    others: list[Finding] = field(default_factory=list)  # everything else not ok
    infra: list[Obs] = field(default_factory=list)
    missing_baselines: list[Obs] = field(default_factory=list)
    reproduced: bool = False
    sandwiched: bool = False
    reruns: list = field(default_factory=list)  # triage.bisect.RerunPlan, filled by bisect.plan
    retried: list[str] = field(default_factory=list)  # what was already rerun, for the report
    notes: list[str] = field(default_factory=list)
    advisor: dict | None = None

    @property
    def failing_tests(self) -> dict[str, str]:
        """Test -> SHA of its first failing commit (open breaks and born-red tests)."""
        out = {}
        for f in self.findings:
            if f.kind in ("new_break", "born_red", "no_baseline") and f.first_bad is not None and not f.signal.is_job:
                out[f.signal.key] = self._commits[f.first_bad].sha
        return out

    _commits: list[Commit] = field(default_factory=list, repr=False)


def _blocks(series: list[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """Runs of equal status: (start index, end index inclusive, status)."""
    out: list[tuple[int, int, str]] = []
    for i, (_, status) in enumerate(series):
        if out and out[-1][2] == status:
            out[-1] = (out[-1][0], i, status)
        else:
            out.append((i, i, status))
    return out


def _sandwiched(signal: Signal, first_bad: int) -> bool:
    fails = signal.observations(first_bad, "fail")
    passes = [o for pos, obs in signal.points.items() if pos < first_bad for o in obs if o.status == "pass"]
    for f in fails:
        if f.run.started is None or f.run.completed is None:
            continue
        for p in passes:
            if p.run.started is not None and p.run.completed is not None \
                    and p.run.started <= f.run.started and p.run.completed >= f.run.completed:
                return True
    return False


def classify_signal(signal: Signal, history: History, signals: Signals) -> Finding:
    series = signal.series()
    if not any(status in ("F", "X") for _, status in series):
        return Finding(signal, "ok")
    blocks = _blocks(series)
    last = blocks[-1]
    if last[2] == "F":
        first_bad = series[last[0]][0]
        n_fail = last[1] - last[0] + 1
        if last[0] == 0:
            if tests_seen_before(signals, first_bad) and not signal.is_job:
                return Finding(signal, "born_red", first_bad=first_bad, n_fail=n_fail,
                               why="never passed since it first ran; the job had results before")
            return Finding(signal, "no_baseline", first_bad=first_bad, n_fail=n_fail,
                           why="no green run before the first failure: no baseline to blame a commit against")
        prev_pos, prev_status = series[last[0] - 1]
        if prev_status == "X":
            return Finding(signal, "flaky", first_bad=first_bad, why="passed and failed on one commit just before")
        n_pass = sum(1 for _, s in series[: last[0]] if s == "P")
        gap = list(range(prev_pos + 1, first_bad))
        reproduced = len(signal.observations(first_bad, "fail")) >= 2
        # a test that already failed intermittently (a one-commit failure or a pass-and-fail
        # commit earlier in the window) needs more than a short streak to be called broken
        flaky_before = any(b[2] == "X" or (b[2] == "F" and b[0] == b[1]) for b in blocks[:-1])
        return Finding(signal, "new_break", last_good=prev_pos, first_bad=first_bad, gap=gap, n_fail=n_fail,
                       n_pass=n_pass, reproduced=reproduced, sandwiched=_sandwiched(signal, first_bad),
                       flaky_before=flaky_before)
    if last[2] == "X":
        return Finding(signal, "flaky", first_bad=series[last[0]][0], why="passed and failed on one commit")
    # passing now: the most recent bad block decides; two separate episodes are a pattern of
    # intermittent failure, not a break that was fixed
    bad_blocks = [b for b in blocks if b[2] != "P"]
    if len(bad_blocks) >= 2:
        return Finding(signal, "flaky", first_bad=series[bad_blocks[-1][0]][0],
                       why=f"{len(bad_blocks)} separate failing episodes, passing in between")
    bad = bad_blocks[-1]
    if bad[2] == "X" or any(s == "X" for _, s in series[bad[0]:]):
        return Finding(signal, "flaky", first_bad=series[bad[0]][0], why="passed and failed on one commit")
    start, end = series[bad[0]][0], series[bad[1]][0]
    fixed_by = series[bad[1] + 1][0]
    reverted = any(c.reverts == history.commits[start].sha for c in history.commits[end + 1: fixed_by + 1])
    if bad[0] == bad[1] and not reverted:
        return Finding(signal, "flaky", first_bad=start, why="one failing commit between passing ones")
    last_good = series[bad[0] - 1][0] if bad[0] > 0 else None
    return Finding(signal, "recovered", last_good=last_good, first_bad=start, n_fail=bad[1] - bad[0] + 1,
                   gap=list(range(last_good + 1, start)) if last_good is not None else [],
                   why=f"failing from {history.commits[start].sha[:12]}, passing again since "
                       f"{history.commits[fixed_by].sha[:12]}")


def _infra_streak(signals: Signals) -> int:
    """The longest run of consecutive (in start time) infra failures of one job: an outage, not a blip."""
    best = 0
    for s in signals.jobs.values():
        obs = sorted((o for v in s.points.values() for o in v if o.status in ("pass", "fail", "infra")),
                     key=lambda o: (o.run.started or 0.0))
        run = 0
        for o in obs:
            run = run + 1 if o.status == "infra" else 0
            best = max(best, run)
    return best


def _infra_call(history: History, infra: list[Obs], notable: list[Finding], base: dict, streak: int) -> Analysis:
    kinds = sorted({o.reason for o in infra})
    shas = sorted({o.run.sha for o in infra}, key=lambda s: history.position(s) or 0)
    return Analysis(kind="infra", category="infra", confidence="high" if streak >= 2 else "low",
                    action="infra_ticket",
                    summary=f"{len(infra)} job run(s) failed for infrastructure reasons ({', '.join(kinds)}) at "
                            f"{len(shas)} commit(s), {shas[0][:12]}..{shas[-1][:12]}"
                            + (f", {streak} in a row" if streak >= 2 else "")
                            + "; no test failure points at an upstream commit.",
                    findings=[], others=notable, **base)


def _infra_obs(signals: Signals) -> list[Obs]:
    return [o for s in signals.jobs.values() for obs in s.points.values() for o in obs if o.status == "infra"]


def classify(history: History, rules: Rules, *, revert_window: int = 100) -> Analysis:
    """The backend's call over ``history`` (see the module docstring). No reruns planned here."""
    signals = build(history, rules)
    findings = [classify_signal(s, history, signals) for s in signals.tests.values()]
    findings += [classify_signal(s, history, signals) for s in signals.jobs.values()]
    # a job-level failure explained by an infra or test observation never stands alone
    findings = [f for f in findings if not (f.signal.is_job and f.kind in ("flaky", "born_red"))]
    commits = history.commits
    infra = _infra_obs(signals)
    notable = [f for f in findings if f.kind != "ok"]
    base = dict(backend=history.backend, infra=infra, missing_baselines=signals.missing_baselines,
                notes=list(signals.notes), _commits=commits,
                retried=[f"{r.job} at {r.sha[:12]} (attempt {r.attempt}{', rerun requested by triage' if r.rerun else ''}):"
                         f" {r.conclusion or 'pending'}" for r in history.runs if r.rerun or r.attempt > 1])

    breaks = [f for f in notable if f.kind == "new_break"]
    if breaks:
        root = min(breaks, key=lambda f: (f.first_bad, f.last_good))
        group = [f for f in breaks if (f.first_bad, f.last_good) == (root.first_bad, root.last_good)]
        others = [f for f in notable if f not in group]
        gap = [commits[p] for p in root.gap]
        reproduced = any(f.reproduced for f in group)
        sandwiched = any(f.sandwiched for f in group)
        n_fail = max(f.n_fail for f in group)
        n_pass = max(f.n_pass for f in group)
        first_bad, last_good = commits[root.first_bad], commits[root.last_good]
        names = ", ".join(f.signal.key for f in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
        if gap:
            return Analysis(kind="new_break", category="upstream", confidence="low", action="bisect",
                            summary=f"{names} pass at {last_good.sha[:12]} and fail from {first_bad.sha[:12]}; "
                                    f"{len(gap)} commit(s) between them have no usable result, so the suspect is "
                                    f"the range {gap[0].sha[:12]}..{first_bad.sha[:12]}.",
                            last_good=last_good, first_bad=first_bad, gap=gap, findings=group, others=others,
                            reproduced=reproduced, sandwiched=sandwiched, **base)
        flaky_before = all(f.flaky_before for f in group)
        # a test with an intermittent past is only broken when reproduced (a sandwich proves
        # healthy runners, not a deterministic failure)
        confirmed = reproduced if flaky_before else (reproduced or sandwiched)
        how = ("reproduced on a second run" if reproduced else "") + \
              (" and " if reproduced and sandwiched else "") + \
              ("sandwiched in time between passing runs (the runners were healthy)" if sandwiched else "")
        if not confirmed:
            return Analysis(kind="new_break", category="upstream", confidence="low", action="bisect",
                            summary=f"{names} pass at {last_good.sha[:12]} and fail from {first_bad.sha[:12]}, "
                                    "but the failure is neither reproduced nor sandwiched between passing runs: "
                                    "a rerun of the first failing commit is needed before blaming it.",
                            suspect=first_bad, last_good=last_good, first_bad=first_bad, findings=group,
                            others=others, **base)
        if n_fail < (MIN_FAILURES_HIGH if flaky_before else 2):
            return Analysis(kind="new_break", category="upstream", confidence="low", action="wait",
                            summary=f"{names} fail at {first_bad.sha[:12]} ({how}), but only {n_fail} commit(s) have failed so far"
                                    + (" and the test failed intermittently before" if flaky_before else "")
                                    + ": not yet a persistent break; waiting for the next trunk runs.",
                            suspect=first_bad, last_good=last_good, first_bad=first_bad, findings=group,
                            others=others, reproduced=reproduced, sandwiched=sandwiched, **base)
        confidence = "high" if n_fail >= MIN_FAILURES_HIGH and n_pass >= MIN_SUCCESSES_HIGH else "medium"
        newer = len(commits) - 1 - root.first_bad
        action = "revert" if first_bad.pr is not None and newer <= revert_window else "forward_fix"
        summary = (f"{names} broke at {first_bad.sha[:12]}"
                   + (f" (PR #{first_bad.pr})" if first_bad.pr else "")
                   + f": passing at {last_good.sha[:12]} (the commit before), failing on {n_fail} commit(s) since; "
                   + how + ".")
        return Analysis(kind="new_break", category="upstream", confidence=confidence, action=action, summary=summary,
                        suspect=first_bad, last_good=last_good, first_bad=first_bad, findings=group, others=others,
                        reproduced=reproduced, sandwiched=sandwiched, **base)

    born = [f for f in notable if f.kind == "born_red"]
    if born:
        first = commits[min(f.first_bad for f in born)]
        return Analysis(kind="born_red", category="backend", confidence="high" if all(f.n_fail >= 2 for f in born)
                        else "medium", action="skip_in_plan",
                        summary=f"{len(born)} test(s) have failed on this backend since they first ran "
                                f"(first at {first.sha[:12]}) and never passed: a backend gap; skip them in the "
                                "backend's plan until supported.",
                        findings=born, others=[f for f in notable if f not in born], **base)
    streak = _infra_streak(signals)
    if infra and streak >= 2:
        return _infra_call(history, infra, notable, base, streak)
    recovered = [f for f in notable if f.kind == "recovered"]
    if recovered:
        root = min(recovered, key=lambda f: f.first_bad)
        suspect = commits[root.first_bad] if root.last_good is not None and not root.gap else None
        return Analysis(kind="recovered", category="upstream", confidence="medium", action="none",
                        summary=f"{len(recovered)} test(s) broke and recovered on their own ({root.why}); "
                                "nothing to do now.",
                        suspect=suspect, first_bad=commits[root.first_bad], findings=recovered,
                        others=[f for f in notable if f not in recovered], **base)
    flaky = [f for f in notable if f.kind == "flaky"]
    if flaky:
        return Analysis(kind="flaky", category="flake", confidence="medium", action="ignore_flake",
                        summary=f"{len(flaky)} test(s) failed intermittently ({flaky[0].why}); no commit is to blame.",
                        findings=flaky, others=[f for f in notable if f not in flaky], **base)
    if infra:
        return _infra_call(history, infra, notable, base, streak)
    nob = [f for f in notable if f.kind == "no_baseline"]
    if nob:
        return Analysis(kind="no_baseline", category="unknown", confidence="low", action="none",
                        summary=f"{len(nob)} test(s) fail with no green run before them: no baseline, so no "
                                "upstream commit can be blamed.", findings=nob, **base)
    return Analysis(kind="none", category="unknown", confidence="high", action="none",
                    summary="no failures with evidence in the analysed range.", **base)
