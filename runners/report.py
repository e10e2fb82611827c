"""``crcr report``: tell the relay what a job did, the way CRCR's callback action does.

1. ``POST <callback>`` with ``workflow.status = in_progress`` (the job exists from now on);
2. ``POST <results>?delivery_id=..&run_id=..&run_attempt=..&job_name=..`` with the full
   results JSON, gzip-compressed;
3. ``POST <callback>`` with ``completed``, the conclusion, ``test_results`` counts and
   ``failed_tests`` (at most 1000 ids; the upload carries all of them).

The bearer token comes from ``--token`` / ``CRCR_CALLBACK_TOKEN``, else it is minted
from GitHub Actions' OIDC request variables (``ACTIONS_ID_TOKEN_REQUEST_URL`` and
``ACTIONS_ID_TOKEN_REQUEST_TOKEN``) for the relay's audience. It is never printed or
logged. Identity fields default to GitHub Actions' variables (``GITHUB_RUN_ID``...) and
the dispatch event (``GITHUB_EVENT_PATH``'s ``client_payload``).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from crcr.contracts.callback import MAX_FAILED_TESTS, CallbackBody, TestCounts, Workflow
from crcr.contracts.results import RunResults
from crcr.errors import ExternalError, InputError

DEFAULT_AUDIENCE = "pytorch-cross-repo-ci-relay"
_RETRY_STATUSES = {429, 502, 503, 504}


@dataclass
class JobIdentity:
    """Who is reporting: the dispatch (delivery) and the CI job, as CRCR's callback names them."""

    delivery_id: str
    event_type: str = "pull_request"
    payload: dict[str, Any] | None = None
    name: str | None = None
    url: str | None = None
    run_id: str | None = None
    run_attempt: str | None = "1"
    job_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def query(self) -> dict[str, str]:
        return {"delivery_id": self.delivery_id, "run_id": self.run_id or "", "run_attempt": self.run_attempt or "1",
                "job_name": self.job_name or ""}


def identity_from_env(env: Mapping[str, str], *, delivery_id: str | None = None, event_type: str | None = None,
                      job_name: str | None = None) -> JobIdentity:
    """The job identity from GitHub Actions' environment, overridden by explicit values."""
    client: dict[str, Any] = {}
    event_path = env.get("GITHUB_EVENT_PATH")
    if event_path and Path(event_path).is_file():
        try:
            event = json.loads(Path(event_path).read_text(encoding="utf-8"))
            client = event.get("client_payload") or {} if isinstance(event, dict) else {}
        except (OSError, json.JSONDecodeError):
            client = {}
    delivery = delivery_id or client.get("delivery_id")
    if not delivery:
        raise InputError(
            "no delivery id: pass --delivery-id, or run inside the repository_dispatch job (GITHUB_EVENT_PATH)",
            hint="the dispatch's client_payload.delivery_id names the upstream event being reported",
        )
    server, repo, run_id = env.get("GITHUB_SERVER_URL"), env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID")
    url = f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else None
    return JobIdentity(
        delivery_id=str(delivery),
        event_type=event_type or client.get("event_type") or "pull_request",
        payload=client.get("payload") if isinstance(client.get("payload"), dict) else None,
        name=env.get("GITHUB_WORKFLOW"),
        url=url,
        run_id=run_id,
        run_attempt=env.get("GITHUB_RUN_ATTEMPT") or "1",
        job_name=job_name or env.get("GITHUB_JOB"),
    )


def resolve_token(explicit: str | None, env: Mapping[str, str], audience: str = DEFAULT_AUDIENCE,
                  client: httpx.Client | None = None) -> str:
    """The bearer token: explicit, ``CRCR_CALLBACK_TOKEN``, or a GitHub Actions OIDC token."""
    if explicit:
        return explicit
    if env.get("CRCR_CALLBACK_TOKEN"):
        return env["CRCR_CALLBACK_TOKEN"]
    request_url, request_token = env.get("ACTIONS_ID_TOKEN_REQUEST_URL"), env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if request_url and request_token:
        own = client is None
        client = client or httpx.Client(timeout=30)
        try:
            response = client.get(request_url, params={"audience": audience},
                                  headers={"Authorization": f"Bearer {request_token}"})
        except httpx.HTTPError as exc:
            raise ExternalError(f"could not reach the OIDC token endpoint ({type(exc).__name__})") from exc
        finally:
            if own:
                client.close()
        if response.status_code != 200:
            raise ExternalError(f"the OIDC token endpoint answered {response.status_code}",
                                hint="the workflow needs `permissions: id-token: write`")
        value = response.json().get("value") if response.headers.get("content-type", "").startswith("application/json") else None
        if not value:
            raise ExternalError("the OIDC token endpoint returned no token")
        return str(value)
    raise InputError(
        "no token to call the relay with",
        hint="set CRCR_CALLBACK_TOKEN, or give the job `permissions: id-token: write` on GitHub Actions",
    )


def results_url_for(callback_url: str) -> str:
    """``https://relay/callback`` -> ``https://relay/results``."""
    parts = urlsplit(callback_url)
    path = parts.path.rstrip("/")
    path = (path[: -len("/callback")] if path.endswith("/callback") else path) + "/results"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def callback_body(identity: JobIdentity, status: str, results: RunResults | None = None,
                  started_at: str | None = None) -> CallbackBody:
    """CRCR's callback body for ``in_progress`` or ``completed``."""
    workflow = Workflow(
        status=status, name=identity.name, url=identity.url, run_id=identity.run_id,
        run_attempt=identity.run_attempt, job_name=identity.job_name, started_at=started_at,
    )
    failed: list[str] | None = None
    if status == "completed" and results is not None:
        failing = results.failed()
        workflow.conclusion = "failure" if failing else "success"
        workflow.completed_at = _now()
        workflow.test_results = TestCounts(**results.callback_counts())
        failed = [t.id for t in failing][:MAX_FAILED_TESTS]
    return CallbackBody(event_type=identity.event_type, delivery_id=identity.delivery_id,
                        payload=identity.payload, workflow=workflow, failed_tests=failed)


class Reporter:
    """Posts callbacks and the results upload, retrying what the relay asks to retry."""

    def __init__(self, callback_url: str, token: str, *, results_url: str | None = None,
                 client: httpx.Client | None = None, attempts: int = 4,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not callback_url.startswith(("https://", "http://")):
            raise InputError(f"--callback {callback_url!r} is not an http(s) URL",
                             hint="e.g. --callback https://relay.example/callback")
        self.callback_url = callback_url
        self.results_url = results_url or results_url_for(callback_url)
        self._token = token
        self.client = client or httpx.Client(timeout=60)
        self.attempts = attempts
        self.sleep = sleep

    def __repr__(self) -> str:  # never show the token
        return f"Reporter(callback_url={self.callback_url!r})"

    def _post(self, url: str, what: str, *, content: bytes, headers: dict[str, str],
              params: dict[str, str] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._token}", **headers}
        delay = 1.0
        for attempt in range(1, self.attempts + 1):
            try:
                response = self.client.post(url, content=content, headers=headers, params=params)
            except httpx.HTTPError as exc:
                if attempt == self.attempts:
                    raise ExternalError(f"{what}: could not reach {url} ({type(exc).__name__})",
                                        hint="check the relay URL and the network") from exc
                self.sleep(delay)
                delay *= 2
                continue
            if response.status_code in _RETRY_STATUSES and attempt < self.attempts:
                retry_after = response.headers.get("retry-after", "")
                self.sleep(float(retry_after) if retry_after.replace(".", "", 1).isdigit() else delay)
                delay *= 2
                continue
            if response.status_code >= 400:
                detail = response.text[:300]
                hint = {401: "the relay refused the token (OIDC audience and issuer must match its settings)",
                        409: "the relay does not know this job yet: the in_progress callback must come first",
                        413: "the results file is larger than the relay accepts"}.get(response.status_code)
                raise ExternalError(f"{what}: the relay answered {response.status_code}: {detail}", hint=hint)
            try:
                return response.json() if response.content else {}
            except json.JSONDecodeError:
                return {}
        raise ExternalError(f"{what}: gave up after {self.attempts} attempts")  # pragma: no cover

    def callback(self, body: CallbackBody) -> dict[str, Any]:
        data = body.model_dump_json(exclude_none=True).encode()
        return self._post(self.callback_url, f"callback ({body.workflow.status})", content=data,
                          headers={"Content-Type": "application/json"})

    def upload(self, results: RunResults, identity: JobIdentity) -> dict[str, Any]:
        raw = results.model_dump_json(exclude_none=True).encode()
        return self._post(self.results_url, "results upload", content=gzip.compress(raw, mtime=0),
                          headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
                          params=identity.query())


def report(reporter: Reporter, identity: JobIdentity, results: RunResults | None, phase: str = "all",
           log: Callable[[str], None] = lambda _m: None) -> list[dict[str, Any]]:
    """Run the phases: ``start`` (in_progress), ``finish`` (upload + completed) or ``all``."""
    answers = []
    started_at = (results.run.started_at if results is not None else None) or _now()
    # self-scheduled runs (CRCR's nightly/periodic mode) report only `completed`, and the relay
    # knows their job from that callback on: no in_progress, and the upload comes after it
    scheduled = identity.event_type in SELF_SCHEDULED
    if phase in ("start", "all") and not scheduled:
        answers.append(reporter.callback(callback_body(identity, "in_progress", started_at=started_at)))
        log(f"callback in_progress: {answers[-1].get('status', 'ok')}")
    if phase in ("finish", "all"):
        if results is None:
            raise InputError("--results FILE is needed to report a completed job")
        steps = [_upload, _completed] if not scheduled else [_completed, _upload]
        for step in steps:
            answers.append(step(reporter, identity, results, started_at, log))
    return answers


SELF_SCHEDULED = ("nightly", "periodic")


def _upload(reporter: Reporter, identity: JobIdentity, results: RunResults, started_at: Any,
            log: Callable[[str], None]) -> dict[str, Any]:
    answer = reporter.upload(results, identity)
    log(f"results upload: {answer.get('status', 'ok')} ({len(results.tests)} tests)")
    return answer


def _completed(reporter: Reporter, identity: JobIdentity, results: RunResults, started_at: Any,
               log: Callable[[str], None]) -> dict[str, Any]:
    answer = reporter.callback(callback_body(identity, "completed", results, started_at))
    log(f"callback completed: {answer.get('status', 'ok')}")
    return answer


def environment() -> dict[str, str]:
    return dict(os.environ)
