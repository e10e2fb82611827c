"""Plan accuracy on real upstream test files: what the plan says vs what the tests do on the device.

    python benchmarks/plan_accuracy.py CHECKOUT --tuned test/test_ops.py \
        --held-back test/test_unary_ufuncs.py --held-back test/test_binary_ufuncs.py@1/4 --shard 1/40

CHECKOUT is a PyTorch source checkout (upstream files are never part of this repository).
Per file it runs, through the ``crcr`` CLI as a user would:

1. ``crcr select inventory --pytorch-src CHECKOUT --file F`` (pytest's collection for the device);
2. ``crcr select plan --inventory ... --pytorch-src CHECKOUT`` (rules, then the offline agent);
3. ``crcr run --pytorch-src CHECKOUT --file F --shard I/N`` *without* the plan, so every test of
   the shard executes and says what it really does (the ground truth).

Each executed test is then put in a confusion matrix: planned run / skip / xfail (the plan's
resolved mode) against passed / failed / refused (the device raised its unsupported-op or
unsupported-dtype error) / skipped (the test skipped itself, so it says nothing about the plan).
A plan mode is confirmed when a ``run`` test passes or a ``skip``/``xfail`` test fails or is
refused; accuracy is confirmed over executed tests. Three baselines from the same run: "run
everything" (the share that passes), the rules without the test-template rules
(dtype-claims, python-refs, template-probe), undecided tests falling to the plan default (skip),
the plan without the CPU trace (``crcr select plan --no-trace``: the offline agent reads plain
device tests statically), and the plan with the CPU twin's trace instead of the device-shadow run
(``--trace-with cpu``).

Files passed with --tuned are those the rules were tuned on; --held-back were not looked at
while writing the rules: the headline figure is the held-back one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REFUSED = re.compile(r"NotImplementedError|UnsupportedOp|SnpuDtypeError|DtypeError", re.I)
OUTCOMES = ("passed", "failed", "refused", "skipped")
MODES = ("run", "skip", "xfail")


def crcr(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "crcr.cli.main", *args], capture_output=True, text=True, cwd=ROOT)
    if check and proc.returncode not in (0, 1):
        raise SystemExit(f"crcr {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc


def truth(result: dict) -> str:
    outcome = result["outcome"]
    if outcome in ("passed", "flaky", "xpassed"):
        return "passed"
    if outcome == "skipped":
        return "skipped"
    text = f"{result.get('error_class') or ''} {result.get('message') or ''}"
    return "refused" if REFUSED.search(text) else "failed"


def confirmed(mode: str, outcome: str) -> bool:
    return (mode == "run" and outcome == "passed") or (mode != "run" and outcome in ("failed", "refused"))


def matrix_text(matrix: Counter[tuple[str, str]]) -> str:
    lines = [f"    {'planned':8}" + "".join(f"{o:>9}" for o in OUTCOMES)]
    for mode in MODES:
        lines.append(f"    {mode:8}" + "".join(f"{matrix[(mode, o)]:9d}" for o in OUTCOMES))
    return "\n".join(lines)


def accuracy(matrix: Counter[tuple[str, str]]) -> tuple[int, int]:
    executed = sum(n for (m, o), n in matrix.items() if o != "skipped")
    good = sum(n for (m, o), n in matrix.items() if o != "skipped" and confirmed(m, o))
    return good, executed


def measure(checkout: Path, file: str, shard: str, backend: str, work: Path, keyword: str | None,
            reuse: bool = False) -> dict:
    from crcr.contracts.inventory import load_inventory
    from crcr.contracts.plan import load_plan
    from selector import rules as R
    from selector.capabilities import capability_path, load_capabilities

    caps = load_capabilities(ROOT / capability_path(backend))
    stem = file.replace("/", "_")
    inv_path, plan_dir = work / f"{stem}.inv.json", work / f"plan-{stem}"
    results = work / f"{stem}.{shard.replace('/', 'of')}.{caps.device}.results.json"
    k = ["-k", keyword] if keyword else []
    t0 = time.perf_counter()
    if not (reuse and inv_path.is_file()):
        crcr("select", "inventory", "--pytorch-src", str(checkout), "--file", file, "--device", caps.device, *k,
             "--out", str(inv_path))
    shutil.rmtree(plan_dir, ignore_errors=True)  # a fresh plan, never merged onto an earlier rules version's
    crcr("select", "plan", "-b", backend, "--inventory", str(inv_path), "--pytorch-src", str(checkout),
         "--out", str(plan_dir), "--no-cache")
    t_plan = time.perf_counter() - t0
    variants, seconds = {}, {}
    for name, flags in (("no-trace", ("--no-trace",)), ("cpu-twin", ("--trace-with", "cpu"))):
        variants[name] = work / f"plan-{stem}-{name}"
        shutil.rmtree(variants[name], ignore_errors=True)
        t0 = time.perf_counter()
        crcr("select", "plan", "-b", backend, "--inventory", str(inv_path), "--pytorch-src", str(checkout),
             "--out", str(variants[name]), "--no-cache", *flags)
        seconds[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if not (reuse and results.is_file()):  # the ground truth does not depend on the rules
        crcr("run", "--device", caps.device, "--pytorch-src", str(checkout), "--file", file, *k, "--shard", shard,
             "--no-rerun", "--timeout", "120", "--results", str(results))
    t_run = time.perf_counter() - t0
    plan = load_plan(plan_dir)
    static_plan, twin_plan = load_plan(variants["no-trace"]), load_plan(variants["cpu-twin"])
    inventory = load_inventory(inv_path).by_id()
    old_rules = tuple(r for r in R.DEFAULT_RULES if not isinstance(r, R.DtypeClaims | R.PythonRefs | R.TemplateProbe))
    matrix: Counter[tuple[str, str]] = Counter()
    base_old: Counter[tuple[str, str]] = Counter()
    base_all: Counter[tuple[str, str]] = Counter()
    base_static: Counter[tuple[str, str]] = Counter()
    base_twin: Counter[tuple[str, str]] = Counter()
    by_source: Counter[str] = Counter()
    misses: list[str] = []
    for result in json.loads(results.read_text())["tests"]:
        if result.get("error_class") == "CollectionError":
            continue
        outcome = truth(result)
        decision = plan.resolve(result["id"])
        mode = "xfail" if decision.mode.startswith("xfail") else decision.mode
        matrix[(mode, outcome)] += 1
        by_source[decision.source] += 1
        test = inventory.get(result["id"])
        old = R.classify(test, R.RuleContext(caps), old_rules) if test is not None else None
        old_mode = "skip" if old is None else ("xfail" if old.mode.startswith("xfail") else old.mode)
        base_old[(old_mode, outcome)] += 1
        base_all[("run", outcome)] += 1
        static_mode = static_plan.resolve(result["id"]).mode
        base_static[("xfail" if static_mode.startswith("xfail") else static_mode, outcome)] += 1
        twin_mode = twin_plan.resolve(result["id"]).mode
        base_twin[("xfail" if twin_mode.startswith("xfail") else twin_mode, outcome)] += 1
        if outcome != "skipped" and not confirmed(mode, outcome) and len(misses) < 60:
            misses.append(f"{result['id'].split('::')[-1]}: planned {mode} ({decision.reason[:90]}), "
                          f"{outcome} [{result.get('error_class') or '-'}]")
    return {"file": file, "matrix": matrix, "old": base_old, "all_run": base_all, "no_trace": base_static,
            "cpu_twin": base_twin, "by_source": by_source, "misses": misses, "plan_s": t_plan,
            "plan_no_trace_s": seconds["no-trace"], "plan_cpu_twin_s": seconds["cpu-twin"], "run_s": t_run,
            "tests_in_file": len(inventory)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--tuned", action="append", default=[],
                        help="upstream file the rules were tuned on (FILE or FILE@I/N for its own shard)")
    parser.add_argument("--held-back", action="append", default=[], help="upstream file held back from tuning")
    parser.add_argument("--shard", default="1/40", help="which slice of each file to execute (crcr run --shard)")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k slice applied to every file")
    parser.add_argument("--backend", default="snpu")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep inventories, plans and run results here (default: a temporary directory)")
    parser.add_argument("--reuse-runs", action="store_true",
                        help="with --work: reuse an inventory and a shard's run results found there (the ground truth "
                             "does not depend on the rules), so only the plan is made again")
    args = parser.parse_args()
    if not (args.checkout / "test").is_dir():
        raise SystemExit(f"{args.checkout} has no test/ folder")
    with tempfile.TemporaryDirectory(prefix="crcr-plan-accuracy-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for group, files in (("tuned", args.tuned), ("held-back", args.held_back)):
            totals: Counter[tuple[str, str]] = Counter()
            old_totals: Counter[tuple[str, str]] = Counter()
            all_totals: Counter[tuple[str, str]] = Counter()
            static_totals: Counter[tuple[str, str]] = Counter()
            twin_totals: Counter[tuple[str, str]] = Counter()
            for spec in files:
                file, _, shard = spec.partition("@")  # test/test_x.py@1/4: this file's own shard
                shard = shard or args.shard
                r = measure(args.checkout, file, shard, args.backend, work, args.keyword, args.reuse_runs)
                totals.update(r["matrix"])
                old_totals.update(r["old"])
                all_totals.update(r["all_run"])
                static_totals.update(r["no_trace"])
                twin_totals.update(r["cpu_twin"])
                print(f"[{group}] {file}: {r['tests_in_file']} tests collected and planned, shard {shard} "
                      f"executed; plan {r['plan_s']:.0f}s (with the CPU twin {r['plan_cpu_twin_s']:.0f}s, without the "
                      f"CPU trace {r['plan_no_trace_s']:.0f}s), "
                      f"run {r['run_s']:.0f}s; decided by {dict(r['by_source'])}")
                print(matrix_text(r["matrix"]))
                for name, m in (("plan", r["matrix"]), ("plan with the CPU twin", r["cpu_twin"]),
                                ("plan without the CPU trace", r["no_trace"]),
                                ("rules without template rules", r["old"]), ("run everything", r["all_run"])):
                    g, e = accuracy(m)
                    print(f"    accuracy {name}: {g}/{e} = {g / e:.3f}" if e else f"    accuracy {name}: nothing executed")
                for miss in r["misses"]:
                    print(f"    miss: {miss}")
            if files:
                g, e = accuracy(totals)
                go, _ = accuracy(old_totals)
                ga, _ = accuracy(all_totals)
                gs, _ = accuracy(static_totals)
                gt, _ = accuracy(twin_totals)
                if e:
                    print(f"[{group}] all files: plan {g}/{e} = {g / e:.3f}; plan with the CPU twin {gt / e:.3f}; "
                          "plan without the CPU trace "
                          f"{gs / e:.3f}; rules without template rules "
                          f"{go / e:.3f}; run everything {ga / e:.3f}; plan / run-everything = {g / max(ga, 1):.2f}x")
                print(matrix_text(totals))


if __name__ == "__main__":
    main()
