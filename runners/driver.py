"""``crcr run``: validate the request, run pytest under the supervisor, write the results.

Nothing is written until the inputs are known good (plan, pick, shard, device, source),
and the results and JUnit files are written atomically at the end, so a bad argument or
an interrupted run never leaves half a file behind.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shlex
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crcr.contracts.pick import load_pick
from crcr.contracts.plan import load_plan
from crcr.contracts.results import PlanCounts, RunMeta, RunResults, TestResult
from crcr.errors import InputError
from crcr.fileio import atomic_write_bytes, check_writable
from runners import devices, junit, sharding
from runners.errors import CollectionError, UnplannedError
from runners.isolation import ChildSpec, Supervisor
from runners.pytest_session import session_args
from runners.runconfig import RunConfig
from runners.selection import UNPLANNED_POLICIES
from runners.suites import EMBEDDED_ROOT


@dataclass
class RunOptions:
    device: str
    plan_dir: Path | None = None
    pick: Path | None = None
    shard: str | None = None
    junit: Path | None = None
    results: Path | None = None
    pytorch_src: Path | None = None
    keyword: str | None = None
    ids: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # upstream files to run (relative to the source root)
    collect_only: bool = False
    inventory: Path | None = None
    timeout_s: float | None = 300.0
    rerun_failures: bool = True
    durations: list[Path] = field(default_factory=list)
    log: Path | None = None
    upstream_sha: str | None = None
    overlay: Path | None = None  # a checkout whose torch/**.py functions replace the installed ones
    unplanned: str = "error"  # tests of files the plan does not cover: error | skip | run


@dataclass
class Prepared:
    """Inputs after validation: everything the run needs, nothing written yet."""

    options: RunOptions
    root: Path
    targets: list[str]
    shard: tuple[int, int] | None
    plan_digest: str | None
    pick_digest: str | None


def prepare(options: RunOptions) -> Prepared:
    """Check every input; raise ``InputError`` (exit 2) before anything runs or is written."""
    devices.get_device(options.device)
    if options.unplanned not in UNPLANNED_POLICIES:
        raise InputError(f"--unplanned {options.unplanned!r}: must be one of {', '.join(UNPLANNED_POLICIES)}",
                         hint="error refuses a run the plan does not cover; skip or run state what happens instead")
    shard = sharding.parse_shard(options.shard) if options.shard else None
    plan_digest = load_plan(options.plan_dir).digest if options.plan_dir is not None else None
    pick_digest = None
    if options.pick is not None:
        load_pick(options.pick)
        pick_digest = hashlib.sha256(options.pick.read_bytes()).hexdigest()[:16]
    for path in options.durations:
        sharding.load_test_durations([path])
    if options.keyword:
        _check_keyword(options.keyword)
    if options.collect_only and options.inventory is None:
        raise InputError("--collect-only needs --inventory FILE", hint="crcr run --collect-only --inventory inv.json")
    if options.pytorch_src is not None:
        root = options.pytorch_src.resolve()
        if not (root / "test").is_dir():
            raise InputError(
                f"--pytorch-src {options.pytorch_src}: no test/ folder there",
                hint="point it at the root of a PyTorch source checkout",
            )
    else:
        root = EMBEDDED_ROOT
    targets = []
    for name in options.files or ["test"]:
        candidate = (root / name).resolve()
        # an upstream file name is data: it must stay inside the source tree
        if not candidate.is_relative_to(root) or not candidate.exists():
            raise InputError(f"{name!r} is not a file or folder under {root}", hint="name files like test/test_ops.py")
        targets.append(str(candidate.relative_to(root)))
    for out in (options.results, options.junit, options.inventory, options.log):
        if out is not None and out.exists() and out.is_dir():
            raise InputError(f"{out} is a directory; give a file path")
        if out is not None:
            check_writable(out)  # fail now, not after the whole run
    return Prepared(options, root, targets, shard, plan_digest, pick_digest)


def _check_keyword(expression: str) -> None:
    """Refuse a malformed -k before paying for collection (pytest would refuse it after)."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # pragma: no cover - pytest moved it; the child still reports usage errors
        return
    try:
        Expression.compile(expression)
    except Exception as exc:  # SyntaxError in pytest 8.4+, ParseError before
        raise InputError(f"-k {expression!r} is not a valid pytest expression: {getattr(exc, 'msg', exc)}",
                         hint="e.g. -k 'compare_cpu and float32 and not softmax'") from exc


def repro_command(prepared: Prepared, test_id: str) -> str:
    """The command that runs one test alone the way this run did."""
    opts = prepared.options
    parts = ["crcr", "run", "--device", opts.device]
    if opts.pytorch_src is not None:
        parts += ["--pytorch-src", str(opts.pytorch_src)]
    if opts.plan_dir is not None:
        parts += ["--plan", str(opts.plan_dir)]
    parts += ["--id", test_id]
    return shlex.join(parts)


def _child_argv(prepared: Prepared, workdir: Path) -> list[str]:
    opts = prepared.options
    argv = [sys.executable, "-m", "pytest", *session_args(prepared.root, workdir, opts.pytorch_src is None), "-rN",
            "-q", "--continue-on-collection-errors", "-o", "console_output_style=classic"]
    if opts.keyword:
        argv += ["-k", opts.keyword]
    if opts.collect_only:
        argv.append("--collect-only")
    return argv + prepared.targets


def _child_env(prepared: Prepared) -> dict[str, str]:
    env = dict(os.environ)
    env.update(devices.child_env(prepared.options.device))
    # the plugin and the embedded suite import ``runners`` from this installation
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def execute(prepared: Prepared, on_event: Callable[[dict[str, Any]], None] | None = None) -> RunResults | None:
    """Run the tests (or collect them); return the results (None for --collect-only)."""
    opts = prepared.options
    devices.check_available(opts.device)
    started = dt.datetime.now(dt.UTC)
    with tempfile.TemporaryDirectory(prefix="crcr-run-") as tmp:
        workdir = Path(tmp)
        events, crash = workdir / "events.jsonl", workdir / "crash.log"
        log = opts.log.resolve() if opts.log else workdir / "pytest.log"
        if opts.log:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(b"")
        inventory_tmp = workdir / "inventory.json"
        cfg = RunConfig(
            device=opts.device,
            source="pytorch-src" if opts.pytorch_src else "embedded",
            events_path=str(events),
            crash_path=str(crash),
            plan_dir=str(opts.plan_dir.resolve()) if opts.plan_dir else None,
            pick_path=str(opts.pick.resolve()) if opts.pick else None,
            shard=prepared.shard,
            durations_paths=[str(p.resolve()) for p in opts.durations],
            ids=list(opts.ids),
            timeout_s=opts.timeout_s,
            rerun_failures=opts.rerun_failures,
            inventory_path=str(inventory_tmp) if opts.collect_only else None,
            overlay_dir=str(opts.overlay.resolve()) if opts.overlay else None,
            unplanned=opts.unplanned,
        )
        config_path = workdir / "run-config.json"
        config_path.write_text(cfg.model_dump_json(), encoding="utf-8")
        env = _child_env(prepared)
        env["CRCR_RUN_CONFIG"] = str(config_path)
        spec = ChildSpec(_child_argv(prepared, workdir), prepared.root, env, config_path,
                         workdir / "resume.json", log, opts.timeout_s)
        outcome = Supervisor(spec, events, crash, on_event).run()
        if opts.collect_only:
            if not inventory_tmp.exists():
                raise CollectionError(f"collection wrote no inventory; pytest log:\n{_tail(log)}")
            assert opts.inventory is not None
            # written even when files failed to import: the inventory records them (``errors``)
            atomic_write_bytes(opts.inventory, inventory_tmp.read_bytes())
            _check_imports(outcome)
            _check_collected(prepared, outcome.collected_total, log)
            return None
        if outcome.collected_total == 0:
            _check_imports(outcome)
        _check_collected(prepared, outcome.collected_total, log)
    if outcome.unplanned_refused:
        raise _unplanned_error(prepared, outcome.unplanned_refused)
    if opts.ids and not outcome.collected:
        raise CollectionError(
            f"none of the {len(opts.ids)} --id tests was collected from {prepared.root}",
            hint="ids are as pytest collects them, relative to the source root: test/test_x.py::Class::test_name",
        )
    tests = []
    for test_id in outcome.collected or []:
        event = outcome.results.get(test_id)
        if event is None:
            continue
        tests.append(_test_result(prepared, event))
    # collection errors are results too (their ids are files, not collected tests)
    for test_id, event in outcome.results.items():
        if test_id not in set(outcome.collected or []):
            tests.append(_test_result(prepared, event))
    meta = RunMeta(
        run_id=uuid.uuid4().hex,
        device=opts.device,
        torch_version=outcome.torch_version,
        torch_git=outcome.torch_git,
        upstream_sha=opts.upstream_sha,
        source="pytorch-src" if opts.pytorch_src else "embedded",
        plan_digest=prepared.plan_digest,
        pick_digest=prepared.pick_digest,
        shard=f"{prepared.shard[0]}/{prepared.shard[1]}" if prepared.shard else None,
        host=socket.gethostname(),
        started_at=started.isoformat(timespec="seconds"),
        finished_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        command=shlex.join(["crcr", "run", *sys.argv[2:]]) if sys.argv[1:2] == ["run"] else None,
        crcr_version=_crcr_version(),
        restarts=outcome.restarts,
        pick_missing=outcome.pick_missing,
    )
    results = RunResults(run=meta, tests=tests)
    meta.plan_counts = plan_counts(results, planned=opts.plan_dir is not None, policy=opts.unplanned)
    if opts.results is not None:
        results.write(opts.results)
    if opts.junit is not None:
        junit.write_junit(results, opts.junit)
    return results


def plan_counts(results: RunResults, *, planned: bool, policy: str) -> PlanCounts:
    """Planned / unplanned / run counts of a run (a file that failed to import is none of them)."""
    counts = PlanCounts(unplanned_policy=policy if planned else "run", run=results.ran())
    files: dict[str, int] = {}
    for test in results.tests:
        if test.error_class == "CollectionError":
            continue
        if not planned or test.plan_source in (None, "unplanned"):
            counts.unplanned += 1
            file = test.id.split("::", 1)[0]
            files[file] = files.get(file, 0) + 1
        else:
            counts.planned += 1
            counts.by_default += test.plan_source == "default"
    counts.unplanned_files = dict(sorted(files.items()))
    return counts


def _unplanned_error(prepared: Prepared, files: dict[str, int]) -> UnplannedError:
    shown = ", ".join(f"{f} ({n} tests)" for f, n in sorted(files.items())[:5])
    more = f" and {len(files) - 5} more files" if len(files) > 5 else ""
    plan_dir = prepared.options.plan_dir
    src = f" --pytorch-src {prepared.options.pytorch_src}" if prepared.options.pytorch_src else ""
    return UnplannedError(
        f"the plan in {plan_dir} covers none of the {sum(files.values())} tests of {shown}{more}; nothing was run",
        hint=f"write plan files for them (crcr select plan --backend BACKEND{src} --out {plan_dir}), narrow the run (--file, -k), "
        "or say what to do with them: --unplanned run (run them) or --unplanned skip (skip them; the run "
        "still fails when nothing ran)",
    )


def _test_result(prepared: Prepared, event: dict[str, Any]) -> TestResult:
    data = {k: v for k, v in event.items() if k in TestResult.model_fields and v is not None}
    if data.get("outcome") not in ("passed", "skipped"):
        data["repro"] = repro_command(prepared, event["id"])
    return TestResult.model_validate(data)


def _check_imports(outcome: Any) -> None:
    """Files that failed to import make collection fail, naming what the installed torch lacks."""
    failed = [e for e in outcome.results.values() if e.get("error_class") == "CollectionError"]
    if not failed:
        return
    lines = [str(e.get("message") or e["id"]).splitlines()[0] for e in failed]
    shown = "\n  ".join(lines[:10]) + (f"\n  ... and {len(lines) - 10} more" if len(lines) > 10 else "")
    raise CollectionError(
        f"{len(failed)} file(s) could not be imported; none of their tests is collected:\n  {shown}",
        hint="a file written for another torch version imports names this torch lacks: use the checkout that "
        "matches the installed torch, or narrow the run with --file; the inventory records each file under errors",
    )


def _check_collected(prepared: Prepared, total: int, log: Path) -> None:
    # importing torch.testing._internal before the device is installed silently yields
    # zero device classes: zero collected is a failure, never an empty green run
    if total == 0:
        narrowed = " matching -k" if prepared.options.keyword else ""
        raise CollectionError(
            f"pytest collected no tests{narrowed} for device {prepared.options.device} from {prepared.root}",
            hint="check that the device registers before torch.testing._internal is imported; "
            f"pytest log tail:\n{_tail(log)}",
        )


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def _crcr_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("crcr")
    except Exception:
        return None


def exit_status(results: RunResults) -> int:
    """0 when nothing failed and not everything was skipped; 1 when a test failed, errored or passed
    against a strict xfail, or when every selected test was skipped (an all-skipped run is not green).
    A shard or pick that selected no test of this run has nothing to fail and stays 0."""
    return 1 if results.failed() or (results.tests and results.ran() == 0) else 0


def write_json(path: Path, data: Any) -> None:
    from crcr.fileio import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
