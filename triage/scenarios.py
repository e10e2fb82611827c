"""Seeded scenario histories with known truth, and the rerun simulator that answers reruns.

Used by ``tests/triage/test_scenarios.py`` (seeds 0-299: the seeds the classifier was
checked and tuned against) and ``benchmarks/triage_eval.py`` (seeds from 100000 up,
never used while tuning). Each scenario is a trunk of N commits landed in pushes (some
pushes carry several commits and dispatch only the head, as ghstack stacks do), a
backend job per dispatched commit with per-test results, noise (flaky tests failing at
random, rare runner losses, results arriving out of order), and one of:

- ``break``: tests break at commit k and stay broken;
- ``flaky``: a test fails at random, nothing breaks;
- ``infra``: the runner pool dies for a time window (every backend alike);
- ``born_red``: a test added at commit k fails from its first run;
- ``gap``: a break at k inside 2-16 untested commits (a stack landed in one push, or a
  nightly-only backend): bisection must find k;
- ``recovered``: a break at k fixed forward at a later commit;
- ``missing_baseline``: a break at k whose previous commit's run tested another torch.

``truth`` gives the expected kind, suspect and action after the reruns triage asks
for are answered by ``Scenario.rerun`` (the same truth, the same noise).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from triage.history import Commit, History, RerunRecord, Run

KINDS = ("break", "flaky", "infra", "born_red", "gap", "recovered", "missing_baseline")
EXPECTED = {  # scenario -> (kind, category, action)
    "break": ("new_break", "upstream", "revert"),
    "flaky": ("flaky", "flake", "ignore_flake"),
    "infra": ("infra", "infra", "infra_ticket"),
    "born_red": ("born_red", "backend", "skip_in_plan"),
    "gap": ("new_break", "upstream", "revert"),
    "recovered": ("recovered", "upstream", "none"),
    "missing_baseline": ("new_break", "upstream", "revert"),
}
INFRA_LOGS = ("The self-hosted runner lost communication with the server.",
              "The runner has received a shutdown signal.", "Error: The operation was canceled.")


@dataclass
class Truth:
    scenario: str
    kind: str
    category: str
    action: str
    suspect: str | None
    gap_size: int = 0  # commits between the organic last good and first bad (what a naive strategy reruns)


@dataclass
class Scenario:
    seed: int
    kind: str
    history: History
    truth: Truth
    broken: set[str] = field(default_factory=set)
    flaky: set[str] = field(default_factory=set)
    flaky_rate: float = 0.0
    break_at: int | None = None
    fixed_at: int | None = None
    born: str | None = None
    tests: list[str] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    clock: float = 0.0

    def outcomes(self, pos: int) -> dict[str, str]:
        out = {}
        for t in self.tests:
            if t == self.born and self.break_at is not None and pos < self.break_at:
                continue
            failing = t in self.broken and self.break_at is not None and pos >= self.break_at \
                and (self.fixed_at is None or pos < self.fixed_at)
            if t == self.born and self.break_at is not None and pos >= self.break_at:
                failing = True
            if t in self.flaky and self.rng.random() < self.flaky_rate:
                failing = True
            out[t] = "failed" if failing else "passed"
        return out

    def run_at(self, pos: int, *, attempt: int = 1, rerun: bool = False, started: float | None = None) -> Run:
        sha = self.history.commits[pos].sha
        tests = self.outcomes(pos)
        failed = any(v == "failed" for v in tests.values())
        start = self.clock if started is None else started
        return Run(sha=sha, job="test-npu", attempt=attempt, conclusion="failure" if failed else "success",
                   tests=tests, messages={t: f"AssertionError: {t} mismatch" for t, v in tests.items() if v == "failed"},
                   started=start, completed=start + 30 + self.rng.random() * 20, rerun=rerun)

    def rerun(self, sha: str) -> Run:
        """Answer one rerun request (appended to the history, with its request record)."""
        pos = self.history.position(sha)
        assert pos is not None
        self.clock += 60
        attempt = 1 + sum(1 for r in self.history.runs if r.sha == sha)
        run = self.run_at(pos, attempt=attempt, rerun=True, started=self.clock)
        self.history.runs.append(run)
        self.history.requests.append(RerunRecord(sha=sha, outstanding=False))
        return run


def _sha(seed: int, i: int) -> str:
    return f"{seed % 0xFFFFF:05x}{i:07x}"


def generate(seed: int, kind: str | None = None) -> Scenario:
    rng = random.Random(seed)
    kind = kind or rng.choice(KINDS)
    n = rng.randint(12, 40)
    n_tests = rng.randint(4, 25)
    tests = [f"test_mod{rng.randint(0, 9)}.py::test_{i}" for i in range(n_tests)]
    # pushes: mostly single commits, some stacks of 2-4 (only the head is dispatched)
    commits: list[Commit] = []
    heads: list[int] = []
    i = 0
    push = 0
    while i < n:
        size = 1 if rng.random() < 0.8 else rng.randint(2, 4)
        for _ in range(min(size, n - i)):
            commits.append(Commit(sha=_sha(seed, i), position=i, pr=100000 + seed % 1000 * 100 + i,
                                  title=f"commit {i}", push=f"p{push}"))
            i += 1
        heads.append(i - 1)
        push += 1
    history = History(backend="acme/torch-npu", commits=commits, runs=[])
    sc = Scenario(seed=seed, kind=kind, history=history, truth=Truth(kind, *EXPECTED[kind], suspect=None),
                  tests=tests, rng=rng)
    # noise: one flaky test most of the time (rarely failing), its rate higher in a flaky scenario
    if rng.random() < 0.6 or kind == "flaky":
        sc.flaky = {rng.choice(tests)}
        sc.flaky_rate = rng.uniform(0.15, 0.35) if kind == "flaky" else rng.uniform(0.0, 0.04)
    k = rng.randint(n // 3, n - 4)  # leave >= 3 commits after the event and a green past
    heads_set = set(heads)
    if kind in ("break", "recovered", "missing_baseline"):
        heads_set |= {k, k - 1, k - 2}  # the interesting commits were dispatched on their own
    if kind == "gap":
        # a stack landed in one push, or a backend that only runs nightly: 2-16 untested commits
        width = min(rng.randint(2, 16), k - 1)
        for p in range(k - width + 1, k + 1):
            heads_set.discard(p)
        heads_set |= {k - width, k + 1}  # the last commit before the untested range, the first after k
    dispatched = sorted(p for p in heads_set if 0 <= p < n)
    if kind in ("break", "gap", "recovered", "missing_baseline"):
        sc.break_at = k
        sc.broken = set(rng.sample([t for t in tests if t not in sc.flaky], rng.randint(1, min(3, n_tests - 1))))
        sc.truth.suspect = commits[k].sha
    if kind == "recovered":
        sc.fixed_at = min(n - 2, k + rng.randint(2, 5))
        dispatched = sorted(set(dispatched) | set(range(k, sc.fixed_at + 2)))
    if kind == "born_red":
        sc.break_at = k
        sc.born = f"test_new.py::test_added_at_{k}"
        sc.tests.append(sc.born)
        dispatched = sorted(set(dispatched) | {k})
    outage: tuple[float, float] | None = None
    runs: list[Run] = []
    for idx, pos in enumerate(dispatched):
        sc.clock = idx * 10.0
        if kind == "infra" and outage is None and pos >= k:
            outage = (sc.clock, sc.clock + rng.randint(3, 6) * 10.0)
        if outage and outage[0] <= sc.clock < outage[1]:
            runs.append(Run(sha=commits[pos].sha, job="test-npu", conclusion=rng.choice(["failure", "cancelled"]),
                            log=rng.choice(INFRA_LOGS), started=sc.clock, completed=sc.clock + 5, has_results=False))
            continue
        if kind != "infra" and rng.random() < 0.03 and pos not in (k, k - 1):
            runs.append(Run(sha=commits[pos].sha, job="test-npu", conclusion="failure", log=rng.choice(INFRA_LOGS),
                            started=sc.clock, completed=sc.clock + 5, has_results=False))
            continue
        run = sc.run_at(pos, started=sc.clock)
        if kind == "missing_baseline" and pos == k - 1:
            run.tested_sha = commits[max(0, k - 4)].sha  # a stale nightly wheel
        runs.append(run)
    rng.shuffle(runs)  # arrival order is not trunk order
    for n_received, r in enumerate(runs):
        r.received = n_received
    history.runs = runs
    if kind == "missing_baseline":
        sc.truth.gap_size = 1
    elif kind == "gap":
        sc.truth.gap_size = width
    sc.clock = len(dispatched) * 10.0 + 100
    return sc


@dataclass
class Outcome:
    analysis: object  # triage.classify.Analysis after the last round
    reruns: int
    rounds: int
    naive_reruns: int  # a strategy rerunning every commit after the organic last good up to the first bad


def resolve(sc: Scenario, rules: object, *, max_rounds: int = 12) -> Outcome:
    """Analyse, answer the reruns triage asks for, repeat until it asks for none."""
    from triage.bisect import analyze
    from triage.classify import classify

    organic = classify(sc.history, rules)  # type: ignore[arg-type]
    naive = 0
    if organic.kind == "new_break" and organic.last_good is not None and organic.first_bad is not None:
        naive = organic.first_bad.position - organic.last_good.position
    reruns = rounds = 0
    analysis = analyze(sc.history, rules)  # type: ignore[arg-type]
    while analysis.reruns and rounds < max_rounds:
        rounds += 1
        for plan in analysis.reruns:
            sc.rerun(plan.sha)
            reruns += 1
        analysis = analyze(sc.history, rules)  # type: ignore[arg-type]
    return Outcome(analysis, reruns, rounds, naive)


def generate_shared_outage(seed: int, backends: int = 3) -> list[Scenario]:
    """One upstream trunk, several backends, and one runner-pool outage window that hits
    every backend (a shared provider or network going down): each backend's own history."""
    rng = random.Random(seed)
    first = generate(seed, "infra")
    commits = first.history.commits
    failed = sorted((r for r in first.history.runs if not r.has_results), key=lambda r: r.started or 0.0)
    window = (failed[0].started or 0.0, (failed[-1].started or 0.0) + 1.0)
    out = [first]
    for b in range(1, backends):
        sc = Scenario(seed=seed, kind="infra", history=History(backend=f"acme/backend-{b}", commits=commits, runs=[]),
                      truth=Truth("infra", *EXPECTED["infra"], suspect=None),
                      tests=[f"test_b{b}.py::test_{i}" for i in range(rng.randint(3, 12))], rng=rng)
        runs = []
        for r in sorted(first.history.runs, key=lambda r: r.started or 0.0):
            pos = sc.history.position(r.sha)
            start = (r.started or 0.0) + rng.uniform(-2.0, 2.0)  # each backend's job starts a little apart
            if window[0] <= (r.started or 0.0) < window[1]:
                runs.append(Run(sha=r.sha, job="test", conclusion="failure", log=rng.choice(INFRA_LOGS),
                                started=start, completed=start + 5, has_results=False))
            elif pos is not None:
                runs.append(sc.run_at(pos, started=start))
        rng.shuffle(runs)
        sc.history.runs = runs
        out.append(sc)
    return out
