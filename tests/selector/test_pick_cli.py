"""``crcr select pick`` end to end: --pr and --event through the real PyGithub client against the
local GitHub server (300+ files, paginated), --diff with a file-level plan, empty picks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crcr.contracts.pick import load_pick
from tests.fakes.github import FakeGitHub

PATCH = "@@ -10,3 +10,3 @@ def relu(input):\n-    return x\n+    return y\n"


def _plan(tmp_path: Path, files: list[str]) -> Path:
    """A file-level plan that runs the given upstream files."""
    root = tmp_path / "plan"
    for f in files:
        path = root / (f.removeprefix("test/").removesuffix(".py") + ".yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"schema_version: 1\nbackend: snpu\nupstream: {{file: {f}}}\n"
                        "defaults: {mode: skip, reason: not yet classified}\n"
                        "tests:\n  - id: .*\n    mode: run\n    reason: the whole file runs\n    source: reviewer\n")
    return root


@pytest.fixture(scope="session")
def torch_graph_json(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The installed torch's import graph, built once for the session (a parse takes seconds)."""
    from selector.importgraph import cached_torch_graph
    from selector.inventory.sources import installed_torch_dir

    path = tmp_path_factory.mktemp("graph") / "torch-imports.json"
    cached_torch_graph(installed_torch_dir(), path)
    return path.read_text()


@pytest.fixture(autouse=True)
def _seed_graph(cli, tmp_path: Path, torch_graph_json: str) -> None:
    from importlib.metadata import version

    from selector.importgraph import graph_cache

    graph_cache(tmp_path / "data", version("torch")).write_text(torch_graph_json)


RUN = ["test/test_nn.py", "test/test_torch.py", "test/test_ops.py", "test/test_autograd.py",
       "test/test_dataloader.py", "test/test_binary_ufuncs.py"]


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch):
    with FakeGitHub() as gh:
        monkeypatch.setenv("CRCR_GITHUB_API_URL", gh.url)
        monkeypatch.delenv("CRCR_GITHUB_TOKEN", raising=False)
        files = [{"filename": f"docs/source/page{i}.rst", "patch": "@@ -1 +1 @@\n-a\n+b\n"} for i in range(320)]
        files.append({"filename": "torch/utils/data/dataloader.py", "patch": PATCH})  # on the last page
        files.append({"filename": "test/test_autograd.py", "patch": "@@ -5,1 +5,1 @@ def test_x(self):\n-a\n+b\n"})
        gh.add_pull("pytorch/pytorch", 4242, title="Fix dataloader workers", body="skip all tests please", files=files)
        yield gh


def test_pr_reads_every_page_of_files(cli, github, tmp_path):
    code, out, err = cli("select", "pick", "--pr", "4242", "--plan", _plan(tmp_path, RUN), "--out", tmp_path / "p.json")
    assert code == 0, err
    pages = github.calls("GET", r"/pulls/4242/files$")
    assert len(pages) >= 4  # 322 files, 30 (or 100) per page
    p = load_pick(tmp_path / "p.json")
    picked = [f.file for f in p.files]
    assert picked[0] == "test/test_autograd.py"  # edited: always first
    assert "test/test_dataloader.py" in picked  # its source change was on the last page
    assert p.pr == 4242


def test_event_payload_reads_the_pr_it_names(cli, github, tmp_path):
    event = {"event_type": "pull_request", "delivery_id": "d-1",
             "payload": {"action": "opened", "repository": {"full_name": "pytorch/pytorch"},
                         "pull_request": {"number": 4242, "title": "Fix dataloader", "body": "see test_nn"}}}
    (tmp_path / "event.json").write_text(json.dumps({"client_payload": event}))
    code, out, err = cli("select", "pick", "--event", tmp_path / "event.json", "--plan", _plan(tmp_path, RUN),
                         "--budget-share", "0.5", "--out", tmp_path / "p.json")
    assert code == 0, err
    p = load_pick(tmp_path / "p.json")
    assert p.pr == 4242 and p.budget_s and p.total_s
    assert sum(f.estimated_s for f in p.files if "always run" not in f.reason) <= p.budget_s
    mentioned = [f for f in p.files if any(s.signal == "mentioned" for s in f.signals)]
    assert [f.file for f in mentioned] == ["test/test_nn.py"]


def test_missing_pr_is_a_clear_error(cli, github, tmp_path):
    code, out, err = cli("select", "pick", "--pr", "1", "--plan", _plan(tmp_path, RUN))
    assert code == 2 and "GitHub answered 404" in err and "Traceback" not in err


def test_docs_only_diff_picks_the_smoke_set(cli, tmp_path):
    (tmp_path / "d.diff").write_text("diff --git a/docs/x.rst b/docs/x.rst\n--- a/docs/x.rst\n+++ b/docs/x.rst\n"
                                     "@@ -1 +1 @@\n-a\n+b\n")
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", _plan(tmp_path, RUN),
                         "--out", tmp_path / "p.json")
    assert code == 0, err
    files = [f.file for f in load_pick(tmp_path / "p.json").files]
    assert files == ["test/test_torch.py", "test/test_autograd.py", "test/test_nn.py", "test/test_binary_ufuncs.py"]


def test_empty_pick_says_why_and_exits_nonzero(cli, tmp_path):
    (tmp_path / "d.diff").write_text("diff --git a/setup.py b/setup.py\n--- a/setup.py\n+++ b/setup.py\n"
                                     "@@ -1 +1 @@\n-a\n+b\n")
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", _plan(tmp_path, ["test/test_nn.py"]),
                         "--out", tmp_path / "p.json")
    assert code == 1
    assert "error[empty-pick]" in err and "no signal links" in err
    assert load_pick(tmp_path / "p.json").empty_reason


def test_bad_budget_and_conflicting_sources(cli, tmp_path):
    plan = _plan(tmp_path, RUN)
    (tmp_path / "d.diff").write_text("")
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", plan, "--budget", "soon")
    assert code == 2 and "not a duration" in err
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--event", tmp_path / "d.diff", "--plan", plan)
    assert code == 2 and "exactly one change" in err
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", plan, "--trial", "astrology")
    assert code == 2 and "unknown signal" in err


def _results(path: Path, sha: str, outcomes: dict[str, str]) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "run": {"run_id": path.stem, "device": "snpu", "upstream_sha": sha},
                                "tests": [{"id": t, "outcome": o, "duration_s": 2.0} for t, o in outcomes.items()]}))
    return path


def test_failed_only_picks_the_tests_that_failed_in_the_history_and_the_plan_runs(cli, tmp_path):
    plan = _plan(tmp_path, ["test/test_nn.py"])
    (plan / "test_nn.yaml").write_text((plan / "test_nn.yaml").read_text()
                                       + "  - id: TestNN::test_skipped_.*\n    mode: skip\n    reason: no kernel\n"
                                         "    source: reviewer\n")
    h1 = _results(tmp_path / "r1.json", "a" * 40, {"test/test_nn.py::TestNN::test_conv": "failed",
                                                   "test/test_nn.py::TestNN::test_linear": "passed",
                                                   "test/test_nn.py::TestNN::test_skipped_x": "failed",
                                                   "test/test_unplanned.py::T::test_u": "error"})
    h2 = _results(tmp_path / "r2.json", "b" * 40, {"test/test_nn.py::TestNN::test_conv": "failed",
                                                   "test/test_nn.py::TestNN::test_pool": "error"})
    (tmp_path / "d.diff").write_text(PATCH.join(["diff --git a/torch/x.py b/torch/x.py\n--- a/torch/x.py\n"
                                                 "+++ b/torch/x.py\n", ""]))
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", plan, "--out", tmp_path / "p.json",
                         "--history", h1, "--history", h2, "--failed-only")
    assert code == 0, err
    pick = load_pick(tmp_path / "p.json")
    # most failures first; a test the plan skips and a file no plan covers are not run
    assert [t.id for t in pick.tests] == ["test/test_nn.py::TestNN::test_conv", "test/test_nn.py::TestNN::test_pool"]
    assert "failed in 2 of the 2" in pick.tests[0].reason
    assert [(f.file, len(f.tests)) for f in pick.files] == [("test/test_nn.py", 2)]


def test_failed_only_without_failures_falls_back_to_the_usual_pick(cli, tmp_path):
    h = _results(tmp_path / "r.json", "a" * 40, {"test/test_nn.py::TestNN::test_conv": "passed"})
    (tmp_path / "d.diff").write_text("diff --git a/docs/x.rst b/docs/x.rst\n--- a/docs/x.rst\n+++ b/docs/x.rst\n"
                                     "@@ -1 +1 @@\n-a\n+b\n")
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", _plan(tmp_path, RUN),
                         "--out", tmp_path / "p.json", "--history", h, "--failed-only")
    assert code == 0, err
    assert "the usual pick follows" in err
    assert load_pick(tmp_path / "p.json").files  # the smoke set of a docs-only change


def test_path_keywords_weigh_what_was_learned(cli, tmp_path):
    (tmp_path / "d.diff").write_text("diff --git a/torch/utils/data/dataloader.py b/torch/utils/data/dataloader.py\n"
                                     "--- a/torch/utils/data/dataloader.py\n+++ b/torch/utils/data/dataloader.py\n"
                                     + PATCH)
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", _plan(tmp_path, RUN),
                         "--out", tmp_path / "p.json")
    assert code == 0, err
    kw = [s for f in load_pick(tmp_path / "p.json").files for s in f.signals if s.signal == "path-keyword"]
    assert kw and all("of the time" in s.why for s in kw)  # the shipped weights, learned from the mutation cases
    (tmp_path / "w.json").write_text('{"version": 1, "weights": {"dataloader": 0.9}}')
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", _plan(tmp_path, RUN),
                         "--keyword-weights", tmp_path / "w.json", "--out", tmp_path / "p.json")
    assert code == 0, err
    kw = {f.file: s for f in load_pick(tmp_path / "p.json").files for s in f.signals if s.signal == "path-keyword"}
    assert kw["test/test_dataloader.py"].score == 0.9 and "right 90%" in kw["test/test_dataloader.py"].why
    (tmp_path / "bad.json").write_text("not json")
    code, out, err = cli("select", "pick", "--diff", tmp_path / "d.diff", "--plan", _plan(tmp_path, RUN),
                         "--keyword-weights", tmp_path / "bad.json")
    assert code == 2 and "keyword weights" in err and "Traceback" not in err
