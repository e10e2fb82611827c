"""Dashboard routes: each HTML page has a JSON twin at the same path plus ``.json``."""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from relay.dashboard import queries

router = APIRouter()

COLOURS = {"success": "#2da44e", "failure": "#cf222e", "running": "#d4a72c", "queued": "#54aeff",
           "dead": "#57606a", "neutral": "#8c959f", "none": "#f6f8fa"}
STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1f2328}
table{border-collapse:collapse;margin:.5rem 0}th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;font-size:.9rem}
td.cell{width:7rem;text-align:center}td.cell a{color:#fff;font-weight:600;text-decoration:none;display:block}
code{font-size:.85rem}nav a{margin-right:1rem}
"""


def _h(value: Any) -> str:
    return escape("" if value is None else str(value))


def _page(title: str, body: str, json_href: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_h(title)}</title><style>{STYLE}</style></head>"
        f"<body><nav><a href='/dashboard'>grid</a><a href='/dashboard/triage'>triage</a>"
        f"<a href='{_h(json_href)}'>JSON</a></nav><h1>{_h(title)}</h1>{body}"
        "</body></html>")


def _sessions(request: Request) -> Any:
    return request.app.state.runtime.sessions()


def _cell(state: str, label: str, href: str | None, testid: str) -> str:
    inner = f"<a href='{_h(href)}'>{_h(label)}</a>" if href else _h(label)
    return (f"<td class='cell' data-testid='{_h(testid)}' data-state='{_h(state)}' "
            f"style='background:{COLOURS.get(state, '#fff')}'>{inner}</td>")


@router.get("/dashboard.json")
def grid_json(request: Request, page: int = Query(1, ge=1), rows: int = Query(queries.PAGE_ROWS, ge=1, le=200)) -> JSONResponse:
    with _sessions(request) as s:
        return JSONResponse(queries.grid(s, page=page, rows=rows))


@router.get("/dashboard", response_class=HTMLResponse)
def grid_html(request: Request, page: int = Query(1, ge=1), rows: int = Query(queries.PAGE_ROWS, ge=1, le=200)) -> HTMLResponse:
    with _sessions(request) as s:
        data = queries.grid(s, page=page, rows=rows)
    head = "".join(f"<th><a href='/dashboard/backends/{_h(b)}'>{_h(b)}</a></th>" for b in data["backends"])
    lines = []
    for row in data["rows"]:
        if row["kind"] == "pr":
            what = f"<a href='{_h(row['href'])}'>PR #{_h(row['pr_number'])}</a>"
        else:
            what = f"commit <code>{_h((row['head_sha'] or '')[:12])}</code> {_h(row['ref'])}"
        cells = "".join(
            _cell(c["state"], c["state"] + (f" {c['passed']}/{c['failed']}" if c["passed"] is not None else ""),
                  c["href"], f"cell-{row['kind']}-{row['key']}-{b}")
            for b, c in row["cells"].items())
        lines.append(f"<tr data-testid='row-{_h(row['kind'])}-{_h(row['key'])}'><td>{what}</td>"
                     f"<td><code>{_h((row['head_sha'] or '')[:10])}</code></td><td>{_h(row['received_at'])}</td>{cells}</tr>")
    pager = ""
    if page > 1:
        pager += f"<a href='/dashboard?page={page - 1}&rows={data['rows_per_page']}'>newer</a> "
    if data["has_next"]:
        pager += f"<a href='/dashboard?page={page + 1}&rows={data['rows_per_page']}'>older</a>"
    legend = " ".join(f"<span style='background:{c};padding:0 .4rem'>{_h(k)}</span>" for k, c in COLOURS.items())
    body = (f"<p>cells: {legend} (label: state passed/failed)</p>"
            f"<table id='grid'><thead><tr><th>upstream</th><th>head</th><th>received</th>{head}</tr></thead>"
            f"<tbody>{''.join(lines) or '<tr><td colspan=3>no upstream PRs or pushes yet</td></tr>'}</tbody></table>"
            f"<p>{pager}</p>")
    return _page("crcr: backends x upstream", body, f"/dashboard.json?page={page}&rows={data['rows_per_page']}")


@router.get("/dashboard/pr/{number}.json")
def pr_json(request: Request, number: int) -> JSONResponse:
    with _sessions(request) as s:
        return JSONResponse(queries.pr_page(s, number))


@router.get("/dashboard/pr/{number}", response_class=HTMLResponse)
def pr_html(request: Request, number: int) -> HTMLResponse:
    with _sessions(request) as s:
        data = queries.pr_page(s, number)
    deliveries = "".join(f"<tr><td><code>{_h(d['id'])}</code></td><td>{_h(d['action'])}</td><td><code>{_h((d['head_sha'] or '')[:10])}</code></td>"
                         f"<td>{_h(d['status'])}</td><td>{_h(d['ignored_reason'])}</td><td>{_h(d['received_at'])}</td></tr>"
                         for d in data["deliveries"])
    dispatches = "".join(f"<tr><td>{_h(x['target'])}</td><td>{_h(x['kind'])}</td><td>{_h(x['state'])}</td>"
                         f"<td>{_h(x['attempts'])}</td><td>{_h(x['last_error'])}</td></tr>" for x in data["dispatches"])
    jobs = "".join(
        f"<tr>{_cell(j['cell'], j['conclusion'] or j['state'], '/dashboard/jobs/' + str(j['id']), 'job-' + str(j['id']))}"
        f"<td>{_h(j['repo'])}</td><td>{_h(j['job_name'])}</td><td>{_h(j['passed'])}</td><td>{_h(j['failed'])}</td>"
        f"<td>{_h(j['skipped'])}</td><td>{_h((j['check_run'] or {}).get('name'))} {_h((j['check_run'] or {}).get('conclusion'))}</td></tr>"
        for j in data["jobs"])
    body = (f"<h2>deliveries</h2><table><tr><th>delivery</th><th>action</th><th>head</th><th>status</th><th>why ignored</th><th>received</th></tr>{deliveries}</table>"
            f"<h2>dispatches</h2><table><tr><th>target</th><th>kind</th><th>state</th><th>attempts</th><th>last error</th></tr>{dispatches}</table>"
            f"<h2>jobs</h2><table><tr><th>job</th><th>repo</th><th>name</th><th>passed</th><th>failed</th><th>skipped</th><th>check run</th></tr>{jobs}</table>")
    return _page(f"PR #{number}", body, f"/dashboard/pr/{number}.json")


@router.get("/dashboard/jobs/{job_id}.json")
def job_json(request: Request, job_id: int) -> JSONResponse:
    with _sessions(request) as s:
        data = queries.job_page(s, job_id)
    if data is None:
        return JSONResponse({"error": f"no job {job_id}"}, status_code=404)
    return JSONResponse(data)


@router.get("/dashboard/jobs/{job_id}", response_class=HTMLResponse)
def job_html(request: Request, job_id: int) -> HTMLResponse:
    with _sessions(request) as s:
        data = queries.job_page(s, job_id)
    if data is None:
        return HTMLResponse(f"<!doctype html><p>no job {int(job_id)}</p>", status_code=404)
    facts = "".join(f"<tr><th>{_h(k)}</th><td>{_h(data[k])}</td></tr>" for k in (
        "repo", "job_name", "run_id", "state", "conclusion", "event_type", "head_sha", "pr_number", "passed", "failed",
        "skipped", "queue_time_s", "execution_time_s"))
    check = data["check_run"]
    check_html = "<p>no check run (not a PR, or the repo is below L3)</p>" if check is None else (
        f"<p data-testid='check-run'>check run <b>{_h(check['name'])}</b>: {_h(check['status'])} {_h(check['conclusion'])}"
        f" (synced: {_h(check['synced'])})</p>")
    failed = "".join(f"<li><code>{_h(t)}</code></li>" for t in data["failed_tests"][:200])
    verdict = data["triage_verdict"] or {}
    if verdict:
        sus = verdict.get("suspected_upstream") or {}
        check_html += (f"<p data-testid='triage-verdict'>triage (advisory): <b>{_h(verdict.get('category'))}</b>, "
                       f"confidence {_h(verdict.get('confidence'))}: {_h(verdict.get('summary'))}"
                       + (f"; suspect commit <code>{_h(sus.get('commit'))}</code>" if sus.get("commit") else "")
                       + f" <a data-testid='triage-link' href='{_h(_triage_href(1, queries.PAGE_ROWS, data['repo']))}'>"
                         "all triage verdicts of this backend</a></p>")
    tests = "".join(f"<tr data-outcome='{_h(t['outcome'])}'><td><code>{_h(t['id'])}</code></td><td>{_h(t['outcome'])}</td>"
                    f"<td>{_h(t['duration_s'])}</td><td>{_h(t['plan_mode'])}: {_h(t['plan_reason'] or t['error_class'] or '')}</td></tr>"
                    for t in data["tests"])
    results = data["results"]
    body = (f"<table data-testid='job-facts'>{facts}</table>{check_html}"
            f"<h2>failed tests ({len(data['failed_tests'])})</h2><ul>{failed}</ul>"
            f"<h2 id='results'>results upload {_h(results and results['id'])}: {_h(results and results['counts'])}</h2>"
            f"<table data-testid='results'><tr><th>test</th><th>outcome</th><th>seconds</th><th>plan: reason</th></tr>{tests}</table>")
    cell = data["cell"]
    title = f"job {job_id}: {data['repo']} {data['conclusion'] or data['state']}"
    return _page(title, f"<p data-testid='job-state' data-state='{_h(cell)}'>{_h(cell)}</p>" + body,
                 f"/dashboard/jobs/{job_id}.json")


def _backend_data(request: Request, repo: str) -> dict[str, Any]:
    refine = getattr(request.app.state.runtime, "refine_proposals", None)
    state = request.app.state
    cache = getattr(state, "backend_cache", None)
    if cache is None:  # one per app: its store's uploads are what the cached pages were derived from
        cache = state.backend_cache = queries.DerivedCache()
    with _sessions(request) as s:
        return queries.backend_page(s, repo, refine=refine, cache=cache)


@router.get("/dashboard/backends/{owner}/{name}.json")
def backend_json(request: Request, owner: str, name: str) -> JSONResponse:
    return JSONResponse(_backend_data(request, f"{owner}/{name}"))


def _mode(d: dict[str, Any]) -> str:
    return f"{_h(d.get('mode'))} <small>({_h(d.get('source'))}: {_h(d.get('reason'))})</small>"


def _plan_changes_html(pc: dict[str, Any]) -> str:
    if not pc["versions"]:
        return "<p data-testid='plan-changes'>no results uploaded yet: plan versions come from the results uploads</p>"
    versions = "".join(
        f"<tr data-testid='plan-version'><td><code>{_h(v['plan_digest'] or 'not recorded')}</code></td>"
        f"<td>{_h(v['uploads'])}</td><td>upload {_h(v['first_seen']['results_upload'])} (upstream "
        f"<code>{_h((v['first_seen']['upstream_sha'] or '')[:10])}</code>, {_h(v['first_seen']['received_at'])})</td>"
        f"<td>upload {_h(v['last_seen']['results_upload'])} ({_h(v['last_seen']['received_at'])})</td></tr>"
        for v in pc["versions"])
    changes = "".join(
        f"<li data-testid='plan-change'>{_h(c['at']['received_at'])}: <code>{_h(c['from_digest'])}</code> &rarr; "
        f"<code>{_h(c['to_digest'])}</code>, {_h(c['tests_changed'])} of {_h(c['tests_compared'])} tests changed<ul>"
        + "".join(f"<li><code>{_h(t['test'])}</code>: {_mode(t['before'])} &rarr; {_mode(t['after'])}</li>"
                  for t in c["changed"]) + "</ul></li>"
        for c in pc["changes"]) or "<li>no change of plan version in these uploads</li>"
    return (f"<div data-testid='plan-changes'><p>from {_h(pc['source'])}</p><table><tr><th>plan digest</th>"
            f"<th>uploads</th><th>first seen</th><th>last seen</th></tr>{versions}</table><ul>{changes}</ul></div>")


def _refinement_html(rf: dict[str, Any]) -> str:
    if not rf["available"]:
        return f"<p data-testid='refinement'>{_h(rf['note'])}</p>"
    if rf.get("note"):
        return f"<p data-testid='refinement'>{_h(rf['note'])}</p>"
    rows = "".join(
        f"<tr data-testid='proposal' data-kind='{_h(p['kind'])}'><td><code>{_h(p['test'])}</code></td>"
        f"<td>{_h(p['mode'])} ({_h(p['source'])})</td><td>{_h(p['proposed_mode'])}</td><td>{_h(p['kind'])}</td>"
        f"<td>{_h(p['reason'])}</td></tr>" for p in rf["proposals"][:200])
    kept = "".join(f"<li>{_h(c)}</li>" for c in rf["reviewer_conflicts"][:50])
    return (f"<div data-testid='refinement'><p>from {_h(rf['source'])}: {_h(len(rf['proposals']))} proposal(s) over "
            f"{_h(rf['observed'])} tests observed in {_h(rf['runs'])} run(s); nothing is applied here (a person "
            "runs <code>crcr select refine</code> on the plan)</p>"
            + (f"<table><tr><th>test</th><th>plan now</th><th>proposed</th><th>why</th><th>reason</th></tr>{rows}</table>"
               if rows else "<p>no proposals: every observed test behaved as its plan mode says</p>")
            + (f"<p>reviewer entries refine keeps:</p><ul>{kept}</ul>" if kept else "") + "</div>")


@router.get("/dashboard/backends/{owner}/{name}", response_class=HTMLResponse)
def backend_html(request: Request, owner: str, name: str) -> HTMLResponse:
    repo = f"{owner}/{name}"
    data = _backend_data(request, repo)
    jobs = "".join(
        f"<tr>{_cell(j['cell'], j['cell'], j['href'], 'job-' + str(j['id']))}<td>{_h(j['event_type'])}</td>"
        f"<td>{_h(j['pr_number'])}</td><td><code>{_h((j['head_sha'] or '')[:10])}</code></td>"
        f"<td>{_h(j['passed'])}</td><td>{_h(j['failed'])}</td></tr>" for j in data["jobs"])
    plan = data["plan_from_results"]
    if plan is None:
        plan_html = "<p>no results uploaded yet: the plan summary comes from the newest results upload</p>"
    else:
        rows = "".join(f"<tr data-mode='{_h(r['mode'])}'><td>{_h(r['mode'])}</td><td>{_h(r['reason'])}</td>"
                       f"<td>{_h(r['tests'])}</td><td>{_h(r['outcomes'])}</td><td>{_h(r['example'])}</td></tr>"
                       for r in plan["rows"])
        plan_html = (f"<p>from results upload {_h(plan['results_upload'])} (job {_h(plan['job_id'])}, upstream "
                     f"<code>{_h((plan['upstream_sha'] or '')[:10])}</code>)</p><table data-testid='plan'><tr><th>mode</th>"
                     f"<th>reason</th><th>tests</th><th>outcomes</th><th>example</th></tr>{rows}</table>")
    body = (f"<h2>plan by mode and reason</h2>{plan_html}"
            f"<h2>the plan's recent changes</h2>{_plan_changes_html(data['plan_changes'])}"
            f"<h2>refinement proposals</h2>{_refinement_html(data['refinement'])}"
            f"<h2>recent jobs {_h(data['job_states'])}</h2><table><tr><th>job</th><th>event</th><th>PR</th><th>head</th>"
            f"<th>passed</th><th>failed</th></tr>{jobs}</table>")
    return _page(f"backend {repo}", body, f"/dashboard/backends/{repo}.json")


def _triage_href(page: int, rows: int, backend: str | None, *, suffix: str = "") -> str:
    params: dict[str, Any] = {"page": page, "rows": rows}
    if backend:
        params["backend"] = backend
    return f"/dashboard/triage{suffix}?{urlencode(params)}"


def _triage_data(request: Request, page: int, rows: int, backend: str | None) -> dict[str, Any]:
    upstream = request.app.state.runtime.settings.upstream_repo
    with _sessions(request) as s:
        return queries.triage_page(s, page=page, rows=rows, backend=backend or None, upstream_repo=upstream)


@router.get("/dashboard/triage.json")
def triage_json(request: Request, page: int = Query(1, ge=1), rows: int = Query(queries.PAGE_ROWS, ge=1, le=200),
                backend: str | None = Query(None, max_length=200)) -> JSONResponse:
    return JSONResponse(_triage_data(request, page, rows, backend))


def _link(href: str | None, text: str, testid: str = "") -> str:
    attr = f" data-testid='{_h(testid)}'" if testid else ""
    return f"<a{attr} href='{_h(href)}'>{_h(text)}</a>" if href else f"<span{attr}>{_h(text)}</span>"


def _triage_row(row: dict[str, Any]) -> str:
    sus = row["suspected_upstream"]
    suspect = ""
    if sus.get("commit"):
        suspect += "commit " + _link(sus["commit_url"], str(sus["commit"])[:12], "suspect-commit") + " "
    if sus.get("pr") is not None:
        suspect += "PR " + _link(sus["pr_url"], f"#{sus['pr']}", "suspect-pr") + " "
    if sus.get("reason"):
        suspect += f"<br><small>{_h(sus['reason'])}</small>"
    jobs = "<br>".join(
        f"<a data-testid='verdict-job' href='{_h(j['href'])}'>job {_h(j['id'])}</a> {_h(j['cell'])} "
        f"<code>{_h((j['head_sha'] or '')[:10])}</code> {_h(j['event_type'])}" for j in row["jobs"])
    reruns = "<br>".join(
        f"<span data-testid='rerun' data-state='{_h(r['state'])}'><code>{_h(r['sha'][:10])}</code> {_h(r['state'])}"
        + (f" ({_h(r['error'])})" if r["error"] else "")
        + (" " + _link(r["job_href"], f"job {r['job_id']} {r['job_cell']}") if r["job_href"] else "")
        + "</span>" for r in row["reruns"]) or "none"
    reports = "<br>".join(
        f"<span data-testid='report'>{_h(p['kind'])} on " + _link(p["url"], p["target"]) + f" {_h(p['posted_at'])}</span>"
        for p in row["reports"]) or "not posted"
    return (f"<tr data-testid='verdict-{_h(row['key'])}' data-category='{_h(row['category'])}'>"
            f"<td>{_link(row['backend_href'], row['backend'])}</td><td>{_h(row['category'])}</td>"
            f"<td>{_h(row['confidence'])}</td><td>{suspect or 'none'}</td>"
            f"<td data-testid='summary'>{_h(row['summary'])}<br><small>analysed {_h(row['analyzed_at'])}"
            f"{', reproduced on retry' if row['reproduced_on_retry'] else ''}</small></td>"
            f"<td>{jobs}</td><td>{reruns}</td><td>{reports}</td></tr>")


@router.get("/dashboard/triage", response_class=HTMLResponse)
def triage_html(request: Request, page: int = Query(1, ge=1), rows: int = Query(queries.PAGE_ROWS, ge=1, le=200),
                backend: str | None = Query(None, max_length=200)) -> HTMLResponse:
    data = _triage_data(request, page, rows, backend)
    per = data["rows_per_page"]
    pager = ""
    if page > 1:
        pager += f"<a href='{_h(_triage_href(page - 1, per, backend))}'>newer</a> "
    if data["has_next"]:
        pager += f"<a href='{_h(_triage_href(page + 1, per, backend))}'>older</a>"
    empty = "<tr><td colspan=8 data-testid='no-verdicts'>no triage verdicts yet</td></tr>"
    scope = (f"<p>backend {_h(backend)} only (<a href='/dashboard/triage'>all backends</a>)</p>" if backend else "")
    body = (f"{scope}<p>advisory: what crcr's triage concluded about failing jobs, newest first</p>"
            "<table id='triage'><thead><tr><th>backend</th><th>category</th><th>confidence</th>"
            "<th>suspected upstream</th><th>summary</th><th>jobs</th><th>rerun requests</th><th>report</th></tr></thead>"
            f"<tbody>{''.join(_triage_row(r) for r in data['rows']) or empty}</tbody></table><p>{pager}</p>")
    title = "crcr: triage verdicts" + (f" for {backend}" if backend else "")
    return _page(title, body, _triage_href(page, per, backend, suffix=".json"))
