"""The demo's upstream history: a real git repository whose commits change torch's Python.

The first commit imports ``torch/nn/functional.py`` from the *installed* torch (copied
at demo time into the demo's data directory, never into this project). Later commits
edit functions the embedded suite exercises through ``op_db``; ``crcr run --overlay``
executes each commit's version of them, so a commit that breaks a backend makes the
runs of that commit fail for real:

- PR ``demo/tanhshrink``: a harmless rewrite of ``tanhshrink`` (its tests pass);
- a first trunk push: a docstring edit of ``softsign`` (its tests run and pass: the
  green baseline triage needs before it may blame anything);
- a second trunk push of three commits: a docstring edit of ``softmin``; then a change
  that builds softsign's ``+ 1`` as a tensor on the default device (the classic way
  upstream Python breaks an out-of-tree device: CPU passes, snpu mixes devices and
  fails); then a docstring edit of ``gumbel_softmax``. The push's head fails; the middle
  commit is the culprit triage must find by running the commits in between.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

FUNCTIONAL = "torch/nn/functional.py"
AUTHOR = {"GIT_AUTHOR_NAME": "Demo Upstream", "GIT_AUTHOR_EMAIL": "upstream@demo.invalid",
          "GIT_COMMITTER_NAME": "Demo Upstream", "GIT_COMMITTER_EMAIL": "upstream@demo.invalid"}

# (old, new) text edits; each must match exactly once in torch 2.13's functional.py
TANHSHRINK_PR = ("    return input - input.tanh()\n", "    return input - torch.tanh(input)\n")
# inside softsign, below its `def` line: the diff's hunk header names softsign, so its tests are picked
SOFTSIGN_DOC = ("    See :class:`~torch.nn.Softsign` for more details.\n",
                "    See :class:`~torch.nn.Softsign` for more details; the result lies in (-1, 1).\n")
SOFTMIN_DOC = ('    r"""Apply a softmin function.\n', '    r"""Apply a softmin function along ``dim``.\n')
SOFTSIGN_BREAK = ("    return input / (input.abs() + 1)\n",
                  "    one = torch.ones(1, dtype=input.dtype)  # one allocation instead of a scalar per call\n"
                  "    return input / (input.abs() + one)\n")
GUMBEL_DOC = ("      This function is here for legacy reasons, may be removed from nn.Functional in the future.\n",
              "      This function is kept for compatibility and may be removed from nn.functional in the future.\n")


@dataclass
class Commit:
    sha: str
    title: str
    breaks: bool = False
    modified: list[str] = field(default_factory=lambda: [FUNCTIONAL])


@dataclass
class History:
    path: Path
    base: Commit
    pr_head: Commit
    pr_branch: str
    pushes: list[list[Commit]]  # trunk pushes after base, oldest first; the last one breaks snpu

    @property
    def trunk(self) -> list[Commit]:
        return [c for push in self.pushes for c in push]

    @property
    def culprit(self) -> Commit:
        return next(c for c in self.trunk if c.breaks)


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **AUTHOR, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo), **(env or {})})
    return proc.stdout.strip()


def _edit(path: Path, edit: tuple[str, str]) -> None:
    text = path.read_text(encoding="utf-8")
    if text.count(edit[0]) != 1:
        raise RuntimeError(f"the demo's edit does not apply to {path.name}: {edit[0].strip()[:60]!r} "
                           "(the installed torch is not the version this demo was written for)")
    path.write_text(text.replace(edit[0], edit[1]), encoding="utf-8")


def _commit(repo: Path, title: str, edit: tuple[str, str] | None, *, breaks: bool = False) -> Commit:
    if edit is not None:
        _edit(repo / FUNCTIONAL, edit)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", title)
    return Commit(git(repo, "rev-parse", "HEAD"), title, breaks)


def build(repo: Path, installed_functional: Path, torch_version: str) -> History:
    """Create the demo upstream repository at ``repo`` (which must not exist)."""
    (repo / "torch" / "nn").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / FUNCTIONAL).write_bytes(installed_functional.read_bytes())
    (repo / "README.md").write_text(
        "# demo upstream\n\nA local stand-in for pytorch/pytorch made by `crcr demo`: torch's Python sources of "
        f"torch {torch_version}, then the commits the demo relays.\n", encoding="utf-8")
    base = _commit(repo, f"Import torch/nn/functional.py from torch {torch_version}", None)
    base.modified = [FUNCTIONAL, "README.md"]
    branch = "demo/tanhshrink"
    git(repo, "checkout", "-q", "-b", branch)
    pr_head = _commit(repo, "tanhshrink: call torch.tanh", TANHSHRINK_PR)
    git(repo, "checkout", "-q", "main")
    baseline = [_commit(repo, "softsign: document its range", SOFTSIGN_DOC)]
    breaking = [
        _commit(repo, "softmin: name the dimension in its docstring", SOFTMIN_DOC),
        _commit(repo, "softsign: add the offset as one tensor", SOFTSIGN_BREAK, breaks=True),
        _commit(repo, "gumbel_softmax: reword the legacy note", GUMBEL_DOC),
    ]
    return History(repo, base, pr_head, branch, [baseline, breaking])
