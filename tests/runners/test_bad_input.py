"""Bad input: a clear error, exit status 2, and nothing half-written."""

from __future__ import annotations

import json

import pytest

from tests.runners.helpers import crcr


def _outputs(tmp_path):
    return ["--results", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml")]


def _assert_nothing_written(tmp_path):
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".json", ".xml", ".tmp")) == [
        p.name for p in tmp_path.iterdir() if p.name in ("pick.json",)
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--shard", "3/2"], "shard '3/2'"),
        (["--plan", "/nonexistent/plan/dir"], "plan directory /nonexistent/plan/dir does not exist"),
        (["--pytorch-src", "/nonexistent/checkout"], "no test/ folder there"),
        (["--file", "../../etc/passwd"], "is not a file or folder under"),
        (["--collect-only"], "--collect-only needs --inventory"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(tmp_path, capsys, args, expected):
    assert crcr("run", *args, *_outputs(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "error[bad-input]" in err and expected in err
    assert "Traceback" not in err
    _assert_nothing_written(tmp_path)


def test_malformed_pick_file_is_exit_2(tmp_path, capsys):
    pick = tmp_path / "pick.json"
    pick.write_text('{"schema_version": 1, "backend": "snpu", "tests": [{"id": "x"}', encoding="utf-8")
    assert crcr("run", "--pick", str(pick), *_outputs(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "pick.json: not valid JSON" in err
    pick.write_text(json.dumps({"schema_version": 1, "backend": "snpu", "tests": [{"id": "x", "reason": ""}]}))
    assert crcr("run", "--pick", str(pick), *_outputs(tmp_path)) == 2
    assert "tests.0.reason" in capsys.readouterr().err
    _assert_nothing_written(tmp_path)


def test_plan_with_an_entry_without_reason_is_exit_2(tmp_path, capsys):
    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "test_ops.yaml").write_text(
        "schema_version: 1\nbackend: snpu\nupstream: {file: test/test_ops.py}\n"
        "tests:\n  - {id: 'TestCommonPRIVATEUSE1::test_x', mode: skip, reason: ''}\n",
        encoding="utf-8",
    )
    assert crcr("run", "--plan", str(plan), *_outputs(tmp_path)) == 2
    assert "reason" in capsys.readouterr().err
    _assert_nothing_written(tmp_path)


def test_cuda_without_a_gpu_exits_3_instead_of_a_green_run(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():  # a GPU machine runs cuda for real; the no-GPU path is not reachable
        assert crcr("run", "--device", "cuda", "--matrix", "1") == 0
        return
    assert crcr("run", "--device", "cuda", *_outputs(tmp_path)) == 3
    err = capsys.readouterr().err
    assert "error[device-unavailable]" in err and "nothing was run" in err
    _assert_nothing_written(tmp_path)


def test_matrix_prints_github_actions_json(capsys):
    assert crcr("run", "--matrix", "4") == 0
    matrix = json.loads(capsys.readouterr().out)
    assert [m["shard"] for m in matrix["include"]] == ["1/4", "2/4", "3/4", "4/4"]


def test_bad_keyword_expression_is_exit_2(tmp_path, capsys):
    assert crcr("run", "-k", "float32 and (", *_outputs(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "error[bad-input]: -k 'float32 and (' is not a valid pytest expression" in err
    _assert_nothing_written(tmp_path)
