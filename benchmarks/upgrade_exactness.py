"""How exact is `crcr select upgrade` from the installed torch (2.13.0) to the 2.14.1 wheel?

    python benchmarks/upgrade_exactness.py [--wheel PATH] [--tests INVENTORY]

Ground truth (independent of crcr's scanner): each version's op_db, python_ref_db and foreach lists
imported in a throwaway child process (benchmarks/upgrade_truth.py; 2.14.1's torch.testing._internal
extracted from the wheel to a temporary directory, never installed) and every entry fingerprinted from
its runtime attributes. An entry really changed when an attribute both versions have differs, or it
was added. Predicted: the OpInfo keys crcr calls added or changed, by the scanner before issue 8's
exact upgrade (literal list elements only) and after (same run). Precision and recall are reported
per OpInfo entry and, with --tests (a test-level inventory, e.g. `crcr select inventory -o inv.json`),
per test: a test is re-evaluated when its op is predicted, really changed when its op is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crcr.contracts.inventory import Inventory, InventoryTest, load_inventory  # noqa: E402
from selector.inventory.opinfo import installed_keys, opinfo_inventory, scan_all  # noqa: E402
from selector.inventory.sources import INTERNAL, TorchSources, installed_torch_dir  # noqa: E402
from selector.upgrade import compare  # noqa: E402

WHEEL = Path("/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")


def truth(root: Path | None) -> dict[str, dict[str, str]]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "upgrade_truth.py")] + ([str(root)] if root else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        sys.exit(f"ground truth for {root or 'installed torch'} failed:\n{proc.stderr[-2000:]}")
    print(f"  truth {root or 'installed'}: {proc.stderr.strip().splitlines()[-1]}")
    return json.loads(proc.stdout)["entries"]


def really_changed(old: dict[str, dict[str, str]], new: dict[str, dict[str, str]]) -> set[str]:
    out = set(new) - set(old)
    for key in set(old) & set(new):
        a, b = old[key], new[key]
        if any(a[k] != b[k] for k in set(a) & set(b)):
            out.add(key)
    return out


def legacy_inventory(sources: TorchSources) -> Inventory:
    tests = [InventoryTest(id=f"{e.file}::{e.db}::{e.key}", file=e.file, cls=e.db, method=e.key, op=e.key,
                           fingerprint=e.fingerprint, opinfo_fingerprint=e.fingerprint)
             for e in scan_all(sources, legacy=True).entries.values()]
    return Inventory(source="opinfo", granularity="opinfo", torch_version=sources.version, tests=tests)


def pr(predicted: set[str], real: set[str]) -> tuple[float, float, int, int, int]:
    tp = len(predicted & real)
    return (tp / len(predicted) if predicted else 1.0, tp / len(real) if real else 1.0, tp,
            len(predicted - real), len(real - predicted))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", type=Path, default=WHEEL)
    ap.add_argument("--tests", type=Path, help="test-level inventory to count re-evaluated tests on")
    ap.add_argument("--data-dir", type=Path, default=Path(".crcr"), help="crcr data dir (op_db cache)")
    args = ap.parse_args()
    if not args.wheel.is_file():
        sys.exit(f"{args.wheel} not found: pass --wheel")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="upgrade-exactness-") as tmp:
        with zipfile.ZipFile(args.wheel) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith(INTERNAL + "/")])
        print("ground truth (runtime op_db of each version, child processes):")
        real = really_changed(truth(None), truth(Path(tmp)))
    print(f"  {len(real)} OpInfo entries really added or changed ({time.perf_counter() - t0:.0f}s)")
    old_src, new_src = TorchSources(installed_torch_dir()), TorchSources(args.wheel)
    before = compare(legacy_inventory(old_src), legacy_inventory(new_src))
    old_inv, new_inv = opinfo_inventory(old_src, installed_keys(args.data_dir)), opinfo_inventory(new_src)
    after = compare(old_inv, new_inv)
    not_static = [e for inv in (old_inv, new_inv) for e in inv.errors]
    print(f"not evaluated statically: {len(not_static)}" + "".join(f"\n  {e.torch_version}: {e.missing or e.file}: "
                                                                    f"{e.message}" for e in not_static))
    rows = [("before (literal list elements)", set(before.to_reevaluate)), ("after (exact upgrade)", set(after.to_reevaluate))]
    print("\n| OpInfo entries | predicted | precision | recall | false + | missed |")
    print("|---|---|---|---|---|---|")
    for name, pred in rows:
        p, r, _, fp, fn = pr(pred, real)
        print(f"| {name} | {len(pred)} | {p:.4f} | {r:.4f} | {fp} | {fn} |")
    if args.tests:
        tests = load_inventory(args.tests)
        real_t = {t.id for t in tests.tests if t.op in real}
        print(f"\n{args.tests.name}: {len(tests.tests)} tests, {len(real_t)} on a really changed entry")
        print("| tests | re-evaluated | precision | recall | false + | missed |")
        print("|---|---|---|---|---|---|")
        for name, pred in rows:
            pred_t = {t.id for t in tests.tests if t.op in pred}
            p, r, _, fp, fn = pr(pred_t, real_t)
            print(f"| {name} | {len(pred_t)} | {p:.4f} | {r:.4f} | {fp} | {fn} |")
    for name, pred in rows:
        print(f"{name}: false positives {sorted(pred - real)[:15]}; missed {sorted(real - pred)[:15]}")


if __name__ == "__main__":
    main()
