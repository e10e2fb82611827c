"""The downstream half of the loop (pick -> run -> report), composed from components.

A ``local`` allowlist target runs ``crcr downstream`` with the dispatch payload
(CRCR's ``client_payload``) on standard input. It validates the payload and records it
under ``<data_dir>/downstream/received/``; given a clone of upstream
(``--upstream-git``) it then runs the same steps a backend's CI workflow runs, as
``crcr`` subprocesses: ``crcr report --phase start``, ``crcr select pick`` over the
dispatch's diff, ``crcr run`` on the commit's tree, ``crcr report --phase finish``
(callbacks over HTTP with an OIDC token, as from GitHub Actions).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crcr import gitlocal
from crcr.contracts.dispatch import ClientPayload
from crcr.errors import ContractError, ExternalError
from crcr.fileio import atomic_write_text

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def parse_client_payload(text: str) -> ClientPayload:
    """Validate a dispatch payload; a ContractError says which field is wrong."""
    try:
        return ClientPayload.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ContractError(f"the dispatch payload is not CRCR's client_payload: {where}: {first['msg']}",
                            hint="expected {event_type, delivery_id, payload} as JSON on stdin") from exc


def record_dispatch(payload: ClientPayload, data_dir: Path, *, backend: str) -> Path:
    """Write the received dispatch to ``<data_dir>/downstream/received/`` and return the path.

    The file name comes from the delivery id, made filesystem-safe and suffixed with a
    hash so distinct ids never collide and no id can escape the directory.
    """
    digest = hashlib.sha256(payload.delivery_id.encode()).hexdigest()[:12]
    name = f"{_SAFE.sub('_', payload.delivery_id)[:80]}-{digest}.json"
    path = data_dir / "downstream" / "received" / _SAFE.sub("_", backend)[:40] / name
    record = {"backend": backend, "client_payload": payload.model_dump(exclude_none=True)}
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


# -- the pipeline: pick -> run -> report ----------------------------------------------------
_SHA = re.compile(r"^[0-9a-f]{7,64}$")
NULL_SHA = "0" * 40


@dataclass
class Pipeline:
    """Where the downstream half gets its inputs and sends its results."""

    backend: str
    data_dir: Path
    upstream_git: Path  # a clone of upstream holding the dispatched commits
    plan: Path
    callback: str  # the relay's /callback URL
    inventory: Path | None = None  # default: <data_dir>/downstream/inventory-<backend>.json, built once
    device: str = "snpu"
    budget_s: float | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class Commits:
    """What one dispatch asks to test: the commit under test and what its diff is against."""

    head: str
    base: str | None
    pr_number: int | None
    title: str | None


def commits_of(payload: ClientPayload) -> Commits:
    """The commit under test of a pull_request or push dispatch; ContractError for anything else."""
    body = payload.payload if isinstance(payload.payload, dict) else {}
    if payload.event_type == "pull_request":
        pr = body.get("pull_request") if isinstance(body.get("pull_request"), dict) else {}
        head = (pr.get("head") or {}).get("sha") if isinstance(pr.get("head"), dict) else None
        base = (pr.get("base") or {}).get("sha") if isinstance(pr.get("base"), dict) else None
        number = pr.get("number") if isinstance(pr.get("number"), int) else None
        title = pr.get("title") if isinstance(pr.get("title"), str) else None
    elif payload.event_type == "push":
        head, base, number = body.get("after"), body.get("before"), None
        title = ((body.get("head_commit") or {}).get("message") or "").split("\n")[0] or None \
            if isinstance(body.get("head_commit"), dict) else None
    else:
        raise ContractError(f"a {payload.event_type!r} dispatch names no commit to test",
                            hint="the local pipeline tests pull_request and push events")
    if not isinstance(head, str) or not _SHA.match(head):
        raise ContractError(f"the {payload.event_type} payload has no valid head commit SHA",
                            hint="expected pull_request.head.sha or push.after (hex)")
    if not isinstance(base, str) or not _SHA.match(base) or base == NULL_SHA:
        base = None  # a new branch: diff against the head's first parent
    return Commits(head, base, number, title[:200] if title else None)


def _crcr(*args: str) -> list[str]:
    return [sys.executable, "-m", "crcr.cli.main", *args]


class _Steps:
    """Runs the pipeline's ``crcr`` subprocesses, logging each one and timing it."""

    def __init__(self, work: Path, env: dict[str, str], say: Callable[[str], None]) -> None:
        self.work, self.env, self.say = work, env, say
        self.timings: dict[str, float] = {}
        self.log = work / "pipeline.log"

    def run(self, name: str, argv: list[str], ok: tuple[int, ...] = (0,)) -> int:
        return self.start(name, argv, ok)()

    def start(self, name: str, argv: list[str], ok: tuple[int, ...] = (0,)) -> Callable[[], int]:
        """Start a step in a thread; the returned call waits for it. Its output goes to its
        own log until then (overlapping steps never interleave in the pipeline log) and its
        time is its own, not the wait's."""
        part = self.work / f"step-{name}.log"
        done: dict[str, Any] = {}

        def step() -> None:
            started = time.monotonic()
            try:
                with part.open("w", encoding="utf-8") as out:
                    done["code"] = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                                  check=False).returncode
            except OSError as exc:
                done["error"] = exc
            done["s"] = time.monotonic() - started

        thread = threading.Thread(target=step, name=f"crcr-step-{name}", daemon=True)
        thread.start()

        def wait() -> int:
            thread.join()
            if "error" in done:
                raise ExternalError(f"step {name} could not start: {done['error']}")
            code = done["code"]
            with self.log.open("a", encoding="utf-8") as log:
                log.write(f"\n$ crcr {' '.join(argv[3:])}\n" + part.read_text(encoding="utf-8", errors="replace"))
            part.unlink(missing_ok=True)
            self.timings[name] = round(self.timings.get(name, 0.0) + done["s"], 3)
            self.say(f"{name}: exit {code} ({self.timings[name]:.1f}s)")
            if code not in ok:
                tail = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
                raise ExternalError(f"step {name} exited with {code}: {' | '.join(tail)[:500]}",
                                    hint=f"the full output is in {self.log}")
            return code

        return wait


def ensure_inventory(p: Pipeline, env: dict[str, str], say: Callable[[str], None]) -> Path:
    """The backend's test inventory; collected once into the data dir when none is given."""
    if p.inventory is not None:
        return p.inventory
    path = p.data_dir / "downstream" / f"inventory-{_SAFE.sub('_', p.backend)[:40]}.json"
    if not path.is_file():
        say(f"collecting the {p.device} test inventory once into {path}")
        subprocess.run(_crcr("select", "inventory", "--out", str(path)), env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


HISTORY_RUNS = 10


def previous_results(p: Pipeline, *, exclude: Path) -> list[Path]:
    """Results of this backend's newest earlier runs here: the pick's failure history.

    A backend's CI keeps its past results (artifacts); here they are the earlier runs in
    the data dir. Without them a rerun of an older commit (triage's bisection) would pick
    only over its own small diff and skip the very tests that failed.
    """
    root = p.data_dir / "downstream" / "runs" / _SAFE.sub("_", p.backend)[:40]
    found = [r for r in root.glob("*/*/results.json") if exclude not in r.parents]
    return sorted(found, key=lambda r: r.stat().st_mtime, reverse=True)[:HISTORY_RUNS]


def is_rerun(delivery_id: str) -> bool:
    """A run triage asked for: the contract's delivery id ``<upstream delivery>/rerun/<n>``."""
    return "/rerun/" in delivery_id


def run_pipeline(payload: ClientPayload, p: Pipeline, say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Test one dispatch for real and report it; returns the summary also written to ``summary.json``.

    in_progress callback -> ``crcr select pick`` over the dispatch's diff -> ``crcr run``
    on the commit's tree (its torch Python overlaid) -> results upload and completed
    callback. A triage rerun (``.../rerun/<n>``) runs only the tests that failed in this
    backend's earlier runs here (``crcr select pick --failed-only``; the usual pick when
    none did): bisection asks whether this commit has what broke, not for a full run. Failing tests are a result, not an error: the summary says so and the
    command succeeds. An error before the results exist raises (the relay retries).
    """
    commits = commits_of(payload)
    digest = hashlib.sha256(payload.delivery_id.encode()).hexdigest()[:12]
    run_id = f"local-{int(time.time() * 1000)}"
    work = p.data_dir / "downstream" / "runs" / _SAFE.sub("_", p.backend)[:40] / f"{_SAFE.sub('_', payload.delivery_id)[:60]}-{digest}" / run_id
    work.mkdir(parents=True, exist_ok=True)
    event_path = work / "event.json"
    atomic_write_text(event_path, json.dumps({"client_payload": payload.model_dump(exclude_none=True)}) + "\n")
    env = {**os.environ, **p.extra_env,
           # what crcr report reads inside a GitHub Actions job, so the same command runs here
           "GITHUB_EVENT_PATH": str(event_path), "GITHUB_RUN_ID": run_id, "GITHUB_RUN_ATTEMPT": "1",
           "GITHUB_JOB": f"{p.backend}-tests", "GITHUB_WORKFLOW": "crcr-local"}
    steps = _Steps(work, env, say)
    inventory = ensure_inventory(p, env, say)
    report_args = ["report", "--callback", p.callback]
    # the in_progress callback goes out while the commit is exported and the pick runs;
    # it is awaited before the tests run, so the relay always hears it first
    reported_start = steps.start("report-start", _crcr(*report_args, "--phase", "start"))

    if not gitlocal.has_commit(p.upstream_git, commits.head):
        reported_start()
        raise ExternalError(f"commit {commits.head} is not in {p.upstream_git}", hint="fetch it into the clone")
    base = commits.base or f"{commits.head}^"
    diff_path, src = work / "upstream.diff", work / "src"
    atomic_write_text(diff_path, gitlocal.diff(p.upstream_git, base, commits.head))
    gitlocal.export(p.upstream_git, commits.head, src)

    pick_path = work / "pick.json"
    pick_args = ["select", "pick", "--diff", str(diff_path), "--inventory", str(inventory), "--backend", p.backend,
                 "--plan", str(p.plan), "--out", str(pick_path), "--pointed-only"]
    if commits.pr_number is not None:
        pick_args += ["--pr", str(commits.pr_number)]
    if p.budget_s is not None:
        pick_args += ["--budget", str(p.budget_s)]
    for previous in previous_results(p, exclude=work):
        pick_args += ["--history", str(previous)]  # tests that failed before stay picked (reruns, bisection)
    if is_rerun(payload.delivery_id):
        pick_args.append("--failed-only")  # triage asks whether this commit is good or bad for what broke
    try:
        steps.run("pick", _crcr(*pick_args))
    finally:
        reported_start()
    picked = json.loads(pick_path.read_text(encoding="utf-8")).get("tests") or []
    if not picked:
        raise ExternalError("the pick selected no test for this diff: nothing would run",
                            hint=f"see {steps.log}; a run that tests nothing is never reported green")

    results, junit = work / "results.json", work / "junit.xml"
    code = steps.run("run", _crcr("run", "--device", p.device, "--plan", str(p.plan), "--pick", str(pick_path),
                                  "--overlay", str(src), "--upstream-sha", commits.head, "--results", str(results),
                                  "--junit", str(junit), "--log", str(work / "pytest.log")), ok=(0, 1))
    if not results.is_file():
        raise ExternalError(f"crcr run exited {code} without results", hint=f"see {steps.log}")
    steps.run("report-finish", _crcr(*report_args, "--phase", "finish", "--results", str(results)))
    counts: dict[str, int] = {}
    for test in json.loads(results.read_text(encoding="utf-8")).get("tests", []):
        counts[test.get("outcome", "?")] = counts.get(test.get("outcome", "?"), 0) + 1
    summary = {"backend": p.backend, "delivery_id": payload.delivery_id, "event_type": payload.event_type,
               "head_sha": commits.head, "base_sha": commits.base, "pr_number": commits.pr_number,
               "title": commits.title, "run_id": run_id, "work_dir": str(work), "picked": len(picked),
               "pick": str(pick_path), "results": str(results), "counts": counts, "run_exit": code,
               "timings_s": steps.timings}
    atomic_write_text(work / "summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary
