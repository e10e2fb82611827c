"""The dashboard's triage page (``/dashboard/triage`` and its JSON twin), over a store seeded
through crcr's own models: verdicts on jobs, rerun requests and posted reports."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crcr.contracts.callback import TriageVerdict
from crcr.store.jobs import COMPLETED, Job
from crcr.store.triage import DISPATCHED, FAILED, REQUESTED, RerunRequest, TriagePost
from relay.app import create_app
from relay.runtime import Runtime
from tests.relay.harness import make_settings

BACKEND = "acme/torch-npu"
OTHER = "beta/torch-xpu"
SUSPECT = "c" * 40
T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


class _Anchors(HTMLParser):
    """Every ``<a href>`` and every data-testid'd element's text, as a browser parses them."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.rows: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"] or "")
        if tag == "tr" and (a.get("data-testid") or "").startswith("verdict-"):
            self.rows.append((a["data-testid"] or "")[len("verdict-"):])
        if tag == "script":
            self.scripts += 1


def parse(html: str) -> _Anchors:
    p = _Anchors()
    p.feed(html)
    return p


def verdict(summary: str, *, category: str = "upstream", commit: str | None = SUSPECT, pr: int | None = 4242,
            analyzed_at: dt.datetime = T0) -> dict[str, Any]:
    suspected = {"pr": pr, "commit": commit, "reason": "first failing commit right after a passing one, confirmed"}
    return TriageVerdict.model_validate({
        "category": category, "confidence": "high", "summary": summary,
        "suspected_upstream": suspected if commit or pr else None,
        "evidence": [{"job": "trunk / test", "test": "test_ops.py::TestOps::test_softsign", "excerpt": "AssertionError"}],
        "reproduced_on_retry": True, "analyzed_at": analyzed_at.isoformat(),
    }).model_dump(mode="json")


def trunk_job(s: Any, repo: str, sha: str, delivery: str, *, failed: bool = True, v: dict | None = None) -> Job:
    job = Job(delivery_id=delivery, repo=repo, run_id=f"r-{delivery}", run_attempt="1", job_name="trunk / test",
              state=COMPLETED, conclusion="failure" if failed else "success", event_type="push", head_sha=sha,
              passed=10, failed=1 if failed else 0, skipped=0, triage_verdict=v)
    s.add(job)
    s.flush()
    return job


@pytest.fixture
def relay(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Runtime]]:
    """A relay app over SQLite and over PostgreSQL (``database_url`` is parametrised)."""
    settings = make_settings(tmp_path, database_url=database_url)
    runtime = Runtime.from_settings(settings)
    app = create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False)
    with TestClient(app) as client:
        yield client, runtime


def seed(runtime: Runtime) -> dict[str, Any]:
    """One upstream break of BACKEND (two failing trunk jobs carry its verdict, bisected with
    two reruns, one report posted), an older infra verdict of OTHER, and a rerun request of
    BACKEND made before an earlier verdict (it must not be listed under the newer one)."""
    v = verdict("softsign fails since pytorch#4242", analyzed_at=T0)
    early = verdict("flaky softsign", category="flake", commit=None, pr=None, analyzed_at=T0 - dt.timedelta(hours=3))
    infra = verdict("runner lost its disk", category="infra", commit=None, pr=None, analyzed_at=T0 - dt.timedelta(hours=1))
    with runtime.sessions.begin() as s:
        early_job = trunk_job(s, BACKEND, "e" * 40, "push-early", v=early)
        s.add(RerunRequest(backend=BACKEND, sha="e" * 40, reason="retry", state=DISPATCHED,
                           requested_at=T0 - dt.timedelta(hours=4), not_before=T0 - dt.timedelta(hours=4)))
        other_job = trunk_job(s, OTHER, "f" * 40, "push-other", v=infra)
        trunk_job(s, BACKEND, "b" * 40, "push-green", failed=False)
        first = trunk_job(s, BACKEND, SUSPECT, "push-1", v=v)
        second = trunk_job(s, BACKEND, "d" * 40, "push-2", v=v)
        rerun_job = trunk_job(s, BACKEND, SUSPECT, "rerun-1", v=None)
        s.add(RerunRequest(backend=BACKEND, sha=SUSPECT, reason="reproduce", state=DISPATCHED, delivery_id="rerun-1",
                           requested_at=T0 - dt.timedelta(minutes=30), not_before=T0 - dt.timedelta(minutes=30),
                           dispatched_at=T0 - dt.timedelta(minutes=29)))
        s.add(RerunRequest(backend=BACKEND, sha="a" * 40, reason="bisect", state=FAILED, error="no such commit",
                           requested_at=T0 - dt.timedelta(minutes=20), not_before=T0 - dt.timedelta(minutes=20)))
        s.add(RerunRequest(backend=BACKEND, sha="9" * 40, reason="bisect", state=REQUESTED,
                           requested_at=T0 + dt.timedelta(minutes=5), not_before=T0 + dt.timedelta(minutes=5)))
        s.add(TriagePost(backend=BACKEND, suspect=SUSPECT, kind="issue", target=f"{BACKEND}#12",
                         url=f"https://github.com/{BACKEND}/issues/12", posted_at=T0 + dt.timedelta(minutes=1)))
        # triage.posting's key for an infra report; the URL is not https: shown, never linked
        s.add(TriagePost(backend=OTHER, suspect=f"infra:{'f' * 12}", kind="issue", target=f"{OTHER}#1",
                         url="javascript:alert(1)", posted_at=T0 - dt.timedelta(minutes=50)))
        return {"early": early_job.id, "other": other_job.id, "first": first.id, "second": second.id,
                "rerun_job": rerun_job.id}


def test_triage_page_shows_each_verdict_with_its_jobs_reruns_and_report(relay) -> None:
    client, runtime = relay
    ids = seed(runtime)
    html = client.get("/dashboard/triage")
    assert html.status_code == 200
    data = client.get("/dashboard/triage.json").json()

    # newest first: the upstream break (its newest job), the infra verdict, the early flake
    assert [(r["backend"], r["category"]) for r in data["rows"]] == [
        (BACKEND, "upstream"), (OTHER, "infra"), (BACKEND, "flake")]
    upstream = data["rows"][0]
    assert [j["id"] for j in upstream["jobs"]] == [ids["second"], ids["first"]]  # one row, both jobs
    assert upstream["confidence"] == "high" and upstream["summary"] == "softsign fails since pytorch#4242"
    assert upstream["suspected_upstream"]["commit_url"] == f"https://github.com/pytorch/pytorch/commit/{SUSPECT}"
    assert upstream["suspected_upstream"]["pr_url"] == "https://github.com/pytorch/pytorch/pull/4242"
    # the reruns made for this verdict (not the one before the earlier verdict), with their state and job
    assert [(r["sha"][:1], r["state"]) for r in upstream["reruns"]] == [
        ("c", DISPATCHED), ("a", FAILED), ("9", REQUESTED)]
    assert upstream["reruns"][0]["job_href"] == f"/dashboard/jobs/{ids['rerun_job']}"
    assert upstream["reruns"][1]["error"] == "no such commit"
    assert [(p["kind"], p["target"], p["url"]) for p in upstream["reports"]] == [
        ("issue", f"{BACKEND}#12", f"https://github.com/{BACKEND}/issues/12")]
    assert [r["state"] for r in data["rows"][2]["reruns"]] == [DISPATCHED]  # the early retry is the flake's
    assert [(p["target"], p["url"]) for p in data["rows"][1]["reports"]] == [(f"{OTHER}#1", None)]
    assert data["rows"][2]["reports"] == [] and data["rows"][1]["suspected_upstream"]["commit_url"] is None

    page = parse(html.text)
    assert page.rows == [r["key"] for r in data["rows"]]  # the JSON twin's rows, in the HTML's order
    text = html.text
    for row in data["rows"]:
        assert row["summary"] in text and row["backend"] in text
    assert "not posted" in text and "no such commit" in text
    for href in (f"/dashboard/jobs/{ids['first']}", f"/dashboard/jobs/{ids['second']}",
                 f"/dashboard/jobs/{ids['rerun_job']}", f"/dashboard/backends/{BACKEND}",
                 f"https://github.com/pytorch/pytorch/commit/{SUSPECT}", "https://github.com/pytorch/pytorch/pull/4242",
                 f"https://github.com/{BACKEND}/issues/12"):
        assert href in page.hrefs, href
    assert not any(h.startswith("javascript:") for h in page.hrefs)  # an untrusted URL is text, never a link


def test_every_dashboard_link_on_the_triage_page_resolves(relay) -> None:
    client, runtime = relay
    seed(runtime)
    hrefs = parse(client.get("/dashboard/triage?rows=2").text).hrefs
    local = [h.replace("&amp;", "&") for h in hrefs if h.startswith("/")]
    assert any(h.startswith("/dashboard/jobs/") for h in local) and "/dashboard/triage?page=2&rows=2" in local
    for href in local:
        assert client.get(href).status_code == 200, href


def test_triage_page_is_linked_from_the_grid_and_from_a_job_with_a_verdict(relay) -> None:
    client, runtime = relay
    ids = seed(runtime)
    assert "/dashboard/triage" in parse(client.get("/dashboard").text).hrefs
    job_links = parse(client.get(f"/dashboard/jobs/{ids['first']}").text).hrefs
    link = next(h for h in job_links if h.startswith("/dashboard/triage?"))
    scoped = client.get(link)
    assert scoped.status_code == 200
    assert {r["backend"] for r in client.get(link.replace("/dashboard/triage?", "/dashboard/triage.json?")).json()["rows"]} \
        == {BACKEND}
    assert "runner lost its disk" not in scoped.text  # the other backend's verdict is not in this backend's view


def test_paging_splits_the_rows_newest_first(relay) -> None:
    client, runtime = relay
    seed(runtime)
    one = client.get("/dashboard/triage.json?rows=2").json()
    two = client.get("/dashboard/triage.json?rows=2&page=2").json()
    everything = client.get("/dashboard/triage.json").json()
    assert one["has_next"] and not two["has_next"]
    assert [r["key"] for r in one["rows"] + two["rows"]] == [r["key"] for r in everything["rows"]]
    assert "newer" in client.get("/dashboard/triage?rows=2&page=2").text


def test_verdict_text_from_a_callback_is_shown_escaped(relay) -> None:
    client, runtime = relay
    evil = "<script>alert('pwned')</script><img src=x onerror=alert(1)>"
    with runtime.sessions.begin() as s:
        job = trunk_job(s, BACKEND, SUSPECT, "push-evil", v=verdict(evil))
    for path in ("/dashboard/triage", f"/dashboard/jobs/{job.id}"):
        body = client.get(path).text
        assert "<script>" not in body and "<img" not in body
        assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in body
        assert parse(body).scripts == 0
    assert client.get("/dashboard/triage.json").json()["rows"][0]["summary"] == evil  # the twin keeps the data


def test_empty_store_says_no_triage_verdicts_yet(relay) -> None:
    client, runtime = relay
    with runtime.sessions.begin() as s:
        trunk_job(s, BACKEND, SUSPECT, "push-1", v=None)  # a failing job triage has not looked at yet
    html = client.get("/dashboard/triage")
    assert html.status_code == 200 and "no triage verdicts yet" in html.text
    assert client.get("/dashboard/triage.json").json()["rows"] == []
    assert re.search(r"<h1>crcr: triage verdicts</h1>", html.text)
