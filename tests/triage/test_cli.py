"""`crcr triage analyze` / `report`: offline sources, outputs, exit codes, input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crcr.cli.main import main
from crcr.settings import get_settings

HISTORIES = Path(__file__).parent / "histories"


@pytest.fixture(autouse=True)
def clean_env(tmp_path, monkeypatch):
    for name in ("CRCR_DATABASE_URL", "CRCR_TRIAGE_POSTING", "ANTHROPIC_API_KEY", "CRCR_ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CRCR_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def run(argv, capsys):
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def test_analyze_history_prints_the_call_and_writes_json(tmp_path, capsys):
    out_json = tmp_path / "a.json"
    code, out, _ = run(["triage", "analyze", "--backend", "acme/torch-npu", "--history",
                        str(HISTORIES / "ghstack_stack_gap.yaml"), "--json", str(out_json)], capsys)
    assert code == 0
    assert out.splitlines()[0] == "acme/torch-npu: new break -> bisect (upstream, confidence low)"
    assert "rerun: 9a0000000005" in out
    data = json.loads(out_json.read_text())
    assert data["action"] == "bisect" and data["gap"] == ["9a0000000004", "9a0000000005"]
    assert data["reruns"][0]["sha"] == "9a0000000005"


def test_report_writes_markdown_and_verdict_and_dry_runs(tmp_path, capsys):
    code, out, _ = run(["triage", "report", "--backend", "acme/torch-npu", "--history",
                        str(HISTORIES / "revert_of_revert.yaml"), "--out", str(tmp_path / "r"),
                        "--comment-upstream"], capsys)
    assert code == 0
    assert "dry-run: would open an issue in acme/torch-npu" in out
    assert "dry-run: would comment on pytorch/pytorch#302" in out
    verdict = json.loads((tmp_path / "r" / "triage-verdict.json").read_text())
    assert verdict["suspected_upstream"]["pr"] == 302
    assert (tmp_path / "r" / "triage-report.md").read_text().startswith("# crcr triage: acme/torch-npu")


def test_results_files_offline_with_commit_order(tmp_path, capsys):
    from crcr.contracts.results import RunResults

    shas = [f"{i:x}" * 12 for i in range(1, 7)]
    (tmp_path / "commits.txt").write_text("\n".join(shas) + "\n")
    files = []
    for i, sha in enumerate(shas):
        for attempt in (1, 2) if i == 3 else (1,):
            outcome = "failed" if i >= 3 else "passed"
            doc = RunResults.model_validate({"run": {"run_id": f"r{i}-{attempt}", "device": "npu", "upstream_sha": sha},
                                             "tests": [{"id": "t.py::test_a", "outcome": outcome},
                                                       {"id": "t.py::test_b", "outcome": "passed"}]})
            path = tmp_path / f"r{i}-{attempt}.json"
            doc.write(path)
            files += ["--results", str(path)]
    code, out, _ = run(["triage", "analyze", "--backend", "acme/torch-npu", *files,
                        "--commits", str(tmp_path / "commits.txt"), "--json", "-"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "new_break" and data["suspect"]["sha"] == shas[3] and data["action"] == "forward_fix"
    assert data["reproduced"] is True  # the commit failed in two runs


@pytest.mark.parametrize(("argv", "message"), [
    (["--history", "/nonexistent.yaml"], "does not exist"),
    (["--history", "HIST", "--results", "HIST"], "two sources"),
    (["--commits", "HIST"], "--commits orders --results files"),
    (["--since", "yesterday"], "neither an ISO-8601 time"),
])
def test_bad_input_is_exit_2_with_a_hint(argv, message, capsys):
    argv = [str(HISTORIES / "race_two_prs.yaml") if a == "HIST" else a for a in argv]
    code, _, err = run(["triage", "analyze", "--backend", "acme/torch-npu", *argv], capsys)
    assert code == 2
    assert message in err and err.startswith("error[")


def test_malformed_history_is_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("commits: 3\nruns: []\n")
    code, _, err = run(["triage", "analyze", "--backend", "x/y", "--history", str(bad)], capsys)
    assert code == 2 and "needs `commits` and `runs` lists" in err


def test_empty_database_is_nothing_to_analyse_not_green(capsys):
    code, _, err = run(["triage", "analyze", "--backend", "acme/torch-npu"], capsys)
    assert code == 1 and "error[triage-no-data]" in err


def test_claude_advisor_without_a_key_is_a_config_error(tmp_path, capsys):
    code, _, err = run(["triage", "report", "--backend", "acme/torch-npu", "--history",
                        str(HISTORIES / "race_two_prs.yaml"), "--out", str(tmp_path), "--advisor", "claude"], capsys)
    assert code == 2 and "needs an Anthropic API key" in err


def test_infra_patterns_file_replaces_the_defaults(tmp_path, capsys):
    history = HISTORIES / "runner_pool_outage.yaml"
    patterns = tmp_path / "infra.yaml"
    patterns.write_text("lost_runner: ['lost communication with the server']\n")
    code, out, _ = run(["triage", "analyze", "--backend", "acme/torch-npu", "--history", str(history),
                        "--infra-patterns", str(patterns), "--json", "-"], capsys)
    assert code == 0
    data = json.loads(out)
    # jobs that ran no test are infra whatever the patterns; the kind names come from the file
    assert data["kind"] == "infra" and "lost_runner" in data["summary"] and "no test results" in data["summary"]
    patterns.write_text("oom: ['([unclosed']\n")
    code, _, err = run(["triage", "analyze", "--backend", "acme/torch-npu", "--history", str(history),
                        "--infra-patterns", str(patterns)], capsys)
    assert code == 2 and "is not a regular expression" in err
