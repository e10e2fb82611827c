"""``crcr demo`` end to end (the README's main job), then its dashboard in real Chromium.

The demo runs once per module (a few minutes on 2 cores): a real ``crcr serve``,
signed webhooks, ``crcr downstream`` subprocesses running pick -> run -> report and
calling back with OIDC tokens from the demo's issuer. The assertions read what the
relay stored (its SQLite database and the local check sink), not the demo's printout.
The dashboard tests then serve that same database with a fresh ``crcr serve``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    data = tmp_path_factory.mktemp("demo") / "data"
    out = data.parent / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "crcr.cli.main", "demo", "--data-dir", str(data), "--json", str(out)],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(out.read_text())
    summary["stderr"] = proc.stderr
    return summary


def _db(summary: dict) -> sqlite3.Connection:
    return sqlite3.connect(Path(summary["data_dir"]) / "crcr.db")


def test_the_pr_is_dispatched_run_reported_and_checked(demo: dict) -> None:
    db = _db(demo)
    delivery = demo["pr"]["delivery"]
    event, pr, head, status, payload = db.execute(
        "select event, pr_number, head_sha, status, payload from deliveries where id = ?", (delivery,)).fetchone()
    assert (event, pr, head, status) == ("pull_request", 31, demo["pr"]["head_sha"], "accepted")
    assert json.loads(payload)["pull_request"]["user"]["login"] == "zzj-bot"  # the captured payload, not a made-up one
    target, kind, state = db.execute("select target, kind, state from dispatches where delivery_id = ?", (delivery,)).fetchone()
    assert (target, kind, state) == ("local/snpu", "local", "sent")
    job_id, job_state, conclusion, passed, failed = db.execute(
        "select id, state, conclusion, passed, failed from jobs where delivery_id = ?", (delivery,)).fetchone()
    assert (job_state, conclusion, failed) == ("completed", "success", 0)
    assert passed > 10
    # both callbacks came in over HTTP with a verified token from the demo's issuer
    outcomes = [r[0] for r in db.execute("select status from callback_log where delivery_id = ? and kind = 'callback' and outcome = 'accepted'"
                                         " order by id", (delivery,))]
    assert outcomes == ["in_progress", "completed"]
    counts, upstream_sha = db.execute("select counts, upstream_sha from results_uploads where job_id = ?", (job_id,)).fetchone()
    assert json.loads(counts)["passed"] == passed and upstream_sha == demo["pr"]["head_sha"]
    check_id, name, check_conclusion, synced = db.execute(
        "select id, name, conclusion, synced from check_runs where job_id = ?", (job_id,)).fetchone()
    assert name.startswith("crcr/local/snpu/") and check_conclusion == "success" and synced
    sink = json.loads((Path(demo["data_dir"]) / "checks" / f"check-run-{check_id}.json").read_text())
    assert sink["head_sha"] == demo["pr"]["head_sha"] and sink["conclusion"] == "success"
    assert f"{passed} passed" in sink["output"]["title"]


def test_the_breaking_trunk_push_fails_on_the_culprits_tests(demo: dict) -> None:
    db = _db(demo)
    delivery = demo["push"]["delivery"]
    assert db.execute("select state from dispatches where delivery_id = ?", (delivery,)).fetchone() == ("sent",)
    state, conclusion, failed, failed_tests = db.execute(
        "select state, conclusion, failed, failed_tests from jobs where delivery_id = ?", (delivery,)).fetchone()
    assert (state, conclusion) == ("completed", "failure") and failed > 0
    # the commit's own Python ran: every failure is a softsign test (the planted device mix-up)
    assert all("softsign" in t.lower() for t in json.loads(failed_tests)), failed_tests  # F.softsign and nn.Softsign
    assert db.execute("select count(*) from check_runs join jobs on jobs.id = check_runs.job_id "
                      "where jobs.delivery_id = ?", (delivery,)).fetchone() == (0,)  # a push has no PR to check
    # the push before it ran the same softsign tests green: the baseline that makes blame possible
    state, conclusion, failed = db.execute("select state, conclusion, failed from jobs where delivery_id = ?",
                                           (demo["baseline_push"]["delivery"],)).fetchone()
    assert (state, conclusion, failed) == ("completed", "success", 0)


def test_picks_carry_reasons_and_the_summary_has_timings(demo: dict) -> None:
    runs = {r["delivery_id"]: r for r in demo["downstream_runs"]}
    runs = {"pull_request": runs[demo["pr"]["delivery"]], "push": runs[demo["push"]["delivery"]]}
    assert any("tanhshrink" in reason for reason in runs["pull_request"]["pick_reasons"])
    assert any("softsign" in reason for reason in runs["push"]["pick_reasons"])
    for run in runs.values():
        assert set(run["timings_s"]) == {"report-start", "pick", "run", "report-finish"}
    assert {"history", "inventory", "relay", "pr", "baseline", "push", "total"} <= set(demo["timings_s"])
    triage = demo["triage"]
    if not triage["available"]:  # crcr triage is not in this build: the demo must say so, not pretend
        assert "not bisected" in triage["note"] and "triage" in demo["stderr"]


def test_triage_bisects_by_running_the_intermediate_commits_and_blames_the_culprit(demo: dict) -> None:
    triage = demo["triage"]
    if not triage["available"]:
        pytest.fail("crcr triage is in this build: the demo must have run it")
    assert "error" not in triage, triage
    culprit = demo["culprit"]["sha"]
    db = _db(demo)
    trunk = [r[0] for r in db.execute("select head_sha from deliveries where id = ?", (demo["push"]["delivery"],))]
    rerun_shas = {r["sha"] for r in triage["reruns"]}
    assert rerun_shas and not rerun_shas & set(trunk)  # only commits inside the push, never its head again
    for r in triage["reruns"]:  # each ran for real: a completed job with results of that very commit
        state, upstream_sha = db.execute(
            "select jobs.state, results_uploads.upstream_sha from jobs join results_uploads on results_uploads.job_id ="
            " jobs.id where jobs.delivery_id = ?", (r["delivery"],)).fetchone()
        assert state == "completed" and upstream_sha == r["sha"]
    verdict = triage["verdict"]
    assert (verdict["suspect"] or {}).get("sha") == culprit, verdict
    assert verdict["kind"] == "new_break" and verdict["reproduced"], verdict  # the first failure was run twice
    # no PR is linked to the demo's trunk commits: triage proposes a fix forward rather than a PR revert
    assert verdict["action"] in ("revert", "forward_fix"), verdict
    report = Path(triage["report"]).read_text()
    assert culprit[:10] in report
    assert json.loads(Path(triage["verdict_json"]).read_text())


# -- the dashboard, served from the demo's database, in real Chromium ------------------------
@pytest.fixture(scope="module")
def relay(demo: dict):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = Path(demo["data_dir"])
    env = {**_env(), "CRCR_DATA_DIR": str(data), "CRCR_ALLOWLIST": str(data / "allowlist.yaml"),
           "CRCR_WEBHOOK_SECRET": "dashboard-test", "CRCR_CHECK_SINK": "local"}
    proc = subprocess.Popen([sys.executable, "-m", "crcr.cli.main", "serve", "--port", str(port), "--no-worker",
                             "--no-sweeper"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def page(relay: str):
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium (.ci/services.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run", "--disable-sync", "--disable-dev-shm-usage"])
        yield browser.new_page(base_url=relay)
        browser.close()


def test_grid_shows_the_pr_green_and_the_commit_red_with_links_to_jobs(demo: dict, relay: str, page) -> None:
    page.goto("/dashboard")
    pr_cell = page.get_by_test_id("cell-pr-31-local/snpu")
    push_cell = page.get_by_test_id(f"cell-commit-{demo['push']['head_sha']}-local/snpu")
    assert pr_cell.get_attribute("data-state") == "success"
    assert push_cell.get_attribute("data-state") == "failure"
    baseline_cell = page.get_by_test_id(f"cell-commit-{demo['baseline_push']['head_sha']}-local/snpu")
    assert baseline_cell.get_attribute("data-state") == "success"
    # the colours a person sees, as the browser computed them
    assert pr_cell.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(45, 164, 78)"
    assert push_cell.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(207, 34, 46)"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-grid.png"), full_page=True)
    assert (ARTIFACTS / "dashboard-grid.png").stat().st_size > 1000

    push_cell.get_by_role("link").click()
    page.wait_for_url("**/dashboard/jobs/*")
    assert page.get_by_test_id("job-state").get_attribute("data-state") == "failure"
    failed_rows = page.locator("[data-testid=results] tr[data-outcome=failed]")
    assert failed_rows.count() > 0 and "softsign" in failed_rows.first.inner_text()

    page.goto("/dashboard")
    page.get_by_role("link", name="PR #31").click()
    page.wait_for_url("**/dashboard/pr/31")
    page.locator("td.cell a").first.click()
    page.wait_for_url("**/dashboard/jobs/*")
    assert "success" in page.get_by_test_id("check-run").inner_text()


def test_json_twins_match_the_pages(demo: dict, relay: str, page) -> None:
    grid = httpx.get(relay + "/dashboard.json").json()
    page.goto("/dashboard")
    for row in grid["rows"]:
        for backend, cell in row["cells"].items():
            shown = page.get_by_test_id(f"cell-{row['kind']}-{row['key']}-{backend}")
            assert shown.get_attribute("data-state") == cell["state"]
    keys = {(r["kind"], r["key"]) for r in grid["rows"]}
    assert ("pr", "31") in keys and ("commit", demo["push"]["head_sha"]) in keys
    job_id = grid["rows"][0]["cells"]["local/snpu"]["job_id"]
    job = httpx.get(f"{relay}/dashboard/jobs/{job_id}.json").json()
    page.goto(f"/dashboard/jobs/{job_id}")
    assert page.get_by_test_id("job-state").get_attribute("data-state") == job["cell"]
    assert page.locator("[data-testid=results] tr[data-outcome]").count() == len(job["tests"])
    pr = httpx.get(relay + "/dashboard/pr/31.json").json()
    assert [j["conclusion"] for j in pr["jobs"]] == ["success"]


def test_backend_page_summarises_the_plan_by_mode_and_reason(demo: dict, relay: str, page) -> None:
    page.goto("/dashboard")
    page.get_by_role("link", name="local/snpu").click()
    page.wait_for_url("**/dashboard/backends/local/snpu")
    backend = httpx.get(relay + "/dashboard/backends/local/snpu.json").json()
    rows = backend["plan_from_results"]["rows"]
    newest = httpx.get(f"{relay}/dashboard/jobs/{backend['plan_from_results']['job_id']}.json").json()
    assert rows and sum(r["tests"] for r in rows) == len(newest["tests"])
    assert page.locator("[data-testid=plan] tr[data-mode]").count() == len(rows)
    assert {"success", "failure"} <= {j["cell"] for j in backend["jobs"]}


def test_backend_page_shows_the_plans_recent_changes_and_refinement_proposals(demo: dict, relay: str, page) -> None:
    backend = httpx.get(relay + "/dashboard/backends/local/snpu.json").json()
    page.goto("/dashboard/backends/local/snpu")
    # recent changes: the plan versions the uploads ran with; the demo's plan is one version
    changes = backend["plan_changes"]
    digests = {json.loads(Path(r["results"]).read_text())["run"]["plan_digest"] for r in demo["downstream_runs"]}
    assert [v["plan_digest"] for v in changes["versions"]] == sorted(digests) and len(digests) == 1
    assert changes["versions"][0]["uploads"] == changes["uploads_read"] >= 6  # PR, 2 pushes, 3 reruns
    assert page.locator("[data-testid=plan-changes] [data-testid=plan-version]").count() == 1
    assert changes["versions"][0]["plan_digest"] in page.get_by_test_id("plan-changes").inner_text()
    # refinement proposals: what `crcr select refine` makes of the stored results, for real:
    # softsign's tests failed in the newest runs (the planted break), so refine proposes xfail
    refinement = backend["refinement"]
    assert refinement["available"] and refinement["runs"] == changes["uploads_read"]
    proposed = {p["test"]: p for p in refinement["proposals"]}
    softsign = [p for t, p in proposed.items() if "softsign" in t.lower()]
    assert softsign and all(p["mode"] == "run" and p["proposed_mode"] in ("xfail", "skip") for p in softsign)
    assert page.locator("[data-testid=refinement] tr[data-testid=proposal]").count() == len(refinement["proposals"])
    assert softsign[0]["test"] in page.get_by_test_id("refinement").inner_text()
