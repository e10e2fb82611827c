"""Template probes on snpu: what a template family checks, per OpInfo entry and dtype, answered by the device."""

from __future__ import annotations

from runners.snpu.template_probe import family_digest, key, run_probes


def test_probes_answer_what_the_templates_would_see():
    answers = run_probes(
        [
            ("out", "add", "float32"),
            ("out", "ones", "float32"),
            ("python_scalar", "add", "float32"),
            ("python_ref", "_refs.add", "float32"),
            ("unary_noncontiguous", "sin", "float32"),
            ("unary_noncontiguous", "mvlgamma.mvlgamma_p_3", "int64"),
            ("attrs", "sin", "domain,handles_extremals"),
            ("samples", "no_such_op", "float32"),
        ]
    )
    assert answers[key("out", "add", "float32")] is None
    # test_out of ones fails on snpu: ones.out has no kernel (the demo's base commit shows it)
    assert "ones.out" in answers[key("out", "ones", "float32")]
    assert answers[key("python_scalar", "add", "float32")] is None
    assert answers[key("python_ref", "_refs.add", "float32")] is None  # prims::add runs through snpu kernels
    assert answers[key("unary_noncontiguous", "sin", "float32")] is None
    # unary templates call op(t) alone: an entry that needs another argument fails them
    assert answers[key("unary_noncontiguous", "mvlgamma.mvlgamma_p_3", "int64")].startswith("TypeError")
    assert "op.handles_extremals" in answers[key("attrs", "sin", "domain,handles_extremals")]
    assert answers[key("samples", "no_such_op", "float32")].startswith("Unknown")


def test_family_digest_changes_only_with_the_familys_code():
    assert family_digest("out") == family_digest("out")
    assert family_digest("out") != family_digest("samples")


def test_foreach_entries_are_found_in_the_foreach_lists():
    """Foreach templates instantiate over foreach_*_op_db, not op_db: a probe for _foreach_add finds
    its entry there (it said "no OpInfo entry '_foreach_add'"); op_db's entries keep their place."""
    from torch.testing._internal.common_methods_invocations import op_db

    from runners.snpu.template_probe import _entries

    entries = _entries()
    assert type(entries["_foreach_add"]).__name__ == "ForeachFuncInfo"
    assert entries["add"] is next(op for op in op_db if op.name == "add" and not op.variant_test_name)
    answers = run_probes([("attrs", "_foreach_add", "supports_out")])
    assert not (answers[key("attrs", "_foreach_add", "supports_out")] or "").startswith("Unknown")


def test_a_probe_child_that_dies_mid_chunk_leaves_the_answers_it_finished(tmp_path):
    """The child writes each answer as its probe ends: the plan's probe budget stops a child at its deadline, and
    a probe may take the child down; the answers before that are kept (they were lost with the whole chunk)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    src, dst = tmp_path / "in.json", tmp_path / "out.jsonl"
    src.write_text(json.dumps([["attrs", "sin", "domain"], ["samples", "no_such_op", None], ["grad", "add", None],
                               ["attrs", "cos", "domain"]]))
    child = ("import os, sys\n"
             "import runners.snpu.template_probe as tp\n"
             "tp.PROBES['grad'] = lambda *a: os._exit(3)  # a probe that takes the child down\n"
             "sys.exit(tp.main(sys.argv))\n")
    done = subprocess.run([sys.executable, "-c", child, str(src), str(dst)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    assert done.returncode == 3, done.stderr
    records = [json.loads(line) for line in dst.read_text().splitlines()]
    lines = [r for r in records if "key" in r]
    assert [r["key"] for r in lines] == [key("attrs", "sin", "domain"), key("samples", "no_such_op", None)]
    assert lines[0]["answer"] is None and lines[1]["answer"].startswith("Unknown")
    # each probe that ran said so as it started: the last start without an answer is the probe the child died on
    assert [r["start"] for r in records if "start" in r] == [key("attrs", "sin", "domain"), key("grad", "add", None)]
