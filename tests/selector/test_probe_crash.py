"""A template probe that takes its child process down costs its own answer only: the rest of the chunk runs again
in a fresh child, and a probe that crashes a second child is answered as having crashed the probe."""

from __future__ import annotations

import os
from pathlib import Path

import crcr.cli.select as select

ROOT = Path(__file__).resolve().parents[2]


def _child(marks: Path) -> tuple[str, str]:
    """The real probe child, its grad probe killing the process (os._exit) on ``sub`` every time and on ``mul`` the
    first time only."""
    code = (
        "import os, sys\n"
        "import runners.snpu.template_probe as tp\n"
        "real = tp.PROBES['grad']\n"
        "def grad(op, device, dtype):\n"
        "    if op.name == 'sub':\n"
        "        os._exit(3)\n"
        f"    mark = os.path.join({str(marks)!r}, op.name)\n"
        "    if op.name == 'mul' and not os.path.exists(mark):\n"
        "        open(mark, 'w').close()\n"
        "        os._exit(4)\n"
        "    return real(op, device, dtype)\n"
        "tp.PROBES['grad'] = grad\n"
        "sys.exit(tp.main(sys.argv))\n"
    )
    return ("-c", code)


def test_a_crashing_probe_loses_only_its_own_answer(tmp_path, monkeypatch):
    monkeypatch.setattr(select, "PROBE_CHILD", _child(tmp_path))
    chunk = [
        ("attrs", "sin", "domain"),
        ("grad", "sub", None),
        ("attrs", "cos", "domain"),
        ("grad", "mul", None),
        ("attrs", "tan", "nonexistent_attr"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = select._probe_chunk(chunk, env, tmp_path / "in.json", tmp_path / "out.jsonl", None)
    assert set(got) == {
        "attrs|sin|domain",
        "grad|sub|-",
        "attrs|cos|domain",
        "grad|mul|-",
        "attrs|tan|nonexistent_attr",
    }
    # the probes after the crash were answered by fresh children, as they would have been without it
    assert got["attrs|sin|domain"] is None and got["attrs|cos|domain"] is None
    assert got["attrs|tan|nonexistent_attr"].startswith(
        "ProbeMismatch: the template reads op.nonexistent_attr"
    )
    # mul's probe crashed once, then ran in a fresh child and passed
    assert got["grad|mul|-"] is None and (tmp_path / "mul").is_file()
    # sub's crashed both children it ran in: answered as such, in plain words
    assert got["grad|sub|-"] == "ProbeCrash: the probe took its child process down twice (exit status 3)"


def test_a_child_that_cannot_run_at_all_blames_no_probe_and_stops_after_two_tries(tmp_path, monkeypatch):
    """Children that die before starting a probe: no probe is answered as crashed (the child is at fault, not a
    probe), and the chunk ends unanswered after the second (not one child per probe)."""
    marks = tmp_path / "children"
    marks.mkdir()
    code = f"import os, sys, uuid; open(os.path.join({str(marks)!r}, uuid.uuid4().hex), 'w').close(); sys.exit(5)"
    monkeypatch.setattr(select, "PROBE_CHILD", ("-c", code))
    chunk = [("attrs", "sin", "domain"), ("attrs", "cos", "domain"), ("attrs", "tan", "domain")]
    got = select._probe_chunk(chunk, dict(os.environ), tmp_path / "in.json", tmp_path / "out.jsonl", None)
    assert got == {} and len(list(marks.iterdir())) == 2
