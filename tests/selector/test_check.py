"""crcr select check over a corpus of broken plan files: precise file:line messages, no traceback, no code run."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.check import check_paths

from .conftest import FIX

BROKEN = FIX / "broken"


@pytest.mark.parametrize(
    ("name", "line", "says"),
    [
        ("bad_yaml.yaml", 8, "not valid YAML"),
        ("bad_mode.yaml", 6, "unknown mode 'maybe'; use one of run, skip, xfail, xfail_strict"),
        ("empty_reason.yaml", 7, "has an empty reason; say why"),
        ("duplicate_id.yaml", 13, "duplicate id 'TestCommonPRIVATEUSE1::test_a' (first at line 5)"),
        ("python_tag.yaml", 7, "YAML tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed"),
        ("python_name_tag.yaml", 2, "is not allowed (it would construct an object)"),
        ("not_a_mapping.yaml", 1, "the top level must be a mapping"),
        ("unknown_keys.yaml", 1, "schema_version must be 1"),
        ("unknown_keys.yaml", 4, "unknown key 'owner'"),
        ("unknown_keys.yaml", 9, "unknown entry key 'sauce'"),
        ("unknown_keys.yaml", 10, "not a valid pattern"),
        ("shadowed.yaml", 5, "(logs) is shadowed by the reviewer entry at line 9"),
    ],
)
def test_broken_file_gets_a_precise_message(name, line, says):
    findings = check_paths([BROKEN / name])
    rendered = [str(f) for f in findings]
    assert any(r.startswith(f"{BROKEN / name}:{line}: ") and says in r for r in rendered), rendered


def test_pattern_matching_nothing_in_the_inventory(inventory):
    findings = check_paths([BROKEN / "pattern_matches_nothing.yaml"], inventory)
    msgs = [str(f) for f in findings]
    assert msgs == [f"{BROKEN / 'pattern_matches_nothing.yaml'}:9: pattern 'TestNoSuchClass::.*_float64' matches no test "
                    "in the inventory; fix the pattern (it is re.fullmatch over Class::method) or delete the entry"]


def test_tags_never_execute(tmp_path):
    marker = Path("/tmp/crcr-pwned")
    marker.unlink(missing_ok=True)
    check_paths([BROKEN / "python_tag.yaml", BROKEN / "python_name_tag.yaml"])
    assert not marker.exists()


def test_fifty_megabyte_file_is_refused_without_parsing(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("w") as fh:
        fh.write("schema_version: 1\nbackend: snpu\nupstream: {file: test/test_ops.py}\ntests:\n")
        entry = "  - id: TestCommonPRIVATEUSE1::test_x_{n}\n    mode: run\n    reason: padding entry\n"
        n = 0
        while fh.tell() < 50 * 1024 * 1024:
            fh.write(entry.format(n=n) * 1000)
            n += 1
    findings = check_paths([big])
    assert [str(f) for f in findings] == [
        f"{big}:1: file is 50 MiB, over the 8 MiB limit; split it, or replace runs of single entries by pattern entries"]


def test_cli_check_exits_nonzero_with_messages_and_no_traceback(cli):
    code, out, err = cli("select", "check", BROKEN)
    assert code == 1
    assert "Traceback" not in out + err
    lines = out.splitlines()
    assert len(lines) >= 10 and all(": " in line for line in lines)
    assert "problem(s) found" in err


def test_generated_plan_passes_check(cli, tmp_path, inventory, caps, disabled, tools):
    from selector.agent.offline import OfflineAgent
    from selector.plan import run_plan

    out = tmp_path / "snpu"
    run_plan(inventory, backend="snpu", out_dir=out, caps=caps, disabled=disabled, agent=OfflineAgent(), tools=tools,
             data_dir=None)
    assert check_paths([out], inventory) == []
    inventory.write(tmp_path / "inv.json")
    code, out_text, err = cli("select", "check", out, "--inventory", tmp_path / "inv.json")
    assert code == 0, out_text + err


def test_bot_entries_under_a_person_are_not_reported_but_dead_reviewer_entries_are(tmp_path, inventory):
    findings = [str(f) for f in check_paths([BROKEN / "shadowed.yaml"])]
    assert len(findings) == 1 and ":5: " in findings[0]
    plan = tmp_path / "p.yaml"
    plan.write_text("""schema_version: 1
backend: snpu
upstream: {file: test/test_fixture_ops.py}
tests:
  - id: TestFixtureOpsPRIVATEUSE1::test_compare_cpu_add_snpu_float32
    mode: skip
    reason: a person wants it off
    source: reviewer
  - id: TestFixtureOpsPRIVATEUSE1::test_compare_cpu_add_snpu_float(32)
    mode: run
    reason: a later pattern that loses to the exact entry for its only test
    source: reviewer
""")
    msgs = [str(f) for f in check_paths([plan], inventory)]
    assert msgs == [f"{plan}:9: reviewer entry 'TestFixtureOpsPRIVATEUSE1::test_compare_cpu_add_snpu_float(32)' decides no "
                    "test: other reviewer entries override every test it matches; delete it or narrow the entries that "
                    "override it"]
