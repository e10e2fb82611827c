"""``crcr select evaluate``: measures per signal and combined, with both baselines in the same run."""

from __future__ import annotations

import json

import pytest

from selector.errors import SelectorInputError
from selector.evaluate import apfd, evaluate, load_cases, render_table
from tests.selector.test_filepick import _universe


def _cases(tmp_path, rows):
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_cases(path)


def test_signals_beat_random_on_cases_they_see(tmp_path):
    cases = _cases(tmp_path, [
        {"id": "a", "kind": "mutation", "paths": ["torch/utils/data/dataloader.py"],
         "failing_files": ["test/test_dataloader.py"], "source": "hand-made"},
        {"id": "b", "kind": "mutation", "paths": ["torch/distributed/distributed_c10d.py"],
         "failing_files": ["test/distributed/test_c10d_common.py"], "source": "hand-made"},
    ])
    report = evaluate(cases, _universe())
    rows = report["kinds"]["mutation"]["rankings"]
    assert {"combined", "baseline:random", "baseline:path-keyword", "import-graph", "path-keyword"} <= set(rows)
    assert rows["combined"]["0.25"]["file_recall"] == 1.0
    assert rows["combined"]["0.25"]["selection_rate"] <= 0.25
    assert rows["baseline:random"]["0.25"]["file_recall"] < 1.0
    assert "baseline:random" in render_table(report)


def test_apfd_rewards_finding_failures_early():
    d = {"a": 10.0, "b": 10.0, "c": 10.0}
    assert apfd(["a", "b", "c"], ["a"], d) > apfd(["c", "b", "a"], ["a"], d)
    assert apfd(["a", "b"], ["z"], d) == 0.0


def test_bad_cases_are_input_errors(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(SelectorInputError, match="not a case"):
        load_cases(tmp_path / "bad.jsonl")
