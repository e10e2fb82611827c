"""Parity with CRCR (pytorch/test-infra aws/lambda/cross_repo_ci_relay) on a plain CRCR allowlist.

Each test feeds a shape CRCR reads or produces (tests/relay/parity_shapes.py, written from
pytorch/test-infra @ 61a77570f45416dc425c17d4a648376541a84732) and checks the answer CRCR
gives; the file each behaviour was read from is named in the test's docstring.
docs/crcr-parity.md lists these tests against the behaviours.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from crcr.errors import ConfigError
from relay import checks
from relay.allowlist import AllowlistSource, parse_allowlist_text
from relay.app import create_app
from relay.intake import sign as _sign
from relay.oidc import OidcVerifier, Provider, parse_ci_providers
from tests.fakes.github import FakeGitHub
from tests.fakes.oidc import FakeIssuer
from tests.relay import parity_shapes as shapes
from tests.relay.callbacks_harness import UPSTREAM, harness
from tests.relay.harness import SECRET, delivery, make_settings, post_webhook, pr_payload, rows, wait_for

PLAIN = "L1:\n  - org/l1\nL3:\n  npu:\n    org/l3: [oncall]\nL4:\n  - org/l4: oncall\n"


# -- allowlist -------------------------------------------------------------------------------
def test_upstream_test_allowlist_reads_as_upstream_reads_it():
    """utils/allowlist.py + tests/test_allowlist.py (TestAllowlistMap._raw): levels, devices, oncalls."""
    allow = parse_allowlist_text(shapes.ALLOWLIST_FROM_UPSTREAM_TESTS)
    assert sorted((t.repo, t.level) for t in allow) == [("a/1", 1), ("b/device1-repo", 3), ("b/device2-repo", 3),
                                                        ("c/3", 4)]
    assert allow.devices() == {"device1": ["b/device1-repo"], "device2": ["b/device2-repo"]}
    assert allow.oncalls("b/device1-repo") == ("oncall_b",) and allow.oncalls("c/3") == ("oncall_c",)
    doc = parse_allowlist_text(shapes.ALLOWLIST_FROM_UPSTREAM_DOCSTRING)
    assert doc.oncalls("org5/repo5") == ("oncall1", "oncall2") and doc.level_of("org4/device2-repo") == 3


@pytest.mark.parametrize(("name", "text", "expected"), shapes.ALLOWLIST_ACCEPTED, ids=[a[0] for a in shapes.ALLOWLIST_ACCEPTED])
def test_allowlists_upstream_accepts_are_accepted(name, text, expected):
    """utils/allowlist.py (_from_raw strips blanks and '/', _parse reads only L1..L4)."""
    allow = parse_allowlist_text(text)
    assert sorted((t.repo, t.level) for t in allow) == expected


def test_unknown_top_level_keys_are_ignored_and_reported():
    """utils/allowlist.py (_parse reads raw.get(level) only): other keys change nothing."""
    allow = parse_allowlist_text("L1: [org/a]\nmaintainers: [x]\n")
    assert allow.ignored_keys == ("maintainers",) and not allow.extensions


@pytest.mark.parametrize(("name", "text", "message"), shapes.ALLOWLIST_REFUSED, ids=[r[0] for r in shapes.ALLOWLIST_REFUSED])
def test_allowlists_upstream_refuses_are_refused(name, text, message):
    """utils/allowlist.py (RuntimeError "Invalid allowlist"): refused with the entry named."""
    with pytest.raises(ConfigError) as err:
        parse_allowlist_text(text)
    assert message in str(err.value)


def test_blob_url_is_read_through_the_contents_api():
    """utils/allowlist.py (_fetch) + utils/gh_helper.py (get_repo_file): a github.com blob URL is read
    with the contents API at that ref, not fetched as the HTML page."""
    url = "https://github.com/pytorch/test-infra/blob/main/aws/lambda/cross_repo_ci_relay/allowlist.yaml"
    with FakeGitHub() as gh:
        gh.add_file("pytorch/test-infra", "aws/lambda/cross_repo_ci_relay/allowlist.yaml",
                    shapes.ALLOWLIST_FROM_UPSTREAM_TESTS, ref="main")
        allow = AllowlistSource(url, github_api_url=gh.url).get()
        assert allow.level_of("c/3") == 4
        (call,) = gh.calls("GET", r"/contents/")
        assert call.path == "/repos/pytorch/test-infra/contents/aws/lambda/cross_repo_ci_relay/allowlist.yaml"
        assert call.headers[":query"] == "ref=main"
        with pytest.raises(ConfigError, match="404"):
            AllowlistSource(url.replace("/main/", "/other-ref/"), github_api_url=gh.url).get()


# -- webhooks -----------------------------------------------------------------------------------
@pytest.fixture
def relay(tmp_path):
    def build(allowlist: str = PLAIN, gh: FakeGitHub | None = None):
        extra = {"github_url": gh.url, "app_id": gh.app_id, "key": gh.private_key_pem} if gh else {}
        settings = make_settings(tmp_path, allowlist=allowlist, **extra)
        client = TestClient(create_app(settings, start_worker=False, start_sweeper=False))
        client.__enter__()
        made.append(client)
        return client, client.app.state.runtime

    made: list[TestClient] = []
    yield build
    for c in made:
        c.__exit__(None, None, None)


def test_upstream_webhook_path_is_served(relay):
    """webhook/lambda_function.py: GitHub posts to /github/webhook."""
    client, runtime = relay()
    body = json.dumps(pr_payload()).encode()
    r = client.post(shapes.WEBHOOK_PATH, content=body, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "gw-1", "Content-Type": "application/json",
        "X-Hub-Signature-256": _sign(SECRET.encode(), body)})
    assert r.status_code == 202
    assert [x.target for x in rows(runtime, "gw-1")] == ["org/l1", "org/l3", "org/l4"]


@pytest.mark.parametrize("association", ["FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE", "CONTRIBUTOR", "MEMBER"])
def test_plain_allowlist_dispatches_every_author(relay, association):
    """webhook/event_handler.py (_dispatch_to_allowlist): every allowlisted repo, whoever wrote the PR."""
    client, runtime = relay()
    r = post_webhook(client, "pull_request", pr_payload(association=association), delivery="who")
    assert r.status_code == 202
    assert [x.target for x in rows(runtime, "who")] == ["org/l1", "org/l3", "org/l4"]


def test_crcr_section_switches_trust_gating_on(relay):
    """crcr's own behaviour (not CRCR's): with a crcr: section untrusted authors are held back."""
    client, runtime = relay(PLAIN + "crcr:\n  targets:\n    org/l4: {untrusted: true}\n")
    post_webhook(client, "pull_request", pr_payload(association="FIRST_TIME_CONTRIBUTOR"), delivery="held")
    assert [x.target for x in rows(runtime, "held") if x.state != "awaiting"] == ["org/l4"]
    # the others wait for a maintainer's approval (issue 9 item 2, docs/commands.md)
    assert [x.target for x in rows(runtime, "held") if x.state == "awaiting"] == ["org/l1", "org/l3"]


def test_device_label_sends_no_dispatch_but_backfills_checks(relay):
    """webhook/event_handler.py (handle -> _handle_pr_labeled): a ciflow/crcr/<device> label never dispatches;
    it creates check runs for the device's jobs that already reported."""
    with FakeGitHub() as gh:
        client, runtime = relay(gh=gh)
        post_webhook(client, "pull_request", pr_payload(number=42, sha="c" * 40), delivery="open")
        # the L3 job of that dispatch already reported in_progress (planted as a callback leaves it)
        from crcr.store.jobs import Job

        with runtime.sessions.begin() as s:
            s.add(Job(delivery_id="open", repo="org/l3", run_id="777", run_attempt="1", job_name="build",
                      state="in_progress", workflow_name="CI", head_sha="c" * 40, pr_number=42,
                      url="https://github.com/org/l3/actions/runs/777"))
        r = post_webhook(client, "pull_request", pr_payload("labeled", number=42, sha="c" * 40,
                                                            label="ciflow/crcr/npu"), delivery="lab")
        assert r.status_code == 200 and r.json()["status"] == "ignored"
        assert rows(runtime, "lab") == []
        assert checks.wait_for_background()
        (post,) = [c for c in gh.calls("POST", r"/check-runs$") if c.status == 201]
        assert post.body["name"] == "crcr/org/l3/CI/build" and post.body["external_id"] == "777:42"
        assert post.body["status"] == "in_progress" and gh.dispatches() == []


def _plant_check(gh: FakeGitHub, name: str, external_id: str, sha: str = "d" * 40) -> dict:
    return gh._new_check_run(UPSTREAM, {"name": name, "head_sha": sha, "external_id": external_id,
                                        "status": "completed", "conclusion": "failure"})


def test_check_suite_rerequested_reruns_each_downstream_run_once(relay):
    """webhook/event_handler.py (_handle_check_suite_rerequested): list the suite's check runs, re-run
    every distinct (repo, run_id) of an L3+ repo through the Actions API (all jobs)."""
    with FakeGitHub() as gh:
        client, runtime = relay(gh=gh)
        a = _plant_check(gh, "crcr/org/l4/CI/build", "555:42")
        _plant_check(gh, "crcr/org/l4/CI/test", "555:42")  # same run: one re-run
        _plant_check(gh, "crcr/org/l1/CI/build", "556:42")  # L1: no re-run
        _plant_check(gh, "lint", "")  # not crcr's
        payload = {"action": "rerequested", "check_suite": {"id": a["check_suite"]["id"], "head_sha": "d" * 40},
                   "repository": {"full_name": UPSTREAM}, "sender": {"login": "maintainer"}}
        r = post_webhook(client, "check_suite", payload, delivery="suite")
        assert r.status_code == 200
        assert checks.wait_for_background()
        reruns = [c.path for c in gh.calls("POST", r"/actions/runs/")]
        assert reruns == ["/repos/org/l4/actions/runs/555/rerun"]
        assert gh.dispatches() == [] and rows(runtime) == []


def test_check_run_rerequested_reruns_the_failed_jobs_of_that_run(relay):
    """webhook/event_handler.py (_handle_check_run_rerequested): the run id is external_id's part before ':',
    the repo comes from the crcr/<owner>/<repo>/... name; failed jobs re-run, nothing dispatched."""
    with FakeGitHub() as gh:
        client, runtime = relay(gh=gh)
        run = _plant_check(gh, "crcr/org/l3/CI/build", "888:42")
        payload = {"action": "rerequested", "check_run": run, "repository": {"full_name": UPSTREAM},
                   "sender": {"login": "maintainer"}}
        assert post_webhook(client, "check_run", payload, delivery="cr").status_code == 200
        assert checks.wait_for_background()
        assert [c.path for c in gh.calls("POST", r"/actions/runs/")] == ["/repos/org/l3/actions/runs/888/rerun-failed-jobs"]
        assert gh.dispatches() == [] and rows(runtime) == []
        assert delivery(runtime, "cr").event == "check_run"


# -- callbacks ------------------------------------------------------------------------------------
@pytest.fixture
def cb(tmp_path):
    with FakeGitHub() as gh, harness(tmp_path, github_api_url=gh.url, github_app_id=gh.app_id,
                                     github_private_key=gh.private_key_pem) as h:
        h.gh = gh
        yield h


def _post(h, body, repo="org/l2repo", path=shapes.CALLBACK_PATH):
    return h.client.post(path, json=body, headers={"Authorization": f"Bearer {h.issuer.mint(repository=repo)}"})


def test_pr_mode_in_progress_then_completed_on_the_upstream_path(cb):
    """callback/lambda_function.py (/github/callback) + callback_handler.py (state machine): the action's
    PR-mode bodies, in_progress then completed, are accepted; a replay is refused."""
    cb.dispatch("del-123", "org/l2repo", pr=42)
    cp = shapes.pr_client_payload("del-123")
    assert _post(cb, shapes.action_body(status="in_progress", client_payload=cp)).status_code == 200
    r = _post(cb, shapes.action_body(status="completed", conclusion="success", client_payload=cp,
                                     test_results={"passed": 3, "failed": 0, "skipped": 1}))
    assert r.status_code == 200 and r.json()["status"] == "completed"
    (job,) = cb.jobs()
    assert (job.state, job.passed, job.skipped, job.run_id) == ("completed", 3, 1, "12345")
    assert _post(cb, shapes.action_body(status="completed", conclusion="success", client_payload=cp)).status_code == 409


def test_pr_mode_completed_without_in_progress_is_refused(cb):
    """utils/redis_helper.py (set_callback_state: None -> COMPLETED rejected) for PR/push callbacks.
    CRCR answers 400 (callback_handler.py turns the AssertionError into HTTPException(400), read at
    pytorch/test-infra 06e6698c03a2edd3b1374d5a89847b2fd84bd48f / redis_helper.py 26e92d29f90a); crcr too."""
    cb.dispatch("del-123", "org/l2repo", pr=42)
    r = _post(cb, shapes.action_body(status="completed", conclusion="success",
                                     client_payload=shapes.pr_client_payload("del-123")))
    assert r.status_code == 400 and "completed before in_progress" in r.json()["error"]


@pytest.mark.parametrize("mode", ["nightly", "periodic"])
def test_nightly_and_periodic_send_only_completed_and_are_accepted(cb, mode):
    """callback_handler.py (_handle_nightly_callback) + report_callback.py (self-report mode):
    one `completed` with the upstream SHA as delivery id, no dispatch, no in_progress."""
    sha = "abc123def456" + "0" * 28
    body = shapes.action_body(status="completed", conclusion="success", delivery_id_override=sha,
                              event_type_override=mode, test_results={"passed": 10, "failed": 0, "skipped": 0})
    r = _post(cb, body, repo="org/l4repo")
    assert r.status_code == 200, r.text
    (job,) = cb.jobs()
    assert (job.state, job.self_scheduled, job.head_sha, job.passed) == ("completed", True, sha, 10)
    assert cb.gh.calls("GET", r"/commits/") == []  # CRCR takes the SHA as a correlation key
    assert [c for c in cb.gh.calls("POST", r"/check-runs$")] == []  # no upstream check for nightly


def test_nightly_in_progress_is_refused_as_upstream_refuses_it(cb):
    """callback_handler.py (_handle_nightly_callback): status other than completed -> 400."""
    r = _post(cb, shapes.action_body(status="in_progress", delivery_id_override="a" * 40,
                                     event_type_override="nightly"))
    assert r.status_code == 400 and "must have status 'completed'" in r.json()["error"]


@pytest.mark.parametrize("results", [
    [{"name": "test_add", "status": "passed"}, {"name": "test_mul", "status": "failed"}],
    {"total": 5, "passed": 4, "failed": 1, "extra": {"shards": 2}},
    "42 passed",
    7,
])
def test_test_results_of_any_json_shape_are_stored(cb, results):
    """report_callback.py (workflow.test_results = json.loads(TEST_RESULTS)) + callback_handler.py (body
    forwarded verbatim): any JSON is stored as sent; counts are read when it is CRCR's counts object."""
    cb.dispatch("del-9", "org/l2repo", pr=42)
    cp = shapes.pr_client_payload("del-9")
    _post(cb, shapes.action_body(status="in_progress", client_payload=cp))
    r = _post(cb, shapes.action_body(status="completed", conclusion="failure", client_payload=cp, test_results=results))
    assert r.status_code == 200, r.text
    (job,) = cb.jobs()
    assert job.test_results == results
    assert (job.passed, job.failed) == ((4, 1) if isinstance(results, dict) else (None, None))


def test_each_callback_creates_a_check_run_with_run_id_and_pr(cb):
    """callback_handler.py (_create_upstream_check_run: always create, never edit; external_id
    f"{run_id}:{pr_number}") + tests/test_callback_handler.py (test_check_run_external_id_is_run_id)."""
    cb.dispatch("del-4", "org/l4repo", pr=42)
    cp = shapes.pr_client_payload("del-4")
    _post(cb, shapes.action_body(status="in_progress", client_payload=cp, run_id="99999"), repo="org/l4repo")
    _post(cb, shapes.action_body(status="completed", conclusion="success", client_payload=cp, run_id="99999"),
          repo="org/l4repo")
    wait_for(lambda: all(c.synced for c in cb.checks()), what="check pushed")
    posts = [c for c in cb.gh.calls("POST", r"/check-runs$") if c.status == 201]
    assert [(p.body["status"], p.body["external_id"], p.body["name"]) for p in posts] == [
        ("in_progress", "99999:42", "crcr/org/l4repo/CI/build"),
        ("completed", "99999:42", "crcr/org/l4repo/CI/build")]
    assert cb.gh.calls("PATCH", r"/check-runs/") == []
    assert "actions" not in posts[-1].body or not posts[-1].body["actions"]  # no crcr button in parity mode


def test_below_l2_with_a_valid_token_is_ignored_not_an_error(cb):
    """callback_handler.py (_verify_access -> {"ok": True, "status": "ignored"})."""
    r = _post(cb, shapes.action_body(status="in_progress", client_payload=shapes.pr_client_payload("x")),
              repo="org/l1repo")
    assert r.status_code == 200 and r.json()["status"] == "ignored"


# -- ci_providers.yml -------------------------------------------------------------------------------
def test_upstream_ci_providers_file_is_read_unchanged(tmp_path):
    """config/ci_providers.yml + utils/jwt_helper.py (load_ci_provider_mappings): the buildkite repo_map
    in its constrained form; the legacy section is read only when the first yields nothing."""
    p = tmp_path / "ci_providers.yml"
    p.write_text(shapes.CI_PROVIDERS_UPSTREAM)
    (bk,) = parse_ci_providers(p)
    assert bk.issuer == "https://agent.buildkite.com"
    key = f"{shapes.BK_ORG}/{shapes.BK_PIPELINE}"
    assert bk.repo_map == {key: "vllm-project/vllm"}
    assert bk.required_claims == {key: {"build_branch": ("main",)}}
    p.write_text(shapes.CI_PROVIDERS_LEGACY_ONLY)
    (legacy,) = parse_ci_providers(p)
    assert legacy.repo_map == {"org-uuid/pipe-uuid": "org/l2repo"}


def test_relay_starts_with_the_upstream_providers_file_and_callbacks_work(tmp_path):
    """The reported failure: with CRCR's ci_providers.yml every /callback answered 500. Now the file is
    read when the app is built and a GitHub-token callback is answered normally."""
    p = tmp_path / "ci_providers.yml"
    p.write_text(shapes.CI_PROVIDERS_UPSTREAM)
    with harness(tmp_path, ci_providers=p) as h:
        h.dispatch("del-1", "org/l2repo", pr=42)
        r = _post(h, shapes.action_body(status="in_progress", client_payload=shapes.pr_client_payload("del-1")))
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(("text", "key"), [
    ("providers:\n  circleci:\n    repo_map: {a/b: org/c}\n", "providers.circleci"),
    ("providers:\n  buildkite:\n    repo_map:\n      no-slash: org/c\n", "providers.buildkite.repo_map.no-slash"),
    ("providers:\n  buildkite:\n    repo_map:\n      a/b: {repo: not-a-repo}\n", "providers.buildkite.repo_map.a/b"),
    ("providers: [buildkite]\n", "providers"),
    ("nothing: here\n", "providers"),
])
def test_a_providers_file_crcr_cannot_use_stops_the_start_naming_the_key(tmp_path, text, key):
    """Startup, not request time: create_app raises error[...] naming the key (no 500 per callback)."""
    from tests.relay.callbacks_harness import make_settings as cb_settings

    p = tmp_path / "ci.yml"
    p.write_text(text)
    with FakeIssuer() as issuer:
        settings = cb_settings(tmp_path, issuer, ci_providers=p)
        with pytest.raises(ConfigError) as err:
            create_app(settings, start_worker=False, start_sweeper=False)
    assert key in err.value.message


def test_buildkite_required_claims_hold_as_upstream(tmp_path):
    """utils/jwt_helper.py (_extract_repo_buildkite): an unregistered pipeline is 403, and a mapped one
    whose required claim (build_branch) has another value is 403 too; the right value passes."""
    p = tmp_path / "ci.yml"
    p.write_text(shapes.CI_PROVIDERS_SIMPLE)
    parsed = {pr.issuer: pr for pr in parse_ci_providers(p)}["https://agent.buildkite.com"]
    with FakeIssuer() as bk:
        # the same mappings, trusted from the test issuer (CRCR's issuer URL is compiled in)
        v = OidcVerifier([Provider(bk.url, bk.jwks_uri, parsed.repo_map, parsed.required_claims)],
                         "pytorch-cross-repo-ci-relay")

        def token(pipeline: str, branch: str) -> str:
            return "Bearer " + bk.mint(repository=None, extra={"organization_id": "org-uuid", "pipeline_id": pipeline,
                                                               "build_branch": branch})

        assert v.verify(token("pipe-uuid", "any")).repo == "org/l2repo"
        assert v.verify(token("nightly-uuid", "nightly")).repo == "org/l4repo"
        from relay.oidc import AuthError

        for pipeline, branch in (("nightly-uuid", "fork-pr"), ("unknown-uuid", "main")):
            with pytest.raises(AuthError) as err:
                v.verify(token(pipeline, branch))
            assert err.value.status == 403


def test_crcr_serve_refuses_an_unusable_providers_file_before_creating_anything(tmp_path):
    """The CLI face of the startup check: error[...] naming the key, exit 2, no data dir written."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    bad = tmp_path / "ci.yml"
    bad.write_text("providers:\n  circleci:\n    repo_map: {a/b: org/c}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    env.update(CRCR_DATA_DIR=str(tmp_path / "data"), CRCR_CI_PROVIDERS=str(bad))
    proc = subprocess.run([sys.executable, "-m", "crcr.cli.main", "serve", "--port", "0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "providers.circleci" in proc.stderr and "error[" in proc.stderr
    assert not (tmp_path / "data").exists()


def test_l3_label_added_before_the_first_callback_makes_that_callback_create_the_check(cb):
    """webhook/event_handler.py (_handle_pr_labeled: no job yet -> mark the check wanted) +
    callback_handler.py (needs_check_run or the wanted flag): the later callback creates it.
    Without the label an L3 job gets no check (needs_check_run is False)."""
    from crcr.store.deliveries import Delivery
    from tests.relay.callbacks_harness import HEAD_SHA

    cb.dispatch("del-l3", "org/l3repo", pr=42)
    cp = shapes.pr_client_payload("del-l3", head_sha=HEAD_SHA)
    assert _post(cb, shapes.action_body(status="in_progress", client_payload=cp, job_name="a"),
                 repo="org/l3repo").status_code == 200
    assert [c for c in cb.gh.calls("POST", r"/check-runs$")] == []  # unlabelled L3: no check
    cb.clock.advance(5)
    with cb.runtime.sessions.begin() as s:  # the label arrives (intake stores it; it dispatches nothing)
        s.add(Delivery(id="lab-1", event="pull_request", action="labeled", repo=UPSTREAM, pr_number=42,
                       head_sha=HEAD_SHA, labels=["ciflow/crcr/npu"], label="ciflow/crcr/npu", payload="{}",
                       received_at=cb.clock(), status="ignored"))
    assert _post(cb, shapes.action_body(status="in_progress", client_payload=cp, job_name="b"),
                 repo="org/l3repo").status_code == 200
    wait_for(lambda: [c for c in cb.gh.calls("POST", r"/check-runs$") if c.status == 201], what="the check")
    (post,) = [c for c in cb.gh.calls("POST", r"/check-runs$") if c.status == 201]
    assert post.body["name"] == "crcr/org/l3repo/CI/b" and post.body["external_id"] == "12345:42"


def test_rerun_requests_from_another_repository_are_ignored(relay):
    """webhook/lambda_function.py (repo != UPSTREAM_REPO -> ignored before any handling)."""
    with FakeGitHub() as gh:
        client, runtime = relay(gh=gh)
        run = _plant_check(gh, "crcr/org/l3/CI/build", "888:42")
        payload = {"action": "rerequested", "check_run": run, "repository": {"full_name": "org/l3"},
                   "sender": {"login": "someone"}}
        assert post_webhook(client, "check_run", payload, delivery="other").status_code == 200
        assert checks.wait_for_background()
        assert gh.calls("POST", r"/actions/runs/") == []
