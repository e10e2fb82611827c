"""The mutation-case generator's parts that need no torch run: points, seeded choice, split, JUnit ids."""

from __future__ import annotations

from benchmarks.mutation_cases import choose, junit_outcomes, mutation_points, split_of, subfolder

SOURCE = '''\
LIMIT = 3 > 2


def clamp(x, lo, hi):
    if x < lo:
        return lo
    return min(x, hi)


class Box:
    size = 1 + 1

    def grow(self, n):
        self.size = self.size + n
        return not self.size
'''


def _apply(src: str, m) -> str:
    lines = src.splitlines()
    line = lines[m.line - 1]
    return line[:m.col] + m.new + line[m.end_col:]


def test_points_are_inside_executed_function_bodies_only():
    covered = {5, 6, 7, 14, 15}
    pts = mutation_points("utils/box.py", SOURCE, covered, at_import=set())
    assert {m.line for m in pts} == {5, 6, 7, 14, 15}  # module level (1) and the class body (11) are never mutated
    assert "    if x >= lo:" in {_apply(SOURCE, m) for m in pts}
    assert "        return self.size" in {_apply(SOURCE, m) for m in pts}
    assert "        self.size = self.size - n" in {_apply(SOURCE, m) for m in pts}
    # a line `import torch` itself executes breaks every test file: left out
    assert all(m.line != 5 for m in mutation_points("utils/box.py", SOURCE, covered, at_import={5}))
    assert mutation_points("utils/box.py", SOURCE, set(), set()) == []


def test_choice_is_seeded_and_capped_per_module_and_subfolder():
    pts = (mutation_points("nn/a.py", SOURCE, set(range(20)), set())
           + mutation_points("nn/b.py", SOURCE, set(range(20)), set())
           + mutation_points("fx/c.py", SOURCE, set(range(20)), set()))
    first = choose(pts, 11, per_module=2, per_subfolder=3)
    assert first == choose(pts, 11, per_module=2, per_subfolder=3)
    assert sum(subfolder(m.path) == "nn" for m in first) == 3
    assert sum(m.path == "fx/c.py" for m in first) == 2
    assert len({(m.path, m.line) for m in first}) == len(first)  # one mutant a line


def test_split_is_fixed_by_id_and_seed():
    ids = [f"mut-x-L{i}-cmp" for i in range(200)]
    halves = [split_of(i, 11) for i in ids]
    assert halves == [split_of(i, 11) for i in ids]
    assert 60 < halves.count("held-out") < 140


def test_junit_ids_match_pytest_ids(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="test.nn.test_init.TestNNInit" name="test_eye" file="test/nn/test_init.py"/>'
        '<testcase classname="test.distributions.test_constraints" name="test_biject_to[False-a]" '
        'file="test/distributions/test_constraints.py"><failure message="x"/></testcase>'
        '<testcase classname="test.nn.test_init.TestNNInit" name="test_uniform" file="test/nn/test_init.py">'
        '<skipped/></testcase></testsuite></testsuites>')
    assert junit_outcomes(junit) == {
        "test/nn/test_init.py::TestNNInit::test_eye": "passed",
        "test/distributions/test_constraints.py::test_biject_to[False-a]": "failed",
        "test/nn/test_init.py::TestNNInit::test_uniform": "skipped",
    }
    assert junit_outcomes(tmp_path / "missing.xml") == {}
