"""The real upgrade: installed torch (2.13.0) against the 2.14.1 wheel, read statically.

    python benchmarks/selector_upgrade.py [--wheel PATH] [--tests INVENTORY] [--capabilities FILE]

Counts OpInfo entries added / removed / changed / unchanged; with --tests (a test-level
inventory, e.g. the embedded suite) maps them onto tests and re-plans with the plan cache,
reporting how many tests were re-evaluated against a full re-plan of the same inventory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crcr.contracts.inventory import load_inventory  # noqa: E402
from crcr.data import DISABLED_TESTS  # noqa: E402
from selector.agent.offline import OfflineAgent  # noqa: E402
from selector.agent.tools import Tools  # noqa: E402
from selector.capabilities import load_capabilities  # noqa: E402
from selector.disabled import DisabledTests  # noqa: E402
from selector.inventory.opinfo import opinfo_inventory  # noqa: E402
from selector.inventory.sources import TorchSources, installed_torch_dir  # noqa: E402
from selector.plan import run_plan  # noqa: E402
from selector.upgrade import compare, project_opinfo, with_new_opinfo  # noqa: E402

WHEEL = Path("/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--wheel", type=Path, default=WHEEL)
    ap.add_argument("--tests", type=Path)
    ap.add_argument("--capabilities", type=Path, default=ROOT / "configs/backends/snpu.yaml")
    args = ap.parse_args()
    t0 = time.perf_counter()
    old = opinfo_inventory(TorchSources(installed_torch_dir()))
    new = opinfo_inventory(TorchSources(args.wheel))
    diff = compare(old, new)
    print(f"OpInfo entries {old.torch_version} -> {new.torch_version}: {diff.counts()} "
          f"({time.perf_counter() - t0:.1f}s, both read statically)")
    print(f"  added: {diff.added}")
    print(f"  removed: {diff.removed}")
    if args.tests is None:
        return
    tests = load_inventory(args.tests)
    projected = project_opinfo(diff, tests)
    print(f"tests of {args.tests.name} ({len(tests.tests)}): {projected.counts()}")
    caps = load_capabilities(args.capabilities)
    dis = DisabledTests(DISABLED_TESTS, device=caps.device)
    agent = OfflineAgent()
    with tempfile.TemporaryDirectory() as tmp:
        out, data = Path(tmp) / "plan", Path(tmp) / "data"
        t0 = time.perf_counter()
        first = run_plan(tests, backend=caps.backend, out_dir=out, caps=caps, disabled=dis, agent=agent,
                         tools=Tools(caps, tests.by_id()), data_dir=data)
        t_full = time.perf_counter() - t0
        upgraded = with_new_opinfo(tests, old, new)
        t0 = time.perf_counter()
        second = run_plan(upgraded, backend=caps.backend, out_dir=out, caps=caps, disabled=dis, agent=agent,
                          tools=Tools(caps, upgraded.by_id()), data_dir=data)
        t_up = time.perf_counter() - t0
    print("| step | tests classified | reused | seconds |")
    print("|---|---|---|---|")
    print(f"| plan on {old.torch_version} | {first.classified} | {first.reused} | {t_full:.2f} |")
    print(f"| upgrade to {new.torch_version} | {second.classified} | {second.reused} | {t_up:.2f} |")


if __name__ == "__main__":
    main()
