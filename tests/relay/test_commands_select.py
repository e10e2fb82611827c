"""``/ci select`` runs the selector's real ``crcr select pick`` on the PR's diff and answers
with what would run and why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, ROOT
from tests.fakes.github import FakeGitHub
from tests.relay.commands_harness import ALLOWLIST, SHA_A, UPSTREAM, command_relay, pr_event

SEL = FIXTURES / "selector"
DIFF = """diff --git a/test/test_fixture_ops.py b/test/test_fixture_ops.py
--- a/test/test_fixture_ops.py
+++ b/test/test_fixture_ops.py
@@ -40,6 +40,7 @@ class TestFixtureDevice(TestCase):
     def test_add_plain(self, device):
         a = torch.ones(3, device=device)
+        a = a * 2
         torch.add(a, a)
"""


def crcr(*args, cwd, env):
    done = subprocess.run([sys.executable, "-c", "from crcr.cli.main import main; main()", *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """An inventory and snpu plan of the selector's fixture upstream tree, built with the CLI.

    The inventory reads the tree against the selector tests' fixture op table (a slice of the installed torch's,
    seeded where the CLI caches that table), as the selector's own CLI tests do: its two OpInfo templates are
    instantiated over 12 ops instead of 798 (153 tests and 93 template probes instead of 6,587 and 4,541, whose
    probes alone took 6-10 minutes on two busy cores). The 22 tests without an op, the edited one among them, are
    the same either way."""
    from importlib.metadata import version

    tmp = tmp_path_factory.mktemp("plan")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CRCR_DATA_DIR": str(tmp / "data")}
    opdb = tmp / "data" / "selector" / f"opdb-{version('torch')}.json"
    opdb.parent.mkdir(parents=True)
    opdb.write_text((SEL / "opdb.json").read_text(encoding="utf-8"), encoding="utf-8")
    crcr("select", "inventory", "--pytorch-src", SEL / "upstream", "--static", "--out", tmp / "inv.json", cwd=tmp,
         env=env)  # the fixture tree is test data: parsed, never collected
    crcr("select", "plan", "--inventory", tmp / "inv.json", "--capabilities", SEL / "snpu-capabilities.yaml",
         "--disabled", SEL / "disabled-tests.json", "--out", tmp / "plan", "--backend", "snpu", cwd=tmp, env=env)
    return tmp


@pytest.mark.slow
def test_select_answers_with_the_pick_and_its_reasons(tmp_path, plan):
    allowlist = ALLOWLIST.replace("crcr:\n", f"crcr:\n  commands:\n    select:\n      org/l4: {{backend: snpu, "
                                  f"plan: '{plan / 'plan'}', inventory: '{plan / 'inv.json'}', budget_s: 30}}\n")
    with FakeGitHub() as gh, command_relay(tmp_path, gh, allowlist=allowlist) as h:
        gh.set_permission(UPSTREAM, "maint", "maintain")
        gh.set_pull(UPSTREAM, 7, SHA_A, diff=DIFF)
        h.webhook("pull_request", pr_event())
        c = h.comment("/ci select l4")
        (reply,) = h.replies()
        body = reply["body"]
        assert "**org/l4** (snpu):" in body and "picked " in body
        assert "test/test_fixture_ops.py" in body and "[edited-test]" in body  # the file-level pick names the edited file
        assert gh.reactions_on(UPSTREAM, c["comment"]["id"]) == ["eyes", "rocket"]
        # the diff was read from GitHub with the diff media type
        assert any("diff" in r.headers.get("accept", "") for r in gh.calls("GET", r"/pulls/7$"))
        h.comment("/ci select l2")  # a backend without a plan
        assert "no test selection plan is configured for org/l2" in h.replies()[0]["body"]
