"""Plan accuracy against real execution: rules only, then after one refine pass.

    python benchmarks/selector_accuracy.py --inventory INV --capabilities FILE --results R1.json [R2.json ...]
        [--holdout H.json ...]

The results must come from runs *without* the plan applied (every test executed), e.g.
`crcr run --device snpu --file test/test_ops.py -k ... --results R.json --no-rerun`. A mode
is confirmed when run passed, or skip/xfail failed. Refine learns from --results; the
after-refine figure is reported on the same results and, with --holdout, on runs refine
did not see.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crcr.contracts.inventory import load_inventory  # noqa: E402
from crcr.contracts.plan import load_plan  # noqa: E402
from crcr.contracts.results import load_results  # noqa: E402
from crcr.data import DISABLED_TESTS  # noqa: E402
from selector.agent.offline import OfflineAgent  # noqa: E402
from selector.agent.tools import Tools  # noqa: E402
from selector.capabilities import load_capabilities  # noqa: E402
from selector.disabled import DisabledTests  # noqa: E402
from selector.plan import run_plan  # noqa: E402
from selector.refine import accuracy, refine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--inventory", type=Path, required=True)
    ap.add_argument("--capabilities", type=Path, default=ROOT / "configs/backends/snpu.yaml")
    ap.add_argument("--results", type=Path, nargs="+", required=True)
    ap.add_argument("--holdout", type=Path, nargs="*", default=[])
    args = ap.parse_args()
    inv = load_inventory(args.inventory)
    caps = load_capabilities(args.capabilities)
    dis = DisabledTests(DISABLED_TESTS, device=caps.device)
    runs = [load_results(p) for p in args.results]
    holdout = [load_results(p) for p in args.holdout]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan"
        run_plan(inv, backend=caps.backend, out_dir=out, caps=caps, disabled=dis, agent=OfflineAgent(),
                 tools=Tools(caps, inv.by_id()), data_dir=None)
        before = accuracy(load_plan(out), runs)
        before_h = accuracy(load_plan(out), holdout) if holdout else None
        report = refine(out, load_plan(out), runs)
        after = accuracy(load_plan(out), runs)
        after_h = accuracy(load_plan(out), holdout) if holdout else None
    print(f"results: {sum(len(r.tests) for r in runs)} test outcomes; refine changed {len(report.changed)} modes, "
          f"{len(report.proposals)} proposals, {len(report.flaky)} flaky")
    print("| plan | tests compared | confirmed | accuracy | wrong by kind |")
    print("|---|---|---|---|---|")
    print(f"| rules + offline agent | {before['tests']} | {before['confirmed']} | {before['accuracy']:.1%} | {before['wrong']} |")
    print(f"| after one refine pass (same runs) | {after['tests']} | {after['confirmed']} | {after['accuracy']:.1%} | {after['wrong']} |")
    if before_h and after_h:
        print(f"| rules + offline agent (held-out runs) | {before_h['tests']} | {before_h['confirmed']} | {before_h['accuracy']:.1%} | {before_h['wrong']} |")
        print(f"| after refine (held-out runs) | {after_h['tests']} | {after_h['confirmed']} | {after_h['accuracy']:.1%} | {after_h['wrong']} |")


if __name__ == "__main__":
    main()
