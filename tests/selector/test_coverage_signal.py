"""The coverage map and the coverage signal, on a fixture tree actually run under coverage.

A tiny package (``fakelib``) stands in for torch's Python sources, and a fixture checkout
holds three test files that call different functions of it. ``build_map`` runs each of
them with pytest under coverage in a subprocess, as ``crcr select coverage-map`` does for
torch; the signal then scores files by what they were measured to execute.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from selector.covmap import CoverageMap, build_map, function_lines, load_map
from selector.diffparse import parse_diff
from selector.filepick import pick_files
from selector.signals.base import Change, Universe
from selector.signals.coverage import CoverageSignal

pytest.importorskip("coverage")

LIB = {
    "__init__.py": "",
    "mathy.py": """
        def add(a, b):
            return a + b


        def mul(a, b):
            total = 0
            for _ in range(b):
                total = add(total, a) if False else total + a
            return total


        def unused():
            return "never called"
        """,
    "text.py": """
        def shout(s):
            return s.upper() + "!"
        """,
}
TESTS = {
    "test/test_add.py": """
        from fakelib.mathy import add

        def test_add():
            assert add(1, 2) == 3
        """,
    "test/test_text.py": """
        from fakelib.text import shout

        def test_shout():
            assert shout("a") == "A!"
        """,
    "test/test_mul_text.py": """
        from fakelib.mathy import mul
        from fakelib.text import shout

        def test_both():
            assert mul(2, 3) == 6
            assert shout("b") == "B!"
        """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(body).lstrip())


@pytest.fixture(scope="module")
def fixture_map(tmp_path_factory: pytest.TempPathFactory) -> tuple[CoverageMap, Path, Path]:
    base = tmp_path_factory.mktemp("cov")
    src, checkout = base / "src", base / "checkout"
    _write(src / "fakelib", LIB)
    _write(checkout, TESTS)
    cmap = build_map([(checkout, sorted(TESTS), "fixture checkout")], src / "fakelib", timeout_s=300,
                     pythonpath=[src], baseline={})
    return cmap, src, checkout


def _universe(cmap: CoverageMap) -> Universe:
    return Universe(durations={f: 10.0 for f in [*TESTS, "test/test_unmapped.py"]}, coverage=cmap)


def test_map_records_the_functions_each_file_executes(fixture_map):
    cmap, _, _ = fixture_map
    assert cmap.tests["test/test_add.py"] == {"fakelib/mathy.py": ["add"]}
    assert cmap.tests["test/test_text.py"] == {"fakelib/text.py": ["shout"]}
    assert cmap.tests["test/test_mul_text.py"] == {"fakelib/mathy.py": ["mul"], "fakelib/text.py": ["shout"]}
    # a def line runs at import; a function counts only once its body ran
    assert all("unused" not in fs for src in cmap.tests.values() for fs in src.values())
    assert "exit 0" in cmap.meta["runs"]["test/test_add.py"]


def test_baseline_functions_are_left_out(fixture_map, tmp_path):
    _, src, checkout = fixture_map
    cmap = build_map([(checkout, ["test/test_mul_text.py"], "fixture")], src / "fakelib", timeout_s=300,
                     pythonpath=[src], baseline={"fakelib/text.py": {"shout"}})
    assert cmap.tests["test/test_mul_text.py"] == {"fakelib/mathy.py": ["mul"]}


def test_map_round_trips_and_rejects_other_files(fixture_map, tmp_path):
    cmap, _, _ = fixture_map
    path = tmp_path / "map.json.gz"
    cmap.save(path)
    again = load_map(path)
    assert again.tests == cmap.tests
    cmap.save(tmp_path / "again.json.gz")  # the same map gives the same bytes
    assert (tmp_path / "again.json.gz").read_bytes() == path.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tests": []}))
    with pytest.raises(ValueError, match="not a coverage map"):
        load_map(bad)


def test_a_timed_out_file_keeps_what_it_measured(tmp_path):
    src, checkout = tmp_path / "src", tmp_path / "checkout"
    _write(src / "fakelib", LIB)
    _write(checkout, {"test/test_hang.py": """
        import time
        from fakelib.mathy import add

        def test_hang():
            assert add(1, 1) == 2
            time.sleep(3600)
        """})
    cmap = build_map([(checkout, ["test/test_hang.py"], "fixture")], src / "fakelib", timeout_s=20,
                     pythonpath=[src], baseline={})
    assert cmap.tests["test/test_hang.py"] == {"fakelib/mathy.py": ["add"]}
    assert "timeout (partial)" in cmap.meta["runs"]["test/test_hang.py"]


def test_signal_prefers_files_running_the_changed_function(fixture_map):
    cmap, _, _ = fixture_map
    diff = parse_diff("diff --git a/fakelib/mathy.py b/fakelib/mathy.py\n--- a/fakelib/mathy.py\n"
                      "+++ b/fakelib/mathy.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n")
    hits = CoverageSignal().score(Change.from_diffs(diff), _universe(cmap))
    assert set(hits) == {"test/test_add.py", "test/test_mul_text.py"}
    assert hits["test/test_add.py"].score > hits["test/test_mul_text.py"].score
    assert "runs add() of fakelib/mathy.py" in hits["test/test_add.py"].why
    # the combined pick puts the file that runs add() first; unmapped and unrelated files get nothing from it
    order = pick_files(Change.from_diffs(diff), _universe(cmap), signals=(CoverageSignal(),), fill=False).ranking
    assert order == ["test/test_add.py", "test/test_mul_text.py"]


def test_signal_on_paths_only_and_hunk_headers(fixture_map):
    cmap, _, _ = fixture_map
    u = _universe(cmap)
    paths_only = CoverageSignal().score(Change(paths=["fakelib/text.py"]), u)
    assert set(paths_only) == {"test/test_text.py", "test/test_mul_text.py"}
    # a hunk header alone (as a real case read from a review thread gives) names the function
    header = parse_diff("diff --git a/fakelib/mathy.py b/fakelib/mathy.py\n--- a/fakelib/mathy.py\n"
                        "+++ b/fakelib/mathy.py\n@@ -6,3 +6,3 @@ def mul(a, b):\n")
    hits = CoverageSignal().score(Change.from_diffs(header), u)
    assert hits["test/test_mul_text.py"].score > hits["test/test_add.py"].score
    assert CoverageSignal().score(Change(paths=["fakelib/other.py", "README.md"]), u) == {}
    assert CoverageSignal().score(Change(paths=["fakelib/text.py"]), Universe(durations=u.durations)) == {}


def test_signal_in_trial_mode_is_reported_not_counted(fixture_map):
    cmap, _, _ = fixture_map
    fp = pick_files(Change(paths=["fakelib/text.py"]), _universe(cmap), signals=(CoverageSignal(),),
                    trial=("coverage",), budget_s=100.0, fill=False)
    assert fp.files == [] and fp.empty_reason


def test_function_lines_excludes_def_lines_and_nests():
    src = "def outer():\n    x = 1\n    def inner():\n        return x\n    return inner\n"
    owner = function_lines(src)
    assert 1 not in owner and owner[2] == "outer" and owner[4] == "inner" and owner[5] == "outer"
    assert function_lines("def broken(:\n") == {}


def test_coverage_map_command_refuses_bad_input(cli, tmp_path):
    checkout = tmp_path / "co"
    _write(checkout, {"test/test_a.py": "def test_a():\n    pass\n", "elsewhere.py": "x = 1\n"})
    out = tmp_path / "map.json.gz"
    code, _, err = cli("select", "coverage-map", "--out", out, "--no-embedded")
    assert code == 2 and "no test file to run" in err
    code, _, err = cli("select", "coverage-map", "--out", out, "--no-embedded", "--test", "test/test_a.py")
    assert code == 2 and "--pytorch-src" in err
    for bad in ("elsewhere.py", "../co/elsewhere.py", "test/missing.py"):
        code, _, err = cli("select", "coverage-map", "--out", out, "--no-embedded", "--pytorch-src", checkout,
                           "--test", bad)
        assert code == 2 and "not a .py file under" in err, bad
    out.write_text("not a map")
    code, _, err = cli("select", "coverage-map", "--out", out, "--no-embedded", "--pytorch-src", checkout,
                       "--test", "test/test_a.py")
    assert code == 2 and "--out" in err and "not a coverage map" in err
    assert out.read_text() == "not a map"  # left as it was


def test_pick_and_evaluate_read_the_given_or_the_shipped_map(fixture_map, tmp_path):
    from crcr.cli.select import _coverage_map
    from crcr.errors import InputError
    from selector.covmap import SHIPPED, shipped_map

    cmap, _, _ = fixture_map
    good = tmp_path / "map.json.gz"
    cmap.save(good)
    assert _coverage_map(good).tests == cmap.tests
    bad = tmp_path / "bad.json.gz"
    bad.write_text("{}")
    with pytest.raises(InputError, match="not a coverage map"):
        _coverage_map(bad)
    with pytest.raises(InputError):
        _coverage_map(tmp_path / "absent.json.gz")
    shipped = _coverage_map(None)
    assert (shipped is None) == (not SHIPPED.is_file())
    if shipped is not None:
        assert shipped.tests == shipped_map().tests and shipped.meta["torch"]


def test_committed_real_cases_load_and_cite_their_sources():
    from crcr.data import TEST_TIMES
    from selector.evaluate import load_cases
    from selector.inventory.test_times import file_times

    root = Path(__file__).resolve().parents[2]
    cases = load_cases(root / "benchmarks" / "cases" / "real.jsonl")
    times = file_times(TEST_TIMES, all_configs=True)
    assert len(cases) >= 5 and {c.kind for c in cases} == {"real"}
    for c in cases:
        assert "https://github.com/pytorch/pytorch/" in c.source, c.id
        assert c.change.paths, c.id
        assert all(f in times for f in c.failing_files), c.id  # evaluable over test-times.json's universe
    raw = [json.loads(line) for line in (root / "benchmarks" / "cases" / "real.jsonl").read_text().splitlines()]
    assert all(r["evidence"] for r in raw)
