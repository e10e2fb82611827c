"""``crcr select evaluate``: measures per signal and combined, with both baselines in the same run."""

from __future__ import annotations

import json

import pytest

from selector.errors import SelectorInputError
from selector.evaluate import apfd, cross_fitted_weights, evaluate, load_cases, render_table, subfolder_of
from selector.keyword_weights import learn, load, save
from selector.signals.base import Change
from selector.signals.keywords import PathKeywords
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
    assert {"combined", "baseline:random", "baseline:path-keyword", "baseline:cheapest-first", "import-graph",
            "path-keyword"} <= set(rows)
    # cheapest first: both failing files (200 s, 360 s) lie in the cheapest quarter of the 6,920 s
    assert rows["baseline:cheapest-first"]["0.25"]["file_recall"] == 1.0
    assert rows["baseline:cheapest-first"]["0.25"]["selection_rate"] <= 0.25
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


def test_figures_per_subfolder_and_split_with_both_baselines(tmp_path):
    cases = _cases(tmp_path, [
        {"id": "a", "kind": "mutation", "paths": ["torch/utils/data/dataloader.py"], "split": "tune",
         "failing_files": ["test/test_dataloader.py"]},
        {"id": "b", "kind": "mutation", "paths": ["torch/distributed/distributed_c10d.py"], "split": "held-out",
         "failing_files": ["test/distributed/test_c10d_common.py"]},
        {"id": "c", "kind": "mutation", "subfolder": "nn", "paths": ["torch/nn/functional.py"], "split": "held-out",
         "failing_files": ["test/test_nn.py"]},
    ])
    assert [c.subfolder for c in cases] == ["utils/data", "distributed", "nn"]
    report = evaluate(cases, _universe())
    block = report["kinds"]["mutation"]
    assert set(block["subfolders"]) == {"utils/data", "distributed", "nn"}
    assert set(block["splits"]) == {"tune", "held-out"}
    assert block["splits"]["held-out"]["cases"] == 2
    nn = block["subfolders"]["nn"]["rankings"]
    assert set(nn) == {"combined", "baseline:random", "baseline:path-keyword", "baseline:cheapest-first"}
    assert nn["combined"]["0.25"]["file_recall"] == 1.0
    table = render_table(report)
    assert "by torch subfolder" in table and "utils/data" in table and "by split" in table
    json.dumps(report)  # the JSON output holds the same


def test_subfolder_of_a_change():
    assert subfolder_of(["torch/nn/modules/module.py"]) == "nn/modules"
    assert subfolder_of(["torch/_tensor.py"]) == "(top)"
    assert subfolder_of(["torch/distributed/optim/functional_sgd.py", "test/test_x.py"]) == "distributed/optim"
    assert subfolder_of(["aten/src/ATen/native/SoftMax.cpp"]) == "aten"


def test_keyword_weights_are_learned_from_how_often_they_were_right(tmp_path):
    files = ["test/test_dataloader.py", "test/distributions/test_constraints.py",
             "test/distributions/test_distributions.py", "test/distributions/test_transforms.py"]
    cases = [(["torch/utils/data/dataloader.py"], ["test/test_dataloader.py"], None),
             (["torch/distributions/constraints.py"], ["test/distributions/test_constraints.py"], None),
             (["torch/distributions/transforms.py"], ["test/distributions/test_transforms.py"], None)]
    w = learn(cases, files)
    # 'constraints' pointed at the failing file every time; 'distributions' matched 3 files a case, right 2 in 6
    assert w["constraints"] > w["distributions"]
    assert w["dataloader"] > 0.5 > w["distributions"]
    assert 0 < w["*"] < 1
    # a case that ran only some files teaches nothing about keywords of the files it did not run
    only = learn([(["torch/distributions/constraints.py"], ["test/distributions/test_constraints.py"],
                   ["test/distributions/test_constraints.py"])], files)
    assert only["constraints"] > 0.5 and only["distributions"] > 0.5
    save(tmp_path / "kw.json", w, "3 hand-made cases")
    assert load(tmp_path / "kw.json") == w
    (tmp_path / "bad.json").write_text('{"version": 1, "weights": {"nn": 7}}')
    with pytest.raises(SelectorInputError, match="must lie in"):
        load(tmp_path / "bad.json")


def test_learned_weights_order_the_path_keyword_signal():
    u = _universe()
    change = Change(paths=["torch/utils/data/dataloader.py", "torch/distributed/distributed_c10d.py"])
    u.keyword_weights = {"dataloader": 0.9, "distributed": 0.05, "*": 0.2}
    hits = PathKeywords().score(change, u)
    assert hits["test/test_dataloader.py"].score > hits["test/distributed/test_c10d_common.py"].score
    assert "90%" in hits["test/test_dataloader.py"].why


def test_cross_fitted_weights_never_see_the_case_they_rank(tmp_path):
    cases = _cases(tmp_path, [
        {"id": "a", "paths": ["torch/utils/data/dataloader.py"], "split": "tune", "failing_files": ["test/test_dataloader.py"]},
        {"id": "b", "paths": ["torch/utils/dataloader.py"], "split": "held-out", "failing_files": ["test/test_nn.py"]},
    ])
    w = cross_fitted_weights(cases, _universe())
    # a is ranked with what b taught ('dataloader' matched test_dataloader.py, which did not fail in b) and vice versa
    assert w["a"]["dataloader"] < 0.5 < w["b"]["dataloader"]
