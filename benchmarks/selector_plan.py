"""Planning time for an inventory, and re-planning with nothing changed, measured in one run.

    python benchmarks/selector_plan.py [--inventory FILE] [--capabilities FILE] [--backend snpu]

Without --inventory the embedded suite is collected (crcr run --collect-only). Prints the
first plan's time (load inventory, classify, write), the re-plan with nothing changed (the
path `crcr select plan` takes: hash the inventory, compare the recorded state) and the
per-test cache path (state dropped, every decision reused), with ratios to the first plan.
"""

from __future__ import annotations

import argparse
import hashlib
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
from selector.inventory.embedded import collect_embedded  # noqa: E402
from selector.plan import _state_path, context_digest, record_state, run_plan, up_to_date  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--inventory", type=Path)
    ap.add_argument("--capabilities", type=Path, default=ROOT / "configs/backends/snpu.yaml")
    ap.add_argument("--backend", default="snpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        inv_path = args.inventory
        if inv_path is None:
            t0 = time.perf_counter()
            inv = collect_embedded(args.backend)
            print(f"collect embedded suite: {time.perf_counter() - t0:.1f}s")
            inv_path = tmp_path / "inventory.json"
            inv.write(inv_path)
        caps = load_capabilities(args.capabilities)
        dis = DisabledTests(DISABLED_TESTS, device=caps.device)
        agent = OfflineAgent()
        out, data = tmp_path / "plan", tmp_path / "data"
        context = context_digest(caps, dis, agent)

        def full() -> object:
            inv = load_inventory(inv_path)
            report = run_plan(inv, backend=args.backend, out_dir=out, caps=caps, disabled=dis, agent=agent,
                              tools=Tools(caps, inv.by_id()), data_dir=data)
            record_state(hashlib.sha256(inv_path.read_bytes()).hexdigest(), context, args.backend, out, data)
            return report

        t0 = time.perf_counter()
        first = full()
        t_first = time.perf_counter() - t0

        t0 = time.perf_counter()
        fresh = up_to_date(hashlib.sha256(inv_path.read_bytes()).hexdigest(), context, args.backend, out, data)
        t_replan = time.perf_counter() - t0
        assert fresh, "the re-plan should find the plan up to date"

        _state_path(data, args.backend, out).unlink()
        t0 = time.perf_counter()
        cached = full()
        t_cached = time.perf_counter() - t0
        assert cached.classified == 0, "every decision should come from the cache"

        n = first.tests
        print(f"inventory: {n} tests in {first.files} files; entries written {first.entries} "
              f"({first.pattern_entries} patterns); by mode {first.by_mode}; by source {first.by_source}")
        print("| step | seconds | ratio to first plan |")
        print("|---|---|---|")
        print(f"| first plan (load, classify {first.classified}, write) | {t_first:.3f} | 1.0x |")
        print(f"| re-plan, nothing changed (digest check) | {t_replan:.4f} | {t_first / t_replan:.0f}x faster |")
        print(f"| re-plan, per-test cache only ({cached.reused} reused) | {t_cached:.3f} | {t_first / t_cached:.1f}x faster |")


if __name__ == "__main__":
    main()
