"""How exact is `crcr select upgrade` from the installed torch (2.13.0) to the 2.14.1 wheel (or another pair)?

    python benchmarks/upgrade_exactness.py [--from installed|WHEEL|DIR] [--to WHEEL|DIR|installed]
                                           [--device snpu|cpu|...|any] [--tests INVENTORY ...]

Ground truth (independent of crcr's scanner): each version's op_db, python_ref_db and foreach lists
imported in a throwaway child process (benchmarks/upgrade_truth.py; 2.14.1's torch.testing._internal
extracted from the wheel to a temporary directory, never installed) and every entry fingerprinted from
its runtime attributes. An entry really changed when an attribute both versions have differs, or it
was added. Predicted: the OpInfo keys crcr calls added or changed, by the scanner before issue 8's
exact upgrade (literal list elements only) and after (same run), for --device (the ground truth then
compares what that device's tests see: upgrade_truth.py --device). Precision and recall are reported
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
from selector.inventory.opinfo import installed_keys, opinfo_inventory, scan_all, unmet_conditions  # noqa: E402
from selector.inventory.sources import INTERNAL, TorchSources, installed_torch_dir  # noqa: E402
from selector.upgrade import compare  # noqa: E402

WHEEL = Path("/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")


def truth(root: Path | None, device: str | None) -> dict[str, dict[str, str]]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "upgrade_truth.py")] + ([str(root)] if root else []) + (
        ["--device", device] if device else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        sys.exit(f"ground truth for {root or 'installed torch'} failed:\n{proc.stderr[-2000:]}")
    print(f"  truth {root or 'installed'}: {proc.stderr.strip().splitlines()[-1]}")
    return json.loads(proc.stdout)["entries"]


def really_changed(old: dict[str, dict[str, str]], new: dict[str, dict[str, str]]) -> set[str]:
    """Added entries, and entries with an attribute that differs; an attribute only one version's class has
    counts where the entry holds a value other than the class default (digest not marked "d:")."""
    out = set(new) - set(old)
    for key in set(old) & set(new):
        a, b = old[key], new[key]
        if (any(a[k].removeprefix("d:") != b[k].removeprefix("d:") for k in set(a) & set(b))
                or any(not side[k].startswith("d:") for side in (a, b) for k in set(side) - set(a).intersection(b))):
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


def _side(arg: str, tmp: Path, name: str) -> tuple[Path | None, TorchSources]:
    """(root for the truth's import, or None for the installed torch; sources for the scanner)."""
    if arg == "installed":
        return None, TorchSources(installed_torch_dir())
    path = Path(arg)
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            z.extractall(tmp / name, [n for n in z.namelist() if n.startswith(INTERNAL + "/")])
        return tmp / name, TorchSources(path)
    return path, TorchSources(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="from_", default="installed", help="old version: 'installed' (default), a .whl, or "
                    "a directory holding torch/testing/_internal (imported on top of the installed torch)")
    ap.add_argument("--to", default=str(WHEEL), help=f"new version, same forms (default {WHEEL.name})")
    ap.add_argument("--wheel", type=Path, help="same as --to WHEEL")
    ap.add_argument("--device", default="snpu", help="device the upgrade is for (default snpu); 'any': every device's "
                    "attributes count, in the scanner and in the ground truth")
    ap.add_argument("--tests", type=Path, action="append", default=[],
                    help="test-level inventory to count re-evaluated tests on (repeatable)")
    ap.add_argument("--data-dir", type=Path, default=Path(".crcr"), help="crcr data dir (op_db cache)")
    args = ap.parse_args()
    to = str(args.wheel) if args.wheel else args.to
    for side in (args.from_, to):
        if side != "installed" and not Path(side).exists():
            sys.exit(f"{side} not found")
    device = None if args.device == "any" else args.device
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="upgrade-exactness-") as tmp:
        (old_root, old_src), (new_root, new_src) = _side(args.from_, Path(tmp), "old"), _side(to, Path(tmp), "new")
        print(f"ground truth for device {args.device} (runtime op_db of each version, child processes):")
        real = really_changed(truth(old_root, device), truth(new_root, device))
    print(f"  {len(real)} OpInfo entries really added or changed ({time.perf_counter() - t0:.0f}s)")
    before = compare(legacy_inventory(old_src), legacy_inventory(new_src))
    old_keys = installed_keys(args.data_dir) if args.from_ == "installed" else None
    new_keys = installed_keys(args.data_dir) if to == "installed" else None
    rows = [("before (literal list elements)", set(before.to_reevaluate))]
    for label, dev in (("every device", None), (f"device {args.device}", device)):
        if label == "every device" and device is None:
            continue
        old_inv = opinfo_inventory(old_src, old_keys, device=dev, unmet=lambda: unmet_conditions(args.data_dir))
        new_inv = opinfo_inventory(new_src, new_keys, device=dev, unmet=lambda: unmet_conditions(args.data_dir))
        rows.append((f"after, {label}", set(compare(old_inv, new_inv).to_reevaluate)))
    not_static = [e for inv in (old_inv, new_inv) for e in inv.errors]
    print(f"not evaluated statically: {len(not_static)}" + "".join(f"\n  {e.torch_version}: {e.missing or e.file}: "
                                                                    f"{e.message}" for e in not_static))
    print(f"\n{old_src.version} -> {new_src.version}, device {args.device}")
    print("| OpInfo entries | predicted | precision | recall | false + | missed |")
    print("|---|---|---|---|---|---|")
    for name, pred in rows:
        p, r, _, fp, fn = pr(pred, real)
        print(f"| {name} | {len(pred)} | {p:.4f} | {r:.4f} | {fp} | {fn} |")
    for path in args.tests:
        tests = load_inventory(path)
        real_t = {t.id for t in tests.tests if t.op in real}
        print(f"\n{path.name}: {len(tests.tests)} tests, {len(real_t)} on a really changed entry")
        print("| tests | re-evaluated | precision | recall | false + | missed |")
        print("|---|---|---|---|---|---|")
        for name, pred in rows:
            pred_t = {t.id for t in tests.tests if t.op in pred}
            p, r, _, fp, fn = pr(pred_t, real_t)
            print(f"| {name} | {len(pred_t)} | {p:.4f} | {r:.4f} | {fp} | {fn} |")
    for name, pred in rows:
        print(f"{name}: false positives {sorted(pred - real)[:20]}; missed {sorted(real - pred)[:20]}")


if __name__ == "__main__":
    main()
