"""A local GitHub REST server for tests: real HTTP on 127.0.0.1, driven by PyGithub.

Implements what crcr calls (installation lookup, installation tokens, repository
dispatches, check runs, commits, issues and issue comments), checks App JWTs (RS256, ``iss`` = app id as a
string, ``iat``/``exp`` rules) and installation tokens like GitHub does, records
every request, and injects faults per route::

    with FakeGitHub() as gh:
        gh.add_fault("POST", r"/dispatches$", status=502, times=3)
        gh.add_fault("POST", r"/dispatches$", status=403, retry_after=2, secondary=True)
        gh.add_fault("POST", r"/dispatches$", drop=True)           # close without answering
        gh.add_fault("POST", r"/dispatches$", lose_response=True)  # record, then drop
        gh.latency_s = 0.05                                         # every request

Responses follow GitHub's REST description (``tests/fixtures/github-openapi``);
``validate_response`` checks them there.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

_KEY_CACHE: dict[str, tuple[str, Any]] = {}


def app_private_key() -> tuple[str, Any]:
    """(PEM private key, public key) of a test App; generated once per process (RSA is slow)."""
    if "k" not in _KEY_CACHE:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        _KEY_CACHE["k"] = (pem, key.public_key())
    return _KEY_CACHE["k"]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float
    status: int | None = None
    responded: bool = False  # False: the connection was dropped before an answer was written
    fault: str | None = None
    done_at: float | None = None  # when the answer was written


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    times: int
    status: int | None = None
    retry_after: float | None = None
    secondary: bool = False
    drop: bool = False
    lose_response: bool = False
    latency_s: float = 0.0
    fired: int = 0


@dataclass
class _State:
    installations: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, tuple[int, float]] = field(default_factory=dict)  # token -> (installation, expires)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    commits: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    files: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (repo, path, ref) -> text
    suites: dict[tuple[str, str], int] = field(default_factory=dict)  # (repo, head_sha) -> check suite id
    # issues and pull requests by (repo, number) (a PR is an issue with `pull_request`), and their comments
    issues: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    comments: list[dict[str, Any]] = field(default_factory=list)


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _user(login: str, uid: int, kind: str = "Organization") -> dict[str, Any]:
    base = "https://api.github.com/users/" + login  # never dereferenced by crcr
    return {
        "login": login, "id": uid, "node_id": f"MDQ6VXNlcj{uid}", "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}",
        "gravatar_id": "", "url": base, "html_url": f"https://github.com/{login}", "followers_url": base + "/followers",
        "following_url": base + "/following{/other_user}", "gists_url": base + "/gists{/gist_id}",
        "starred_url": base + "/starred{/owner}{/repo}", "subscriptions_url": base + "/subscriptions",
        "organizations_url": base + "/orgs", "repos_url": base + "/repos", "events_url": base + "/events{/privacy}",
        "received_events_url": base + "/received_events", "type": kind, "site_admin": False,
    }


class FakeGitHub:
    """The server; use as a context manager or call ``start()`` / ``stop()``."""

    def __init__(self, *, app_id: str = "4242", default_installation: int | None = 1,
                 token_ttl_s: float = 3600.0) -> None:
        self.app_id = app_id
        self.private_key_pem, self.public_key = app_private_key()
        self.default_installation = default_installation
        self.token_ttl_s = token_ttl_s
        self.latency_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0  # most requests being served at once (shows parallel fan-out)
        self.state = _State()
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1000)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- control -------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.request_queue_size = 256
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-github", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_fault(self, method: str, path_regex: str, *, times: int = 1, status: int | None = None,
                  retry_after: float | None = None, secondary: bool = False, drop: bool = False,
                  lose_response: bool = False, latency_s: float = 0.0) -> Fault:
        """Make the next ``times`` matching requests fail as described (first match wins)."""
        f = Fault(method.upper(), re.compile(path_regex), times, status, retry_after, secondary, drop,
                  lose_response, latency_s)
        with self._lock:
            self.faults.append(f)
        return f

    def set_installation(self, repo: str, installation_id: int | None) -> None:
        """``None``: the App is not installed on ``repo`` (lookup answers 404)."""
        with self._lock:
            self.state.installations[repo] = installation_id  # type: ignore[assignment]

    def add_commit(self, repo: str, sha: str) -> None:
        with self._lock:
            self.state.commits[(repo, sha)] = {"sha": sha}

    # ---- what happened -----------------------------------------------------------------
    def add_file(self, repo: str, path: str, text: str, *, ref: str = "main") -> None:
        """A file the public contents API serves (``GET /repos/{repo}/contents/{path}?ref=``)."""
        with self._lock:
            self.state.files[(repo, path, ref)] = text

    def calls(self, method: str | None = None, path_regex: str | None = None) -> list[Recorded]:
        with self._lock:
            items = list(self.requests)
        return [r for r in items if (method is None or r.method == method)
                and (path_regex is None or re.search(path_regex, r.path))]

    def dispatches(self, repo: str | None = None) -> list[Recorded]:
        pat = rf"^/repos/{re.escape(repo)}/dispatches$" if repo else r"^/repos/[^/]+/[^/]+/dispatches$"
        return self.calls("POST", pat)

    def token_mints(self) -> list[Recorded]:
        return [r for r in self.calls("POST", r"/access_tokens$") if r.status == 201]

    # ---- internals -------------------------------------------------------------------------
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.fired < f.times and f.method == method and f.pattern.search(path):
                    f.fired += 1
                    return f
        return None

    def _installation_for(self, repo: str) -> int | None:
        if repo in self.state.installations:
            return self.state.installations[repo]
        return self.default_installation

    def _check_app_jwt(self, auth: str) -> str | None:
        """None when the App JWT is valid, else GitHub's error message."""
        if not auth.lower().startswith("bearer "):
            return "A JSON web token could not be decoded"
        token = auth.split(" ", 1)[1]
        try:
            claims = jwt.decode(token, self.public_key, algorithms=["RS256"],
                                options={"require": ["iat", "exp", "iss"], "verify_iss": False}, leeway=0)
        except jwt.ExpiredSignatureError:
            return "'Expiration time' claim ('exp') must be a numeric value representing the future time"
        except jwt.PyJWTError:
            return "A JSON web token could not be decoded"
        if claims["iss"] != self.app_id or not isinstance(claims["iss"], str):
            return "'Issuer' claim ('iss') must be an Integer"
        if claims["exp"] - claims["iat"] > 660 or claims["iat"] > time.time() + 60:
            return "'Expiration time' claim ('exp') is too far in the future"
        return None

    def _check_token(self, auth: str) -> int | None:
        parts = auth.split(" ", 1)
        if len(parts) != 2 or parts[0].lower() not in ("token", "bearer"):
            return None
        with self._lock:
            found = self.state.tokens.get(parts[1])
        if not found or found[1] < time.time():
            return None
        return found[0]

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        """Route one request; returns (status, headers, JSON body or None)."""
        auth = headers.get("authorization", "")
        m = re.fullmatch(r"/repos/([^/]+)/([^/]+)/installation", path)
        if m and method == "GET":
            err = self._check_app_jwt(auth)
            if err:
                return 401, {}, {"message": err, "documentation_url": "https://docs.github.com/rest"}
            repo = f"{m[1]}/{m[2]}"
            inst = self._installation_for(repo)
            if inst is None:
                return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
            return 200, {}, self._installation(inst, m[1])
        m = re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)
        if m and method == "POST":
            err = self._check_app_jwt(auth)
            if err:
                return 401, {}, {"message": err, "documentation_url": "https://docs.github.com/rest"}
            token = "ghs_" + secrets.token_hex(18)
            expires = time.time() + self.token_ttl_s
            with self._lock:
                self.state.tokens[token] = (int(m[1]), expires)
            return 201, {}, {"token": token, "expires_at": _iso(expires), "permissions": {"contents": "read",
                             "checks": "write"}, "repository_selection": "all"}
        m = re.fullmatch(r"/repos/([^/]+)/([^/]+)/contents/(.+)", path)
        if m and method == "GET":  # public repos: no token needed
            ref = dict(p.split("=", 1) for p in headers.get(":query", "").split("&") if "=" in p).get("ref", "main")
            with self._lock:
                text = self.state.files.get((f"{m[1]}/{m[2]}", m[3], ref))
            if text is None:
                return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
            data = text.encode()
            return 200, {}, {"type": "file", "encoding": "base64", "size": len(data), "name": m[3].rsplit("/", 1)[-1],
                             "path": m[3], "sha": "f" * 40, "content": base64.b64encode(data).decode(),
                             "url": f"{self.url}/repos/{m[1]}/{m[2]}/contents/{m[3]}?ref={ref}",
                             "git_url": None, "html_url": None, "download_url": None,
                             "_links": {"self": None, "git": None, "html": None}}
        m = re.fullmatch(r"/repos/([^/]+)/([^/]+)/issues(?:/(\d+)(/comments)?)?", path)
        if m:
            return self._issues(method, f"{m[1]}/{m[2]}", int(m[3]) if m[3] else None, bool(m[4]), auth, body)
        m = re.fullmatch(r"/repos/([^/]+)/([^/]+)/(dispatches|check-runs|check-runs/(\d+)|commits/([^/]+)"
                         r"|actions/runs/(\d+)/(rerun|rerun-failed-jobs)|check-suites/(\d+)/check-runs)", path)
        if not m:
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        repo = f"{m[1]}/{m[2]}"
        inst = self._check_token(auth)
        if inst is None:
            return 401, {}, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
        if self._installation_for(repo) != inst:
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        what = m[3]
        if what == "dispatches" and method == "POST":
            problem = self._dispatch_problem(body)
            if problem:
                return 422, {}, {"message": problem, "documentation_url": "https://docs.github.com/rest"}
            return 204, {}, None
        if what == "check-runs" and method == "POST":
            if not isinstance(body, dict) or not body.get("name") or not body.get("head_sha"):
                return 422, {}, {"message": "Invalid request.", "documentation_url": "https://docs.github.com/rest"}
            run = self._new_check_run(repo, body)
            return 201, {}, run
        if m[4] and method == "PATCH":
            cid = int(m[4])
            with self._lock:
                run = self.state.check_runs.get(cid)
                if run is None or not isinstance(body, dict):
                    return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
                self._apply_check_run(run, body)
                return 200, {}, dict(run)
        if m[6] and method == "POST":  # re-run a workflow run (all jobs, or the failed ones)
            return 201, {}, {}
        if m[8] and method == "GET":
            with self._lock:
                runs = [dict(r) for r in self.state.check_runs.values()
                        if r["check_suite"]["id"] == int(m[8]) and r["url"].split("/repos/", 1)[1].startswith(repo + "/")]
            return 200, {}, {"total_count": len(runs), "check_runs": runs}
        if m[5] and method == "GET":
            with self._lock:
                known = (repo, m[5]) in self.state.commits
            if not known:
                return 422, {}, {"message": f"No commit found for SHA: {m[5]}",
                                 "documentation_url": "https://docs.github.com/rest"}
            return 200, {}, self._commit(repo, m[5])
        return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}

    def add_issue(self, repo: str, number: int, *, title: str = "a PR", labels: list[str] | None = None,
                  pull_request: bool = True) -> dict[str, Any]:
        """Plant an issue or PR (``labels`` by name) that crcr may read and comment on."""
        issue = self._issue(repo, number, title, "", labels or [], pull_request)
        with self._lock:
            self.state.issues[(repo, number)] = issue
        return issue

    def _issue(self, repo: str, number: int, title: str, body: str, labels: list[str], pr: bool) -> dict[str, Any]:
        base = f"{self.url}/repos/{repo}"
        issue = {
            "id": 500000 + number, "node_id": f"I_{number}", "number": number, "title": title, "body": body,
            "state": "open", "url": f"{base}/issues/{number}", "html_url": f"https://github.com/{repo}/issues/{number}",
            "comments_url": f"{base}/issues/{number}/comments", "labels_url": f"{base}/issues/{number}/labels{{/name}}",
            "repository_url": base, "events_url": f"{base}/issues/{number}/events",
            "labels": [{"id": i + 1, "name": n, "color": "ededed", "default": False} for i, n in enumerate(labels)],
            "user": _user("crcr-test[bot]", 77, "Bot"), "comments": 0, "locked": False, "assignees": [],
            "created_at": _iso(time.time()), "updated_at": _iso(time.time()), "closed_at": None,
            "author_association": "NONE",
        }
        if pr:
            issue["pull_request"] = {"url": f"{base}/pulls/{number}", "html_url": f"https://github.com/{repo}/pull/{number}"}
        return issue

    def _issues(self, method: str, repo: str, number: int | None, comments: bool, auth: str,
                body: Any) -> tuple[int, dict[str, str], Any]:
        inst = self._check_token(auth)
        if inst is None:
            return 401, {}, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
        if self._installation_for(repo) != inst:
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        with self._lock:
            if number is None and method == "POST":
                if not isinstance(body, dict) or not isinstance(body.get("title"), str) or not body["title"]:
                    return 422, {}, {"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest"}
                if len(str(body.get("body") or "")) > 65536:
                    return 422, {}, {"message": "body is too long (maximum is 65536 characters)",
                                     "documentation_url": "https://docs.github.com/rest"}
                n = 1 + max([k[1] for k in self.state.issues if k[0] == repo], default=0)
                issue = self._issue(repo, n, body["title"], str(body.get("body") or ""), [], False)
                self.state.issues[(repo, n)] = issue
                return 201, {}, dict(issue)
            issue = self.state.issues.get((repo, number)) if number is not None else None
            if issue is None:
                return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
            if not comments and method == "GET":
                return 200, {}, dict(issue)
            if comments and method == "POST":
                if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                    return 422, {}, {"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest"}
                if len(body["body"]) > 65536:
                    return 422, {}, {"message": "body is too long (maximum is 65536 characters)",
                                     "documentation_url": "https://docs.github.com/rest"}
                cid = next(self._ids)
                comment = {"id": cid, "node_id": f"IC_{cid}", "body": body["body"],
                           "url": f"{self.url}/repos/{repo}/issues/comments/{cid}",
                           "html_url": f"https://github.com/{repo}/issues/{number}#issuecomment-{cid}",
                           "issue_url": issue["url"], "user": _user("crcr-test[bot]", 77, "Bot"),
                           "created_at": _iso(time.time()), "updated_at": _iso(time.time()),
                           "author_association": "NONE", "repo": repo, "number": number}
                self.state.comments.append(comment)
                issue["comments"] += 1
                return 201, {}, dict(comment)
        return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}

    @staticmethod
    def _dispatch_problem(body: Any) -> str | None:
        if not isinstance(body, dict):
            return "Invalid request."
        et = body.get("event_type")
        if not isinstance(et, str) or not 1 <= len(et) <= 100:
            return "Invalid request.\n\nevent_type must be 1..100 characters."
        cp = body.get("client_payload", {})
        if not isinstance(cp, dict):
            return "Invalid request.\n\nclient_payload is not an object."
        if len(cp) > 10:
            return "Invalid request.\n\nNo more than 10 properties are allowed; client_payload has more."
        if len(json.dumps(cp).encode()) >= 64 * 1024:
            return "client_payload is too large (must be less than 64KB)"
        return None

    def _installation(self, inst: int, owner: str) -> dict[str, Any]:
        return {
            "id": inst, "account": _user(owner, 9000 + inst), "repository_selection": "all",
            "access_tokens_url": f"{self.url}/app/installations/{inst}/access_tokens",
            "repositories_url": f"{self.url}/installation/repositories",
            "html_url": f"https://github.com/organizations/{owner}/settings/installations/{inst}",
            "app_id": int(self.app_id), "app_slug": "crcr-test", "target_id": 9000 + inst,
            "target_type": "Organization", "permissions": {"contents": "read", "checks": "write", "metadata": "read"},
            "events": ["pull_request", "push"], "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "single_file_name": None, "suspended_by": None,
            "suspended_at": None,
        }

    def _app(self) -> dict[str, Any]:
        return {
            "id": int(self.app_id), "slug": "crcr-test", "node_id": "MDM6QXBwNDI0Mg==", "client_id": "Iv1.test",
            "owner": _user("crcr", 77), "name": "crcr test", "description": "crcr's test App",
            "external_url": "https://example.test", "html_url": "https://github.com/apps/crcr-test",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "permissions": {"checks": "write", "contents": "read"}, "events": ["pull_request"],
        }

    def _new_check_run(self, repo: str, body: dict[str, Any]) -> dict[str, Any]:
        cid = next(self._ids)
        now = _iso(time.time())
        run = {
            "id": cid, "node_id": f"CR_{cid}", "head_sha": body["head_sha"], "name": body["name"],
            "url": f"{self.url}/repos/{repo}/check-runs/{cid}",
            "html_url": f"https://github.com/{repo}/runs/{cid}", "details_url": body.get("details_url"),
            "status": body.get("status", "queued"), "conclusion": body.get("conclusion"),
            "started_at": body.get("started_at", now), "completed_at": body.get("completed_at"),
            "external_id": body.get("external_id", ""), "check_suite": {"id": self._suite(repo, body["head_sha"])},
            "output": {"title": None, "summary": None, "text": None, "annotations_count": 0,
                       "annotations_url": f"{self.url}/repos/{repo}/check-runs/{cid}/annotations"},
            "app": self._app(), "pull_requests": [],
        }
        self._apply_check_run(run, body)
        with self._lock:
            self.state.check_runs[cid] = run
        return dict(run)

    def _suite(self, repo: str, head_sha: str) -> int:
        """One check suite per (repo, commit) for the App, as GitHub keeps one per App and commit."""
        with self._lock:
            return self.state.suites.setdefault((repo, head_sha), 500_000 + len(self.state.suites))

    @staticmethod
    def _apply_check_run(run: dict[str, Any], body: dict[str, Any]) -> None:
        for key in ("name", "details_url", "external_id", "status", "conclusion", "started_at", "completed_at"):
            if key in body:
                run[key] = body[key]
        if body.get("conclusion") and "status" not in body:
            run["status"] = "completed"
        if run["status"] == "completed" and not run.get("completed_at"):
            run["completed_at"] = _iso(time.time())
        out = body.get("output")
        if isinstance(out, dict):
            run["output"] = {**run["output"], **{k: out.get(k) for k in ("title", "summary", "text")},
                             "annotations_count": len(out.get("annotations") or [])}

    def _commit(self, repo: str, sha: str) -> dict[str, Any]:
        base = f"{self.url}/repos/{repo}"
        person = {"name": "A Person", "email": "a@example.test", "date": "2026-01-01T00:00:00Z"}
        return {
            "url": f"{base}/commits/{sha}", "sha": sha, "node_id": f"C_{sha[:8]}",
            "html_url": f"https://github.com/{repo}/commit/{sha}", "comments_url": f"{base}/commits/{sha}/comments",
            "commit": {"url": f"{base}/git/commits/{sha}", "author": person, "committer": person,
                       "message": "a commit", "comment_count": 0,
                       "tree": {"sha": "0" * 40, "url": f"{base}/git/trees/{'0' * 40}"}},
            "author": None, "committer": None, "parents": [],
        }


class _QuietServer(ThreadingHTTPServer):
    """A client that vanishes (a SIGKILLed worker) is normal here, not an error to print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _serve(self) -> None:
        fake = self.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path, _, query = self.path.partition("?")
        api_prefix = "/api/v3"  # a GHES-style base URL is accepted too
        if path.startswith(api_prefix):
            path = path[len(api_prefix):]
        headers = {k.lower(): v for k, v in self.headers.items()}
        headers[":query"] = query  # not a real header name: the query string, for routes that read it
        rec = Recorded(self.command, path, headers, body, time.time())
        with fake._lock:
            fake.requests.append(rec)
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            self._answer(fake, rec, path, headers, body)
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _answer(self, fake: FakeGitHub, rec: Recorded, path: str, headers: dict[str, str], body: Any) -> None:
        if fake.latency_s:
            time.sleep(fake.latency_s)
        fault = fake._take_fault(self.command, path)
        if fault is not None:
            if fault.latency_s:
                time.sleep(fault.latency_s)
            if fault.drop:
                rec.fault = "drop"
                self._drop()
                return
            if fault.status is not None:
                rec.fault = f"status {fault.status}"
                extra = {}
                if fault.retry_after is not None:
                    extra["Retry-After"] = str(int(fault.retry_after))
                msg = ("You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
                       if fault.secondary else "Server Error")
                self._send(fault.status, extra, {"message": msg, "documentation_url": "https://docs.github.com/rest"},
                           rec)
                return
        status, extra, payload = fake.handle(self.command, path, headers, body)
        rec.status = status
        if fault is not None and fault.lose_response:
            rec.fault = "lose_response"  # the work is done (recorded) but the client never hears back
            self._drop()
            return
        self._send(status, extra, payload, rec)

    def _send(self, status: int, extra: dict[str, str], payload: Any, rec: Recorded) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-GitHub-Request-Id", f"FAKE:{id(rec):x}")
        self.send_header("X-RateLimit-Limit", "5000")
        self.send_header("X-RateLimit-Remaining", "4999")
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        if data:
            self.wfile.write(data)
        self.wfile.flush()
        rec.status = status
        rec.responded = True
        rec.done_at = time.time()

    def _drop(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.close_connection = True

    do_GET = _serve
    do_POST = _serve
    do_PATCH = _serve
    do_PUT = _serve
    do_DELETE = _serve
