"""The shipped downstream workflow, run step by step against a real relay, for every trigger it declares.

A real ``crcr serve`` (SQLite, its GitHub App pointed at the local fake GitHub, the
demo's local OIDC issuer as the only callback issuer) receives signed upstream webhooks
for a local upstream git history, and dispatches to the backend repo through the fake
GitHub. The dispatch it sent is the ``repository_dispatch`` event the workflow runs
with (``tests/deploy/gha.py`` runs the jobs' commands in order, with Actions' artifact
rules). Callbacks and results go back to the relay over HTTP with OIDC tokens.

What stands in for the network: ``gh`` (GitHub's CLI is not installed here) is a
script that answers the three calls the workflow makes from the local upstream clone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from crcr.cli.demo import DEMO_SKIP
from tests.deploy.gha import Runner, clean_env
from tests.fakes.github import FakeGitHub, app_private_key

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "deploy/github/workflows/crcr.yml"
BACKEND_REPO = "org/snpu-ci"
UPSTREAM = "pytorch/pytorch"

GH_STUB = r'''#!/usr/bin/env python3
"""gh for the workflow test: answers from the local upstream clone in $UPSTREAM_GIT."""
import json, os, re, subprocess, sys
repo = os.environ["UPSTREAM_GIT"]
def git(*a): return subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True, check=True).stdout
args = sys.argv[1:]
if args[:2] == ["pr", "diff"]:
    event = json.load(open(os.environ["GITHUB_EVENT_PATH"]))
    pr = event["client_payload"]["payload"]["pull_request"]
    assert str(pr["number"]) == args[2], "asked for another PR"
    sys.stdout.write(git("diff", pr["base"]["sha"] + "..." + pr["head"]["sha"]))
elif args[:1] == ["api"] and (m := re.fullmatch(r"repos/[^/]+/[^/]+/compare/([0-9a-f]+)\.\.\.([0-9a-f]+)", args[1])):
    sys.stdout.write(git("diff", m[1] + "..." + m[2]))
elif args[:1] == ["api"] and re.fullmatch(r"repos/[^/]+/[^/]+/commits/main", args[1]) and "--jq" in args:
    print(git("rev-parse", "main").strip())
else:
    sys.exit(f"gh stub: not supported: {args}")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    """Upstream history, fake GitHub, OIDC issuer, a relay, and the backend repository's tree."""
    import torch
    import torch.nn.functional as functional

    from crcr.demo import history as demo_history
    from crcr.demo.issuer import LocalIssuer

    tmp = tmp_path_factory.mktemp("workflow")
    hist = demo_history.build(tmp / "upstream", Path(functional.__file__), torch.__version__)
    pem, _ = app_private_key()
    with FakeGitHub(app_id="4242") as gh, LocalIssuer(repository=BACKEND_REPO) as issuer:
        gh.set_installation(BACKEND_REPO, 7)
        gh.set_installation(UPSTREAM, 8)
        for c in [hist.base, *hist.trunk]:
            gh.add_commit(UPSTREAM, c.sha)
        data = tmp / "relay"
        data.mkdir()
        allowlist = data / "allowlist.yaml"
        allowlist.write_text(f"L1: []\nL2:\n  - {BACKEND_REPO}: oncall\nL3: {{}}\nL4: []\n")
        port = _free_port()
        env = {**clean_env(), "PYTHONPATH": str(ROOT), "CRCR_DATA_DIR": str(data), "CRCR_ALLOWLIST": str(allowlist),
               "CRCR_WEBHOOK_SECRET": "workflow-test", "CRCR_GITHUB_API_URL": gh.url, "CRCR_GITHUB_APP_ID": "4242",
               "CRCR_GITHUB_PRIVATE_KEY": pem, "CRCR_OIDC_ISSUERS": json.dumps([issuer.url]),
               "CRCR_PUBLIC_URL": f"http://127.0.0.1:{port}", "CRCR_WORKERS": "2", "CRCR_LOG_FORMAT": "text"}
        log = (tmp / "relay.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "crcr.cli.main", "serve", "--port", str(port)], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        # the backend repository: the workflow, the composite action and the reviewed plan
        repo = tmp / "backend-repo"
        shutil.copytree(ROOT / "deploy/github/actions/crcr", repo / ".github/actions/crcr")
        shutil.copytree(WORKFLOW.parent, repo / ".github/workflows")
        shutil.copytree(ROOT / "configs/selections/snpu", repo / "configs/selections/snpu")
        with (repo / "configs/selections/snpu/test_ops.yaml").open("a") as f:
            f.write(DEMO_SKIP)  # the backend team's review of two tests the committed plan runs but snpu fails
        bindir = tmp / "bin"
        bindir.mkdir()
        (bindir / "gh").write_text(GH_STUB.replace("#!/usr/bin/env python3", f"#!{sys.executable}", 1))
        (bindir / "gh").chmod(0o755)
        job_env = {**clean_env(), "PYTHONPATH": str(ROOT), "UPSTREAM_GIT": str(hist.path),
                   "PATH": f"{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
                   **issuer.job_environment()}
        variables = {"CRCR_RELAY_URL": url, "CRCR_BACKEND": "snpu", "CRCR_DEVICE": "snpu", "CRCR_SHARDS": "2",
                     "CRCR_RUN_FILTER": "softsign or tanhshrink", "CRCR_OVERLAY_UPSTREAM": "true"}
        try:
            yield {"tmp": tmp, "hist": hist, "gh": gh, "url": url, "db": data / "crcr.db", "repo": repo,
                   "env": job_env, "vars": variables}
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            log.close()


def _post(world: dict, event: str, payload: dict, delivery: str) -> None:
    from crcr.demo.webhooks import sign

    body = json.dumps(payload).encode()
    r = httpx.post(world["url"] + "/webhook", content=body, headers={
        "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "Content-Type": "application/json",
        "X-Hub-Signature-256": sign(b"workflow-test", body)})
    assert r.status_code == 202, r.text


def _dispatched(world: dict, delivery: str) -> dict:
    """The repository_dispatch body the relay sent to the backend repo for ``delivery``."""
    for _ in range(300):
        for call in world["gh"].dispatches(BACKEND_REPO):
            if call.body["client_payload"]["delivery_id"] == delivery:
                return call.body
        time.sleep(0.1)
    raise AssertionError(f"no dispatch of {delivery} reached {BACKEND_REPO}")


def _event(dispatch: dict) -> dict:
    """The event a repository_dispatch workflow run sees (GitHub's webhook shape)."""
    return {"action": dispatch["event_type"], "branch": "main", "client_payload": dispatch["client_payload"],
            "repository": {"full_name": BACKEND_REPO}, "sender": {"login": "crcr-relay[bot]"}}


def _runner(world: dict, name: str) -> Runner:
    tmp = world["tmp"] / name
    tmp.mkdir()
    return Runner(world["repo"] / ".github/workflows/crcr.yml", world["repo"], tmp, variables=world["vars"],
                  env=world["env"], repository=BACKEND_REPO, clones={UPSTREAM: world["hist"].path})


def _jobs(db: Path, delivery: str) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("select job_name, state, conclusion, passed, failed, event_type from jobs where delivery_id = ?"
                         " order by job_name", (delivery,)).fetchall()


RUN_STEP = "Run the tests of this shard"


def _assert_ran(runs: dict, *, tests_may_fail: bool = False) -> list[str]:
    """Every job ran and every step succeeded, except the test step where failing tests are expected
    (a failed test fails that step, as on GitHub; the report step still runs). Returns those steps' outcomes."""
    outcomes = []
    for job, instances in runs.items():
        assert instances, f"job {job} did not run"
        for r in instances:
            for step in r.steps:
                if step.name == RUN_STEP:
                    outcomes.append(step.outcome)
                    if tests_may_fail and step.outcome == "failure":
                        assert "failed" in step.output, r.log()  # failing tests, not a crash
                        continue
                assert step.outcome in ("success", "skipped"), f"{job} {r.matrix}:\n{r.log()}"
            if job == "test":
                report = next(s for s in r.steps if s.name == "Report the results")
                assert report.outcome == "success", r.log()
    return outcomes


def test_declared_triggers_are_the_ones_tested() -> None:
    import yaml

    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True]
    assert set(on) == {"repository_dispatch", "schedule"}  # each has a test below
    assert on["repository_dispatch"]["types"] == ["pull_request", "push"]


def test_pr_dispatch_picks_runs_shards_and_reports(world: dict) -> None:
    from crcr.demo import webhooks

    delivery = "wf-pr-1"
    _post(world, "pull_request", webhooks.pull_request(world["hist"]), delivery)
    runs = _runner(world, "pr").run("repository_dispatch", _event(_dispatched(world, delivery)))
    _assert_ran(runs)
    pick = json.loads((runs["pick"][0].workspace / "pick.json").read_text())
    assert pick["tests"] and all("tanhshrink" in t["id"] or "tanh" in t["id"] or "softmax" in t["id"] or "abs" in t["id"]
                                 for t in pick["tests"][:5])
    jobs = _jobs(world["db"], delivery)
    assert [j[:3] for j in jobs] == [("test-1", "completed", "success"), ("test-2", "completed", "success")]
    assert sum(j[3] for j in jobs) > 0


def test_push_dispatch_uploads_its_artifact_and_reports_the_break(world: dict) -> None:
    from crcr.demo import webhooks

    delivery = "wf-push-1"
    _post(world, "push", webhooks.push(world["hist"]), delivery)
    runs = _runner(world, "push").run("repository_dispatch", _event(_dispatched(world, delivery)))
    # the old workflow failed here: nothing uploaded for push, so download-artifact errored in every shard
    assert "failure" in _assert_ran(runs, tests_may_fail=True)
    jobs = _jobs(world["db"], delivery)
    assert {j[1] for j in jobs} == {"completed"} and len(jobs) == 2
    assert sum(j[4] for j in jobs) > 0 and "failure" in {j[2] for j in jobs}  # the planted softsign break


def test_nightly_schedule_reports_a_self_scheduled_run_of_trunk_head(world: dict) -> None:
    runs = _runner(world, "nightly").run("schedule", {"schedule": "17 3 * * *"})
    _assert_ran(runs, tests_may_fail=True)  # trunk head carries the softsign break
    head = world["hist"].trunk[-1].sha
    jobs = _jobs(world["db"], head)
    assert [j[1] for j in jobs] == ["completed", "completed"]
    assert {j[5] for j in jobs} == {"nightly"}


def test_pytorch_crcr_dispatch_has_crcrs_shape_and_runs_the_same(world: dict) -> None:
    """PyTorch's relay (pytorch/test-infra aws/lambda/cross_repo_ci_relay/webhook/event_handler.py,
    ``handle``) dispatches ``event_type`` = the GitHub event and ``client_payload`` =
    ``{event_type, delivery_id, payload}`` with the webhook verbatim: built here from the same webhook."""
    from crcr.demo import webhooks

    delivery = "wf-pr-upstream-shape"
    webhook = webhooks.pull_request(world["hist"])
    webhook["pull_request"]["number"] = 32  # its own PR, so the check-run and job rows are distinct
    _post(world, "pull_request", webhook, delivery)
    ours = _dispatched(world, delivery)
    theirs = {"event_type": "pull_request",
              "client_payload": {"event_type": "pull_request", "delivery_id": delivery, "payload": webhook}}
    assert ours == theirs
    runs = _runner(world, "upstream-shape").run("repository_dispatch", _event(theirs))
    _assert_ran(runs)
    assert [j[1] for j in _jobs(world["db"], delivery)] == ["completed", "completed"]
