"""Shapes CRCR (PyTorch's cross-repo CI relay) produces or reads, written by hand for crcr's parity suite.

Every shape here was read from pytorch/test-infra at commit
61a77570f45416dc425c17d4a648376541a84732 (``UPSTREAM_COMMIT``); each constant names the
file it follows. No upstream code is copied: the builders below reproduce the *output*
of CRCR's callback reporter for given inputs, so the relay is tested against bodies a
real downstream job sends.
"""

from __future__ import annotations

from typing import Any

UPSTREAM_COMMIT = "61a77570f45416dc425c17d4a648376541a84732"
RELAY_DIR = "aws/lambda/cross_repo_ci_relay"
ACTION_DIR = ".github/actions/cross-repo-ci-relay-callback"

# -- allowlists ---------------------------------------------------------------------------

# aws/lambda/cross_repo_ci_relay/tests/test_allowlist.py (TestAllowlistMap._raw), as YAML
ALLOWLIST_FROM_UPSTREAM_TESTS = """\
L1:
  - a/1
L2: []
L3:
  device1:
    b/device1-repo: [oncall_b]
  device2:
    b/device2-repo: []
L4:
  - c/3: oncall_c
"""

# aws/lambda/cross_repo_ci_relay/utils/allowlist.py (module docstring): the documented format
ALLOWLIST_FROM_UPSTREAM_DOCSTRING = """\
L1:
  - org1/repo1
  - org2/repo2
L3:
  device1:
    org3/device1-repo: [oncall1, oncall2]
  device2:
    org4/device2-repo: [oncall1]
L4:
  - org5/repo5: oncall1, oncall2
"""

# utils/allowlist.py AllowlistEntry._from_raw / AllowlistMap._parse: what CRCR accepts
# (name, YAML, the (repo, level) pairs it yields)
ALLOWLIST_ACCEPTED = [
    ("trailing slash is stripped", "L1:\n  - org/repo/\n", [("org/repo", 1)]),
    ("leading slash and blanks are stripped", "L4:\n  - ' /org/repo ': oncall\n", [("org/repo", 4)]),
    ("unknown top-level keys are ignored", "L1: [org/a]\nmaintainers: [someone]\nL9: whatever\n", [("org/a", 1)]),
    ("empty levels", "L1:\nL2: []\nL3: {}\nL4:\n", []),
    ("empty document", "", []),
    ("L3 device with no oncalls", "L3:\n  npu:\n    org/npu: \n", [("org/npu", 3)]),
    ("a number as oncall text", "L4:\n  - org/a: 3\n", [("org/a", 4)]),
]

# utils/allowlist.py: what CRCR refuses (RuntimeError "Invalid allowlist: ...")
ALLOWLIST_REFUSED = [
    ("duplicate across levels (tests/test_allowlist.py)", "L1: [org/repo]\nL2: [org/repo]\n", "duplicate repo"),
    ("one repo under two L3 devices", "L3:\n  npu:\n    org/x: []\n  gpu:\n    org/x: []\n", "duplicate repo"),
    ("L3 as a list (tests/test_allowlist.py)", "L3:\n  - org/repo\n", "L3"),
    ("an L3 device as a list", "L3:\n  npu:\n    - org/repo\n", "L3.npu"),
    ("L1 as a mapping", "L1:\n  org/repo: oncall\n", "L1"),
    ("no slash", "L1: [justaname]\n", "owner/repo"),
    ("a mapping entry with two repos", "L4:\n  - {org/a: x, org/b: y}\n", "exactly one repo"),
    ("top level is a list", "- org/a\n", "expected a mapping"),
]

# -- ci_providers.yml ----------------------------------------------------------------------

# aws/lambda/cross_repo_ci_relay/config/ci_providers.yml, verbatim in structure (comments
# shortened): providers.buildkite.repo_map with the constrained form, and the legacy section
CI_PROVIDERS_UPSTREAM = """\
# CI Provider Configuration for CRCR (shape of config/ci_providers.yml)
providers:
  buildkite:
    repo_map:
      018b5ec5-c236-4037-ba08-d8a5d29bcdae/018cdabc-d930-49f6-9085-634c4cb582ed:
        repo: vllm-project/vllm
        required_claims:
          build_branch: [main]

# Legacy flat section kept for deploy-ordering safety (old code reads this).
buildkite:
  018b5ec5-c236-4037-ba08-d8a5d29bcdae/018cdabc-d930-49f6-9085-634c4cb582ed:
    repo: vllm-project/vllm
    required_claims:
      build_branch: [main]
"""
BK_ORG, BK_PIPELINE = "018b5ec5-c236-4037-ba08-d8a5d29bcdae", "018cdabc-d930-49f6-9085-634c4cb582ed"

# utils/jwt_helper.py (_load_buildkite_repo_map): the simple form and a scalar required claim
CI_PROVIDERS_SIMPLE = """\
providers:
  buildkite:
    repo_map:
      org-uuid/pipe-uuid: org/l2repo
      org-uuid/nightly-uuid:
        repo: org/l4repo
        required_claims:
          build_branch: nightly
"""

# utils/jwt_helper.py load_ci_provider_mappings: only the legacy section present
CI_PROVIDERS_LEGACY_ONLY = """\
buildkite:
  org-uuid/pipe-uuid: org/l2repo
"""


# -- callback bodies --------------------------------------------------------------------------

def action_body(
    *,
    status: str,
    run_id: str = "12345",
    run_attempt: str = "1",
    job_name: str = "build",
    workflow_name: str = "CI",
    repo: str = "org/l2repo",
    conclusion: str | None = None,
    client_payload: dict[str, Any] | None = None,
    delivery_id_override: str = "",
    event_type_override: str = "",
    test_results: Any = None,
    artifact_url: str = "",
    now: str = "2026-12-01T04:00:00.000000Z",
) -> dict[str, Any]:
    """The JSON body ``report_callback.py`` builds (.github/actions/cross-repo-ci-relay-callback).

    PR/push mode: ``client_payload`` (the dispatch's ``{event_type, delivery_id, payload}``)
    plus ``workflow``. Nightly/periodic mode (both overrides set): a payload of only the
    upstream repo and ``head_sha``, ``started_at`` and ``completed_at`` both set, status
    ``completed`` only. ``schema_version`` and ``run_id`` are strings (from the environment);
    ``conclusion`` and ``started_at`` are null while in progress; ``check_run_id`` falls back
    to ``<run_id>-<run_attempt>``.
    """
    self_report = bool(delivery_id_override and event_type_override)
    if self_report:
        body: dict[str, Any] = {"event_type": event_type_override, "delivery_id": delivery_id_override,
                                "payload": {"repository": {"full_name": "pytorch/pytorch"},
                                            "head_sha": delivery_id_override}}
    else:
        body = dict(client_payload or {})
    workflow: dict[str, Any] = {
        "schema_version": "1",
        "status": status,
        "conclusion": None if status == "in_progress" else conclusion,
        "name": workflow_name,
        "url": f"https://github.com/{repo}/actions/runs/{run_id}",
        "run_attempt": run_attempt,
        "job_name": job_name,
        "check_run_id": f"{run_id}-{run_attempt}",
        "run_id": str(run_id),
        "started_at": now if self_report else (None if status == "completed" else now),
        "completed_at": None if status == "in_progress" else now,
    }
    if test_results is not None:
        workflow["test_results"] = test_results
    if artifact_url:
        workflow["artifact_url"] = artifact_url
    body["workflow"] = workflow
    return body


def pr_client_payload(delivery_id: str, *, number: int = 42, head_sha: str = "a" * 40,
                      labels: list[str] | None = None) -> dict[str, Any]:
    """``github.event.client_payload`` of a dispatched pull_request (webhook/event_handler.py)."""
    return {
        "event_type": "pull_request",
        "delivery_id": delivery_id,
        "payload": {
            "action": "opened", "number": number,
            "pull_request": {"number": number, "head": {"sha": head_sha}, "labels": [{"name": n} for n in labels or []]},
            "repository": {"full_name": "pytorch/pytorch"},
        },
    }


# webhook/lambda_function.py and callback/lambda_function.py: the paths CRCR serves
WEBHOOK_PATH = "/github/webhook"
CALLBACK_PATH = "/github/callback"
