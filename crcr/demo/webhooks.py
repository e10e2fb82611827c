"""Real webhook payloads (``crcr/data/demo/``, see SOURCES.md there) pointed at the demo's history.

Only the fields that name the repository, the refs and the commits are rewritten, in
memory; the rest is what GitHub sent. ``sign`` is GitHub's ``X-Hub-Signature-256``.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from importlib import resources
from typing import Any

from crcr.demo.history import History

UPSTREAM = "pytorch/pytorch"
PR_NUMBER = 31  # the captured PR's own number


def _load(name: str) -> dict[str, Any]:
    data = json.loads(resources.files("crcr.data").joinpath("demo", name).read_text(encoding="utf-8"))
    return data.get("payload", data) if "payload" in data and "name" in data else data


def _repository(original: dict[str, Any]) -> dict[str, Any]:
    repo = copy.deepcopy(original)
    owner, name = UPSTREAM.split("/")
    repo.update({"full_name": UPSTREAM, "name": name, "html_url": f"https://github.com/{UPSTREAM}"})
    if isinstance(repo.get("owner"), dict):
        repo["owner"]["login"] = owner
    return repo


def pull_request(history: History) -> dict[str, Any]:
    """The captured ``pull_request.opened`` webhook, for the demo PR."""
    payload = _load("pull_request.opened.json")
    payload["repository"] = _repository(payload["repository"])
    payload["number"] = PR_NUMBER
    pr = payload["pull_request"]
    pr.update({"number": PR_NUMBER, "title": history.pr_head.title, "author_association": "MEMBER",
               "body": "Calls torch.tanh in tanhshrink (crcr demo).",
               "html_url": f"https://github.com/{UPSTREAM}/pull/{PR_NUMBER}"})
    pr["head"].update({"sha": history.pr_head.sha, "ref": history.pr_branch, "label": f"pytorch:{history.pr_branch}"})
    pr["base"].update({"sha": history.base.sha, "ref": "main", "label": "pytorch:main"})
    for side in ("head", "base"):
        if isinstance(pr[side].get("repo"), dict):
            pr[side]["repo"] = _repository(pr[side]["repo"])
    pr["labels"] = []
    return payload


def push(history: History, index: int = -1) -> dict[str, Any]:
    """The captured ``push`` webhook, for the demo's trunk push ``index`` (default: the breaking one)."""
    payload = _load("push.payload.json")
    payload["repository"] = _repository(payload["repository"])
    template = payload["commits"][0]
    pushed = history.pushes[index]
    position = history.pushes.index(pushed)
    before = history.pushes[position - 1][-1].sha if position > 0 else history.base.sha
    commits = []
    for c in pushed:
        entry = copy.deepcopy(template)
        entry.update({"id": c.sha, "tree_id": None, "message": c.title, "added": [], "removed": [],
                      "modified": list(c.modified), "url": f"https://github.com/{UPSTREAM}/commit/{c.sha}"})
        commits.append(entry)
    payload.update({"ref": "refs/heads/main", "before": before, "after": pushed[-1].sha,
                    "created": False, "base_ref": None, "commits": commits, "head_commit": commits[-1],
                    "compare": f"https://github.com/{UPSTREAM}/compare/{before[:12]}...{pushed[-1].sha[:12]}"})
    return payload


def sign(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
