"""``crcr downstream``: which commit a dispatch asks to test, and what it refuses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from crcr.downstream import commits_of, parse_client_payload
from crcr.errors import ContractError
from tests.conftest import ROOT

HEAD, BASE = "a" * 40, "b" * 40


def _payload(event_type: str, payload: dict) -> object:
    return parse_client_payload(json.dumps({"event_type": event_type, "delivery_id": "d1", "payload": payload}))


def test_a_pr_is_tested_at_its_head_against_its_base() -> None:
    c = commits_of(_payload("pull_request", {"pull_request": {"number": 5, "title": "t", "head": {"sha": HEAD},
                                                              "base": {"sha": BASE}}}))
    assert (c.head, c.base, c.pr_number, c.title) == (HEAD, BASE, 5, "t")


def test_a_push_of_a_new_branch_is_diffed_against_the_head_parent() -> None:
    c = commits_of(_payload("push", {"after": HEAD, "before": "0" * 40, "head_commit": {"message": "m\n\nbody"}}))
    assert (c.head, c.base, c.pr_number, c.title) == (HEAD, None, None, "m")


@pytest.mark.parametrize("sha", ["--upload-pack=evil", "HEAD", "", "g" * 40, None])
def test_a_head_that_is_not_a_sha_never_reaches_git(sha) -> None:
    with pytest.raises(ContractError):
        commits_of(_payload("push", {"after": sha, "before": BASE}))


def test_events_without_a_commit_are_refused() -> None:
    with pytest.raises(ContractError, match="names no commit"):
        commits_of(_payload("issue_comment", {}))


def test_without_an_upstream_clone_it_records_and_says_nothing_was_tested(tmp_path) -> None:
    body = json.dumps({"event_type": "push", "delivery_id": "d9", "payload": {"after": HEAD}})
    proc = subprocess.run([sys.executable, "-m", "crcr.cli.main", "downstream", "--backend", "snpu"], input=body,
                          capture_output=True, text=True, cwd=ROOT, env={"CRCR_DATA_DIR": str(tmp_path),
                                                                           "PATH": "/usr/bin:/bin",
                                                                           "PYTHONPATH": str(ROOT)},
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "not tested" in proc.stderr
    assert list((tmp_path / "downstream" / "received" / "snpu").glob("d9-*.json"))
