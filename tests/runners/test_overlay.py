"""``crcr run --overlay``: a checkout's changed torch functions replace the installed ones (in the run's process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch.nn.functional as functional

from tests.conftest import ROOT

INSTALLED = Path(functional.__file__).read_text(encoding="utf-8")
CHECK = """
import json, sys
from pathlib import Path
from runners import overlay
import torch, torch.nn.functional as F
before_relu = F.relu
report = overlay.apply(Path(sys.argv[1]))
x = torch.tensor([-2.0, 0.5])
print(json.dumps({"replaced": report.replaced, "skipped": report.skipped,
                  "softsign": F.softsign(x).tolist(), "relu_same": F.relu is before_relu}))
"""


def _apply(root: Path) -> dict:
    # a fresh interpreter: overlaying torch inside the test process would leak into other tests
    proc = subprocess.run([sys.executable, "-c", CHECK, str(root)], capture_output=True, text=True, cwd=ROOT,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_only_the_functions_a_commit_changes_are_replaced(tmp_path: Path) -> None:
    (tmp_path / "torch/nn").mkdir(parents=True)
    changed = INSTALLED.replace("    return input / (input.abs() + 1)\n", "    return input * 0 + 7\n")
    assert changed != INSTALLED
    (tmp_path / "torch/nn/functional.py").write_text(changed)
    (tmp_path / "torch/not_a_module_here.py").write_text("x = 1\n")
    out = _apply(tmp_path)
    assert out["replaced"] == ["torch.nn.functional.softsign"]
    assert out["softsign"] == [7.0, 7.0]  # the commit's code ran
    assert out["relu_same"] is True
    assert any("not_a_module_here" in s for s in out["skipped"])


def test_an_unchanged_checkout_replaces_nothing(tmp_path: Path) -> None:
    (tmp_path / "torch/nn").mkdir(parents=True)
    (tmp_path / "torch/nn/functional.py").write_text(INSTALLED)
    out = _apply(tmp_path)
    assert out["replaced"] == [] and out["softsign"] == pytest.approx([-2 / 3, 0.5 / 1.5])


def test_run_refuses_an_overlay_without_torch(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "crcr.cli.main", "run", "--device", "cpu", "--overlay", str(tmp_path),
                           "--id", "x"], capture_output=True, text=True, cwd=ROOT, check=False, timeout=120)
    assert proc.returncode == 2 and "no torch/ folder" in proc.stderr
