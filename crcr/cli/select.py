"""``crcr select``: inventories, per-backend plans, upgrades, refinement, review tools, picks.

Thin typer layer: parses options, shows progress, prints results. The work is in
``selector/`` (inventory, rules, agent, planfiles, upgrade, refine, check, diff, pick).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from crcr.errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=(
        "Build, check, upgrade and refine per-backend test plans; pick tests for a PR.\n\n"
        "A plan is one YAML file per upstream test file under configs/selections/<backend>/, each test with a "
        "mode (run, skip, xfail, xfail_strict), a reason and its source (rules, agent, logs, reviewer). "
        "See docs/selector.md."
    ),
)

Backend = Annotated[str, typer.Option("--backend", "-b", help="backend name, e.g. snpu")]
PlanDir = Annotated[Path | None, typer.Option("--plan", help="plan directory (default configs/selections/<backend>)")]


CoverageMapOpt = Annotated[Path | None, typer.Option(
    "--coverage-map", help="coverage map for the coverage signal (default: the one shipped in selector/data; "
                           "rebuild with `crcr select coverage-map`)")]


def _coverage_map(path: Path | None) -> Any:
    """The coverage map at PATH, else the shipped one (None when neither exists)."""
    from selector.covmap import load_map, shipped_map

    if path is None:
        return shipped_map()
    try:
        return load_map(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"--coverage-map {path}: {exc}", hint="write one with crcr select coverage-map --out FILE") from None


def _settings() -> Any:
    from crcr.settings import get_settings

    return get_settings()


def _plan_dir(plan: Path | None, backend: str | None) -> Path:
    if plan is not None:
        return plan
    if not backend:
        raise InputError("no plan directory given", hint="pass --plan DIR or --backend NAME")
    return Path("configs/selections") / backend


def _progress() -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), transient=True, disable=not sys.stderr.isatty())


def _load_inventory_arg(path: Path, device: str | None = None) -> Any:
    """An inventory JSON, or a torch install / wheel read statically at OpInfo level (for ``device``'s tests only,
    when given)."""
    from crcr.contracts.inventory import load_inventory

    if path.suffix == ".whl" or path.is_dir():
        from selector.inventory.opinfo import opinfo_inventory, unmet_conditions
        from selector.inventory.sources import TorchSources

        # entries defined under a runtime condition this environment does not meet are left out of every version
        return opinfo_inventory(TorchSources(path), device=device,
                                unmet=lambda: unmet_conditions(_settings().data_dir))
    if str(path) == "installed":
        # The installed torch imports: its op_db says which entries exist; what the static evaluation
        # misses is reported and counted as changed.
        from selector.errors import SelectorInputError
        from selector.inventory.opinfo import installed_keys, opinfo_inventory, unmet_conditions
        from selector.inventory.sources import TorchSources, installed_torch_dir

        try:
            keys = installed_keys(_settings().data_dir)
        except SelectorInputError as exc:  # torch is installed but does not import: the static reading alone
            typer.echo(f"warning: the installed op_db could not be read ({exc}); entries are read statically only",
                       err=True)
            keys = None
        return opinfo_inventory(TorchSources(installed_torch_dir()), keys, device=device,
                                unmet=(lambda: unmet_conditions(_settings().data_dir)) if keys else None)
    return load_inventory(path)


@app.command("inventory", help=(
    "Write an inventory of upstream tests (JSON, crcr.contracts.inventory).\n\n"
    "Sources: --embedded (default; the runners' embedded op suite through `crcr run --collect-only`), "
    "--pytorch-src PATH (pytest's collection of the checkout's test/ tree for --device through "
    "`crcr run --collect-only`, when torch imports here; with --static, or without torch, the static AST "
    "of test/**/test_*.py with @ops expanded against op_db, no upstream code run; --agreement prints the "
    "static inventory's Jaccard agreement with collection per file), --test-times (file level, from "
    "PyTorch's test-times.json), or --opinfo (one entry per OpInfo of a torch install or wheel, read "
    "statically: --torch PATH|installed; fingerprints cover what applies to --device's tests).\n\n"
    "A file that does not import on the installed torch is recorded under the inventory's errors (the "
    "missing name and the torch version) and the command exits 1."
))
def inventory_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="inventory JSON to write")],
    pytorch_src: Annotated[Path | None, typer.Option(help="PyTorch source checkout (collected; --static parses it)")] = None,
    static: Annotated[bool, typer.Option("--static", help="with --pytorch-src: parse statically, don't collect")] = False,
    show_agreement: Annotated[bool, typer.Option("--agreement", help="with --pytorch-src: collect and parse, "
                                                 "print the static inventory's Jaccard per file")] = False,
    test_times: Annotated[bool, typer.Option("--test-times", help="file-level inventory from test-times.json")] = False,
    opinfo: Annotated[bool, typer.Option("--opinfo", help="OpInfo-level inventory of a torch install or wheel")] = False,
    torch: Annotated[str, typer.Option("--torch", help="with --opinfo: 'installed', a torch directory or a .whl")] = "installed",
    device: Annotated[str, typer.Option(help="device name in test ids (renamed PrivateUse1)")] = "snpu",
    file: Annotated[list[str] | None, typer.Option("--file", help="collected: only this upstream file (repeatable)")] = None,
    keyword: Annotated[str | None, typer.Option("-k", help="collected: pytest -k slice")] = None,
) -> None:
    if sum([pytorch_src is not None, test_times, opinfo]) > 1:
        raise InputError("more than one inventory source given",
                         hint="choose one: --pytorch-src, --test-times, --opinfo, or none for the embedded default")
    if pytorch_src is not None:
        if not (pytorch_src / "test").is_dir():
            raise InputError(f"{pytorch_src} has no test/ folder", hint="pass the root of a PyTorch checkout")
        collectable = _torch_importable()
        if static or show_agreement or not collectable:
            static_inv = _static_inventory(pytorch_src, device)
            if not static and not collectable and not show_agreement:
                typer.echo("warning: torch does not import here, so the inventory is static (AST), not pytest's "
                           "collection; static ids can differ from collected ones (see BENCHMARKS.md, inventory "
                           "agreement); run where torch imports for exact ids", err=True)
        if not static or show_agreement:
            from selector.inventory.embedded import collect

            typer.echo(f"collecting {pytorch_src}/test for {device} (crcr run --collect-only) ...", err=True)
            inv = collect(device, list(file or []), keyword, pytorch_src)
        else:
            inv = static_inv
        if show_agreement:
            from selector.inventory.agreement import agreement, render

            typer.echo(render(agreement(static_inv, inv)))
    elif test_times:
        from crcr.data import TEST_TIMES
        from selector.inventory.test_times import times_inventory_with_problems

        inv, left_out = times_inventory_with_problems(TEST_TIMES)
        for p in left_out[:20]:
            typer.echo(f"warning: test-times entry {p}", err=True)
    elif opinfo:
        inv = _load_inventory_arg(Path(torch), device)
    else:
        from selector.inventory.embedded import collect_embedded

        typer.echo(f"collecting the embedded suite for {device} (crcr run --collect-only) ...", err=True)
        inv = collect_embedded(device, list(file or []), keyword)
    inv.write(out)
    typer.echo(f"{len(inv.tests)} tests in {len(inv.files())} files ({inv.source}, {inv.granularity}) -> {out}")
    from selector.errors import import_failures

    failure = import_failures(inv, f"the inventory is written to {out}")
    if failure is not None:
        raise failure


def _torch_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _static_inventory(pytorch_src: Path, device: str) -> Any:
    from selector.inventory.opdb import load_opdb
    from selector.inventory.opinfo import cached_fingerprints
    from selector.inventory.sources import TorchSources, installed_torch_dir
    from selector.inventory.static_ast import Naming, scan_checkout

    opdb = load_opdb(_settings().data_dir)
    fps = cached_fingerprints(TorchSources(installed_torch_dir()), _settings().data_dir)
    with _progress() as progress:
        task = progress.add_task("parsing test files", total=None)
        inv, problems = scan_checkout(pytorch_src, opdb, fps, Naming(device=device),
                                      progress=lambda i, n: progress.update(task, completed=i, total=n))
    for p in problems[:20]:
        typer.echo(f"warning: {p}", err=True)
    return inv


def _build_agent(agent: str) -> Any:
    if agent == "offline":
        from selector.agent.offline import OfflineAgent

        return OfflineAgent()
    if agent == "claude":
        from selector.agent.claude import ClaudeAgent

        s = _settings()
        key = s.anthropic_api_key.get_secret_value() if s.anthropic_api_key else None
        return ClaudeAgent(api_key=key, base_url=s.anthropic_base_url, model=s.select_agent_model,
                           batch_size=s.select_agent_batch)
    raise InputError(f"--agent {agent!r}: unknown agent", hint="use offline or claude")


def _plan_inputs(backend: str, capabilities: Path | None, disabled: Path | None) -> tuple[Any, Any]:
    from crcr.data import DISABLED_TESTS
    from selector.capabilities import capability_path, load_capabilities
    from selector.disabled import DisabledTests

    caps = load_capabilities(capabilities or capability_path(backend))
    dis = DisabledTests(disabled or DISABLED_TESTS, device=caps.device)
    return caps, dis


PROBE_CHUNK = 250  # requests per child process; a crash or a timeout costs the probe it ended on (_probe_chunk)
PROBE_CHILD = ("-m", "runners.snpu.template_probe")  # what the probe children run (python PROBE_CHILD IN OUT)
_clock = time.monotonic  # the probe and trace budgets' clock (a test replaces it to spend a budget chunk by chunk)


def _probe_child(chunk: list[tuple[str, str, str | None]], env: dict[str, str], src: Path, dst: Path,
                 deadline: float | None) -> tuple[dict[str, str | None], str | None, str]:
    """One ``runners.snpu.template_probe`` child over ``chunk``: the answers it wrote (a JSON line per probe as it
    ends), the probe it started and never answered (None: none), and how it ended, in plain words."""
    import subprocess

    src.write_text(json.dumps(chunk), encoding="utf-8")
    dst.unlink(missing_ok=True)
    limit = 120 + 10 * len(chunk)
    if deadline is not None:
        limit = min(limit, max(0.0, deadline - _clock()))
    try:
        done = subprocess.run([sys.executable, *PROBE_CHILD, str(src), str(dst)], env=env, timeout=limit,
                              capture_output=True, check=False)
        ended = f"exit status {done.returncode}"
    except subprocess.TimeoutExpired:
        ended = f"stopped after {limit:.0f} s"
    got: dict[str, str | None] = {}
    running = None
    for line in dst.read_text(encoding="utf-8").splitlines() if dst.is_file() else []:
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):  # a torn last line: stopped
            rec = json.loads(line)
            if "start" in rec:
                running = str(rec["start"])
            else:
                got[str(rec["key"])] = None if rec["answer"] is None else str(rec["answer"])
    return got, (running if running is not None and running not in got else None), ended


def _probe_chunk(chunk: list[tuple[str, str, str | None]], env: dict[str, str], src: Path, dst: Path,
                 deadline: float | None) -> dict[str, str | None]:
    """Run ``chunk`` in ``runners.snpu.template_probe`` children and return their answers. A child that ends
    before answering every probe (a crash, or a hang its timeout ended) names the probe it died on (started, never
    answered): the rest of the chunk, that probe first, runs again in a fresh child; a probe that takes a second
    child down is answered ``ProbeCrash`` and the rest go on without it, so one bad probe loses only its own
    answer. Two children in a row that die before starting any probe (the child cannot run at all) end the chunk:
    the rest stay unanswered. At ``deadline`` (on :data:`_clock`; the probe budget) the running child is stopped
    and the answers it finished are kept; what it did not answer is the budget's, never a crash."""
    from selector.rules import probe_key

    got: dict[str, str | None] = {}
    crashes: dict[str, int] = {}
    pending, dead = list(chunk), 0
    while pending:
        answers, running, ended = _probe_child(pending, env, src, dst, deadline)
        got.update(answers)
        if deadline is not None and _clock() >= deadline:
            break
        rest = [r for r in pending if probe_key(*r) not in got]
        if not rest:
            break
        dead = 0 if answers or running else dead + 1
        if dead >= 2:  # no probe to blame, twice: the child dies before its first probe
            break
        if running is not None:
            crashes[running] = crashes.get(running, 0) + 1
            if crashes[running] >= 2:
                got[running] = f"ProbeCrash: the probe took its child process down twice ({ended})"
        pending = [r for r in rest if probe_key(*r) not in got]  # in order: the probe it died on first
    return got


def _attach_template_probes(inv: Any, caps: Any, dis: Any, data_dir: Path, tools: Any = None,
                            families: set[str] | None = None, budget_s: float = 0.0) -> dict[str, Any] | None:
    """Run the template probes the inventory needs on the device (cached in the data dir) and hand the
    answers to the rules. Only for a device that runs on this machine (snpu); elsewhere the rules plan
    from the capability file alone, and this says so.

    ``budget_s`` (0: none) bounds the time spent running probes: they run in
    :func:`selector.probebudget.probe_order` (cached answers are free and always used), and the probes whose turn
    did not come are handed on as unprobed, which their tests' plan reasons say. Returns the counts (for
    ``--json``), None where no probe was wanted."""
    import hashlib

    from selector.probebudget import probe_budget_note, probe_order
    from selector.rules import RuleContext, probe_key, probe_requests

    if caps.device != "snpu":
        typer.echo(f"template probes: none for device {caps.device} (it does not run on this machine); "
                   "planning from the capability file alone", err=True)
        return None
    import runners
    from runners.snpu.template_probe import device_key, family_digest

    reads: dict[str, str] = {}
    if tools is not None:  # with the checkout's sources: the OpInfo attributes each OpInfo template reads
        from selector.rules import reads_key

        for t in inv.tests:
            if t.op and t.template and reads_key(t) not in reads:
                reads[reads_key(t)] = ",".join(tools.op_attributes(t.id))
    reads = {k: v for k, v in reads.items() if v}
    requests = probe_requests(inv.tests, RuleContext(caps=caps, disabled=dis, dtype_reaches=tools.dtype_reaches if tools else None), reads)
    if families:
        from runners.snpu.template_probe import FAMILIES

        unknown = sorted(families - set(FAMILIES) - {"attrs"})
        if unknown:
            raise InputError(f"--probe-only {', '.join(unknown)}: no such template family",
                             hint=f"families: {', '.join(FAMILIES)}, attrs")
        requests = [r for r in requests if r[0] in families]
    if not requests:
        return None
    cache_key = hashlib.sha256(f"{device_key()}:{caps.digest}".encode()).hexdigest()[:16]
    digests = {f: family_digest(f) for f in {r[0] for r in requests}}

    def stored(r: tuple[str, str, str | None]) -> str:  # an answer is kept per family code version
        return f"{probe_key(*r)}@{digests[r[0]]}"

    cache_path = data_dir / "selector" / f"template-probes-{caps.device}-{cache_key}.json"
    cached: dict[str, str | None] = {}
    if cache_path.is_file():
        with contextlib.suppress(ValueError, OSError):
            cached = dict(json.loads(cache_path.read_text(encoding="utf-8")))
    # ordered over all requests, so a re-plan continues the same order past the cached ones
    missing = [r for r in probe_order(requests) if stored(r) not in cached]
    from_cache = len(requests) - len(missing)
    start = _clock()
    deadline = start + budget_s if budget_s > 0 else None
    root = str(Path(runners.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    ran, lost, stopped = 0, 0, False
    with tempfile.TemporaryDirectory(prefix="crcr-probe-") as tmp:
        for n in range(0, len(missing), PROBE_CHUNK):
            if deadline is not None and _clock() >= deadline:
                stopped = True  # the budget is spent: the chunks left are not started
                break
            chunk = missing[n:n + PROBE_CHUNK]
            left = "" if deadline is None else f", {max(0.0, deadline - _clock()):.0f} s of the {budget_s:g} s budget left"
            typer.echo(f"template probes: {n + len(chunk)}/{len(missing)} on {caps.device}{left} ...", err=True)
            got = _probe_chunk(chunk, env, Path(tmp) / f"in-{n}.json", Path(tmp) / f"out-{n}.json", deadline)
            answered = [r for r in chunk if probe_key(*r) in got]
            cached.update({stored(r): got[probe_key(*r)] for r in answered})
            ran += len(answered)
            if answered:
                cache_path.parent.mkdir(parents=True, exist_ok=True)
                cache_path.write_text(json.dumps(cached, sort_keys=True), encoding="utf-8")  # after every chunk
            if deadline is not None and _clock() >= deadline:
                stopped = True  # stopped at the deadline: what it did not answer is the budget's, not a crash
                break
            lost += len(chunk) - len(answered)
    answers = {probe_key(*r): cached[stored(r)] for r in requests if stored(r) in cached}
    unprobed = {probe_key(*r): probe_budget_note(budget_s) for r in requests if stored(r) not in cached} \
        if stopped else {}
    failed = sum(1 for v in answers.values() if v is not None)
    crashed = sum(1 for v in answers.values() if v is not None and v.startswith("ProbeCrash:"))
    seconds = _clock() - start
    typer.echo(f"template probes: probed {len(answers)} of {len(requests)} needed ({from_cache} from cache, {ran} run "
               f"in {seconds:.0f}s); {failed} failed" + (f" ({crashed} took their child process down)" if crashed else "")
               + (f"; {len(unprobed)} unprobed: budget {budget_s:g} s spent, their tests planned by the other rules"
                  if unprobed else "")
               + (f"; {lost} without an answer (crash or timeout): planned by the other rules" if lost else ""),
               err=True)
    if unprobed and not answers:
        typer.echo(f"warning: template probes: the budget of {budget_s:g} s was spent before any probe ran: all "
                   f"{len(requests)} tests' probes are left to the other rules (raise --probe-budget, 0 for none, or "
                   "plan again: each plan continues where the last stopped)", err=True)
    caps.attach_probes(answers, reads, unprobed)
    return {"wanted": len(requests), "probed": len(answers), "cached": from_cache, "run": ran,
            "unprobed": len(unprobed), "lost": lost, "failed": failed, "crashed": crashed, "budget_s": budget_s,
            "seconds": round(seconds, 1)}


TRACE_CHUNK = 50  # tests per child process run; progress is shown per chunk


def _agent_tests(inv: Any, caps: Any, dis: Any, tools: Any) -> list[Any]:
    """The device tests whose CPU twin is traced: the plain ones (no OpInfo, no ModuleInfo) the rules leave to the
    agent, and the OpInfo tests of a generic template (``samples`` family) and the ModuleInfo tests no rule before
    the template probe decides (``selector.rules.trace_wanted``)."""
    from selector.rules import DEFAULT_RULES, RuleContext, TemplateProbe, classify, trace_wanted

    ctx = RuleContext(caps=caps, disabled=dis, dtype_reaches=tools.dtype_reaches, trace_pending=True)
    cut = next(i for i, r in enumerate(DEFAULT_RULES) if isinstance(r, TemplateProbe))
    return [t for t in inv.tests if t.cls and t.device and (
        (not t.op and classify(t, ctx) is None) or (trace_wanted(t) and classify(t, ctx, DEFAULT_RULES[:cut]) is None))]


def _trace_chunk(root: Path, file: str, chunk: list[Any], env: dict[str, str], tmp: Path,
                 deadline: float | None = None, kind: str = "cpu") -> dict[str, Any]:
    """Run the ``--trace-with`` ``kind``'s child (``runners.device_shadow``, ``runners.cpu_trace``) over ``chunk``;
    a test that crashes the child is recorded as crashed and the rest run again in a fresh child; a child that makes
    no progress loses the rest (recorded as lost).

    At ``deadline`` (on :data:`_clock`; the trace budget) the child is stopped: the traces it finished are
    kept, the test it was running and the rest get none (no crash: the budget, not the test, ended them)."""
    import subprocess

    from pydantic import ValidationError

    from crcr.contracts.cputrace import CpuTrace
    from runners.cpu_trace import TRACE_SECONDS

    runner, _, made = TRACE_KINDS[kind]
    got: dict[str, CpuTrace] = {}
    pending = list(chunk)
    while pending:
        src, dst = tmp / "in.json", tmp / "out.jsonl"
        dst.unlink(missing_ok=True)
        src.write_text(json.dumps({"root": str(root), "file": file,
                                   "tests": [[t.id, t.cls, t.method, t.device] for t in pending]}), encoding="utf-8")
        limit = 120 + 2 * TRACE_SECONDS * len(pending)
        if deadline is not None:
            limit = min(limit, max(0.0, deadline - _clock()))
        stderr = ""
        try:
            proc = subprocess.run([sys.executable, "-m", runner, str(src), str(dst)], env=env,
                                  timeout=limit, capture_output=True, text=True, check=False)
            stderr = proc.stderr
        except subprocess.TimeoutExpired:
            stderr = "the trace child timed out"
        out_of_budget = deadline is not None and _clock() >= deadline
        started: list[str] = []
        lines = dst.read_text(encoding="utf-8").splitlines() if dst.is_file() else []
        for line in lines:
            with contextlib.suppress(ValueError, ValidationError):  # a torn last line is a crash's
                rec = json.loads(line)
                if "import_error" in rec:
                    stderr = rec["import_error"]
                elif "start" in rec:
                    started.append(rec["start"])
                elif "id" in rec:
                    got[rec["id"]] = CpuTrace.model_validate(rec)
        if out_of_budget:
            break
        last = (stderr.strip().splitlines() or ["no output"])[-1][:200]
        for i in started:
            if i not in got:  # started, never ended: this test took the child down
                got[i] = CpuTrace(id=i, outcome="crashed", error=last, kind=made)
        rest = [t for t in pending if t.id not in got]
        if len(rest) == len(pending):  # no progress at all: the file does not import, or the child died at once
            got.update({t.id: CpuTrace(id=t.id, outcome="lost", error=last, kind=made) for t in rest})
            break
        pending = rest
    return got


# --trace-with: the child module that traces, what its progress lines call a run, the CpuTrace kind it writes
TRACE_KINDS = {"shadow": ("runners.device_shadow", "device-shadow runs", "device-shadow"),
               "cpu": ("runners.cpu_trace", "CPU twins", "cpu")}


def _trace_chunks(tests: list[Any]) -> list[tuple[str, list[Any]]]:
    """Runs of up to :data:`TRACE_CHUNK` consecutive tests of one file, in the order given (one child each)."""
    chunks: list[tuple[str, list[Any]]] = []
    for t in tests:
        if chunks and chunks[-1][0] == t.file and len(chunks[-1][1]) < TRACE_CHUNK:
            chunks[-1][1].append(t)
        else:
            chunks.append((t.file, [t]))
    return chunks


def _load_trace_cache(path: Path) -> dict[str, Any]:
    from pydantic import ValidationError

    from crcr.contracts.cputrace import CpuTrace

    cached: dict[str, CpuTrace] = {}
    if path.is_file():
        with contextlib.suppress(ValueError, OSError):
            for tid, rec in dict(json.loads(path.read_text(encoding="utf-8"))).items():
                with contextlib.suppress(ValidationError):  # an entry of another shape is traced again
                    cached[tid] = CpuTrace.model_validate(rec)
    return cached


def _attach_cpu_traces(inv: Any, caps: Any, dis: Any, tools: Any, data_dir: Path, pytorch_src: Path,
                       budget_s: float = 0.0, jobs: int = 1, kind: str = "shadow") -> dict[str, Any] | None:
    """Trace every device test ``_agent_tests`` names (cached in the data dir by file content, torch version, trace
    kind and trace code) and hand the traces to the agent through the capability object. ``kind`` "shadow": the
    device test itself in snpu's shadow mode (``runners.device_shadow``); "cpu": its CPU twin
    (``runners.cpu_trace``). Only for a device that runs on this machine (snpu).

    ``budget_s`` (0: none) bounds the time spent running twins: they run in :func:`selector.tracebudget.trace_order`
    (cached traces are free and always used), ``jobs`` children at a time, and the tests whose turn did not come
    are handed on as untraced, which their plan reasons say. Returns the counts (for ``--json``)."""
    import hashlib
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
    from importlib.metadata import version

    from crcr.contracts.cputrace import CpuTrace
    from selector.tracebudget import budget_note, trace_order

    if caps.device != "snpu":
        typer.echo(f"cpu trace: none for device {caps.device} (it does not run on this machine); the agent reads "
                   "test sources statically", err=True)
        return None
    import importlib

    import runners
    from runners.cpu_trace import conftests
    from selector.plaintext import plain

    runner, what, _ = TRACE_KINDS[kind]
    code_digest = importlib.import_module(runner).code_digest
    root = pytorch_src.resolve()
    wanted = [t for t in _agent_tests(inv, caps, dis, tools) if (root / t.file).is_file()]
    code_root = str(Path(runners.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (code_root, os.environ.get("PYTHONPATH", "")) if p)}
    caches: dict[str, tuple[Path, dict[str, CpuTrace]]] = {}
    for file in sorted({t.file for t in wanted}):
        source = hashlib.sha256((root / file).read_bytes())
        for conftest in conftests(root, file):  # what they patch is part of what the test does
            source.update(conftest.read_bytes())
        key = hashlib.sha256(f"{source.hexdigest()}:{version('torch')}:"
                             f"{code_digest()}{'' if kind == 'cpu' else ':' + kind}".encode()).hexdigest()[:16]
        path = data_dir / "selector" / f"cpu-trace-{key}.json"
        caches[file] = (path, _load_trace_cache(path))
    missing = trace_order([t for t in wanted if t.id not in caches[t.file][1]])
    reused = len(wanted) - len(missing)
    start = _clock()
    deadline = start + budget_s if budget_s > 0 else None

    def spent() -> bool:
        return deadline is not None and _clock() >= deadline

    def left() -> str:
        return "" if deadline is None else f", {max(0.0, deadline - _clock()):.0f} s of the {budget_s:g} s budget left"

    ran = 0
    lost_files: dict[str, str] = {}
    chunks = list(enumerate(_trace_chunks(missing)))
    if missing:
        typer.echo(f"cpu trace: 0/{len(missing)} {what} traced ({reused} from cache){left()} ...", err=True)
    with tempfile.TemporaryDirectory(prefix="crcr-trace-") as tmp, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        running: dict[Future[dict[str, CpuTrace]], str] = {}
        while chunks or running:
            while chunks and len(running) < max(1, jobs) and not spent():
                n, (file, chunk) = chunks.pop(0)
                work = Path(tmp) / str(n)
                work.mkdir()
                running[pool.submit(_trace_chunk, root, file, chunk, env, work, deadline, kind)] = file
            if not running:
                break  # the budget is spent: the chunks left are not started
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: running[f]):
                file = running.pop(fut)
                path, cached = caches[file]
                got = fut.result()
                cached.update(got)
                if got and all(rec.outcome == "lost" for rec in got.values()):
                    lost_files.setdefault(file, next(iter(got.values())).error or "no output")
                path.parent.mkdir(parents=True, exist_ok=True)
                keep = {k: v.model_dump(exclude_none=True) for k, v in cached.items() if v.outcome != "lost"}
                path.write_text(json.dumps(keep, sort_keys=True), encoding="utf-8")  # after every chunk; a lost
                # trace (the file did not import, the child died at once) is tried again by the next plan
                ran += len(got)
                typer.echo(f"cpu trace: {ran}/{len(missing)} {what} traced ({file}){left()} ...", err=True)
    traces = {t.id: caches[t.file][1][t.id] for t in wanted if t.id in caches[t.file][1]}
    untraced = {t.id: budget_note(budget_s) for t in wanted if t.id not in traces}
    outcomes: dict[str, int] = {}
    for rec in traces.values():
        outcomes[rec.outcome] = outcomes.get(rec.outcome, 0) + 1
    seconds = _clock() - start
    typer.echo(f"cpu trace: traced {len(traces)} of {len(wanted)} tests (plain device tests, or OpInfo of a generic "
               f"template; {reused} from cache, {ran} run in {seconds:.0f}s)"
               + (f", {len(untraced)} decided without a trace: budget {budget_s:g} s spent" if untraced else "")
               + "; outcomes " + (", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) or "none"), err=True)
    for file, error in sorted(lost_files.items()):
        typer.echo(f"warning: cpu trace: {file} did not load in the trace child ({plain(error)}); its tests are "
                   "planned from the static reading. The child loads it as crcr run does (pytest, the checkout's "
                   f"conftest.py files): check that `crcr select inventory --pytorch-src {root} --file {file} --out "
                   "inv.json` collects it here; the next plan tries again", err=True)
    if untraced and not traces:
        typer.echo(f"warning: cpu trace: the budget of {budget_s:g} s was spent before any test was traced: all "
                   f"{len(wanted)} are planned from the static reading (raise --trace-budget, 0 for none, or plan "
                   "again: each plan continues where the last stopped)", err=True)
    caps.attach_cpu_traces(traces, untraced)
    return {"wanted": len(wanted), "traced": len(traces), "from_cache": reused, "run": ran,
            "untraced_budget": len(untraced), "budget_s": budget_s, "jobs": max(1, jobs),
            "seconds": round(seconds, 1), "outcomes": outcomes, "kind": TRACE_KINDS[kind][2]}


def _emit_markdown(md: str, path: Path | None) -> None:
    """Print Markdown for a person and, when asked, write it for a bot to post."""
    typer.echo(md)
    if path:
        path.write_text(md, encoding="utf-8")


def _print_report(report: Any, as_json: bool, extra: dict[str, Any] | None = None) -> None:
    from dataclasses import asdict

    data = {**asdict(report), **(extra or {})}
    if as_json:
        typer.echo(json.dumps(data, indent=1, sort_keys=True, default=str))
        return
    typer.echo(f"{report.tests} tests, {report.files} plan files ({report.files_written} written, "
               f"{report.files_unchanged} unchanged); {report.classified} classified, {report.reused} reused from cache; "
               f"{report.seconds:.2f}s")
    typer.echo(f"  by source: {report.by_source}   by mode: {report.by_mode}")
    u = report.usage
    if u.requests:
        typer.echo(f"  agent: {u.requests} requests, {u.input_tokens} input + {u.output_tokens} output tokens, "
                   f"${u.cost_usd:.4f}")
    for r in u.rejected[:10]:
        typer.echo(f"  rejected agent answer: {r}", err=True)


@app.command("plan", help=(
    "Classify every test of an inventory and write configs/selections/<backend>/<upstream file>.yaml.\n\n"
    "Rules decide first (each named in the reason; OpInfo tests from their template family's probe, run once per "
    "op and dtype on the device where it runs on this machine, cached in the data dir; --probe-budget bounds the time "
    "they spend per plan, default 600 s, and a re-plan continues where they stopped; --no-probe skips them); "
    "the agent decides the rest: with --pytorch-src, where the device runs here, each plain device test (and each "
    "OpInfo test of a generic template, which its trace then decides) is first run once under a recording mode and "
    "planned from the aten ops it really called (the trace: by default the device test itself with snpu's tensors and "
    "the CPU's kernels, --trace-with cpu its CPU twin; cached in the data dir; --no-trace skips it, and tests without "
    "a trace are read statically; --trace-budget bounds the time it spends per plan, default 600 s, and a re-plan "
    "continues where it stopped); --agent offline (default, "
    "deterministic, reads the test source and the capability file) or --agent claude (Anthropic Messages API "
    "with read-only tools; key from ANTHROPIC_API_KEY or CRCR_ANTHROPIC_API_KEY). Reviewer and logs entries "
    "and comments are kept byte for byte. A cache in the data dir makes re-planning an unchanged inventory cheap."
))
def plan_cmd(
    backend: Backend,
    inventory: Annotated[Path | None, typer.Option(help="inventory JSON (default: collect the embedded suite)")] = None,
    capabilities: Annotated[Path | None, typer.Option(help="capability file (default configs/backends/<backend>.yaml)")] = None,
    out: Annotated[Path | None, typer.Option(help="plan directory (default configs/selections/<backend>)")] = None,
    agent: Annotated[str, typer.Option(help="offline or claude")] = "offline",
    pytorch_src: Annotated[Path | None, typer.Option(help="a PyTorch checkout: without --inventory its test/ tree is "
                                                     "collected for the backend's device; the agent reads test sources there")] = None,
    file: Annotated[list[str] | None, typer.Option("--file", help="with --pytorch-src: only this upstream file (repeatable)")] = None,
    keyword: Annotated[str | None, typer.Option("-k", help="with --pytorch-src: pytest -k slice")] = None,
    disabled: Annotated[Path | None, typer.Option(help="disabled-tests JSON (default: the shipped pytorch-stats copy)")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="classify everything again")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    probe: Annotated[bool, typer.Option("--probe/--no-probe", help="run each OpInfo test's template probe (its "
                                        "family's check per op and dtype) on the device before planning, where "
                                        "the device runs on this machine (snpu)")] = True,
    probe_only: Annotated[list[str] | None, typer.Option("--probe-only", help="probe only this template family "
                                                         "(repeatable: out, dtypes, noncontiguous, samples, ...); the "
                                                         "rest is planned from the capability file")] = None,
    probe_budget: Annotated[float | None, typer.Option("--probe-budget", min=0, help="seconds the template probes "
                                                       "may spend running in this plan (default "
                                                       "CRCR_SELECT_PROBE_BUDGET_S, 600; 0: no budget); the tests "
                                                       "whose probe's turn did not come are planned from the "
                                                       "capability file and their reasons say so; cached answers are "
                                                       "free, so a re-plan continues where it stopped")] = None,
    trace: Annotated[bool, typer.Option("--trace/--no-trace", help="with --pytorch-src, where the device runs on "
                                        "this machine (snpu): run each plain device test the agent decides, and each "
                                        "OpInfo test of a generic template, once under a recording mode (see "
                                        "--trace-with) and plan it from the aten ops it really called (cached in the "
                                        "data dir)")] = True,
    trace_with: Annotated[str, typer.Option("--trace-with", help="what --trace runs: 'shadow' (default) the device "
                                            "test itself with snpu's tensors and the CPU's kernels (no snpu kernel "
                                            "decides the outcome), or 'cpu' the test's CPU twin")] = "shadow",
    trace_budget: Annotated[float | None, typer.Option("--trace-budget", min=0, help="seconds the trace may spend "
                                                       "running tests in this plan (default CRCR_SELECT_TRACE_BUDGET_S, "
                                                       "600; 0: no budget); the tests whose turn did not come are "
                                                       "planned without a trace and their reasons say so; cached "
                                                       "traces are free, so a re-plan continues where it stopped")] = None,
    trace_jobs: Annotated[int | None, typer.Option("--trace-jobs", min=1, help="trace children run at once "
                                                   "(default CRCR_SELECT_TRACE_JOBS, 1)")] = None,
) -> None:
    import hashlib
    import time

    from crcr.contracts.inventory import load_inventory
    from selector.agent.tools import Tools
    from selector.inventory.sources import TorchSources, installed_torch_dir
    from selector.plan import context_digest, record_state, run_plan, up_to_date

    start = time.perf_counter()
    if trace_with not in TRACE_KINDS:
        raise InputError(f"--trace-with {trace_with!r}: one of {', '.join(TRACE_KINDS)}")
    caps, dis = _plan_inputs(backend, capabilities, disabled)
    the_agent = _build_agent(agent)
    out_dir = out or Path("configs/selections") / backend
    data_dir = None if no_cache else _settings().data_dir
    context = context_digest(caps, dis, the_agent)
    inv_digest = None
    if inventory is not None:
        if not inventory.is_file():
            raise InputError(f"inventory {inventory} does not exist", hint="write one with: crcr select inventory --out FILE")
        inv_digest = hashlib.sha256(inventory.read_bytes()).hexdigest()
        if data_dir is not None and up_to_date(inv_digest, context, backend, out_dir, data_dir):
            typer.echo(f"plan in {out_dir} is up to date with {inventory} (nothing to classify); "
                       f"{time.perf_counter() - start:.2f}s")
            return
        inv = load_inventory(inventory)
    elif pytorch_src is not None:
        from selector.inventory.embedded import collect

        if not (pytorch_src / "test").is_dir():
            raise InputError(f"{pytorch_src} has no test/ folder", hint="pass the root of a PyTorch checkout")
        typer.echo(f"collecting {pytorch_src}/test for {caps.device} (crcr run --collect-only) ...", err=True)
        inv = collect(caps.device, list(file or []), keyword, pytorch_src)
    else:
        from selector.inventory.embedded import collect_embedded

        inv = collect_embedded(caps.device)
    tools = Tools(caps, inv.by_id(), pytorch_src, TorchSources(installed_torch_dir()))
    probe_counts = None
    if probe:
        # probe answers are facts about the device (keyed by its code and the capability file), not
        # decisions: they stay in the data dir even with --no-cache
        settings = _settings()
        probe_counts = _attach_template_probes(
            inv, caps, dis, settings.data_dir, tools if pytorch_src else None, set(probe_only or ()),
            budget_s=settings.select_probe_budget_s if probe_budget is None else probe_budget)
    trace_counts = None
    if trace and pytorch_src is not None and _torch_importable():
        # traces are facts about the upstream files on this torch, not decisions: kept even with --no-cache
        settings = _settings()
        trace_counts = _attach_cpu_traces(
            inv, caps, dis, tools, settings.data_dir, pytorch_src,
            budget_s=settings.select_trace_budget_s if trace_budget is None else trace_budget,
            jobs=settings.select_trace_jobs if trace_jobs is None else trace_jobs, kind=trace_with)
    with _progress() as bar:
        tasks: dict[str, Any] = {}

        def advance(phase: str, k: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], advance=k)

        report = run_plan(inv, backend=backend, out_dir=out_dir, caps=caps, disabled=dis, agent=the_agent, tools=tools,
                          data_dir=data_dir, progress=advance)
    # a plan whose probe or trace budget ran out is not up to date: the next plan with this inventory continues
    budgeted = bool(trace_counts and trace_counts["untraced_budget"]) or bool(probe_counts and probe_counts["unprobed"])
    if data_dir is not None and inv_digest is not None and not budgeted:
        record_state(inv_digest, context, backend, out_dir, data_dir)
    extra = {"cpu_trace": trace_counts} if trace_counts is not None else {}
    if probe_counts is not None:
        extra["template_probes"] = probe_counts
    _print_report(report, as_json, extra or None)
    from selector.errors import import_failures

    failure = import_failures(inv, f"the plan in {out_dir} is written")
    if failure is not None:
        raise failure


@app.command("upgrade", help=(
    "Compare two inventories by fingerprint (added / removed / changed / unchanged) and re-plan only the "
    "added and changed tests.\n\n"
    "--from/--to take inventory JSON files, or a torch directory / .whl / 'installed' read statically at OpInfo "
    "level, e.g. --from installed --to torch-2.14.1-...whl: entries keyed name[.variant] from op_db's own lists, "
    "those built by comprehensions, helper functions and appends included; 'installed' also reads the imported "
    "op_db's entry names, and what could not be evaluated statically is printed and counts as changed. A torch "
    "read at OpInfo level is read for one device's tests (--device, default the backend's device, else every "
    "device): dtype sets and DecorateInfo of other device types (dtypesIfCUDA, backward_dtypesIfXPU, "
    "device_type='cuda') are left out, and a helper called with static arguments is read for the branches that "
    "call takes. With OpInfo-level inputs, --tests INVENTORY maps the change onto a test-level inventory. With "
    "--backend, the plan is updated and its diff printed as Markdown; every line, and --json, counts the same "
    "re-evaluated tests."
))
def upgrade_cmd(
    from_: Annotated[Path, typer.Option("--from", help="old inventory (JSON, torch dir, .whl or 'installed')")],
    to: Annotated[Path, typer.Option("--to", help="new inventory (JSON, torch dir, .whl or 'installed')")],
    tests: Annotated[Path | None, typer.Option(help="test-level inventory to project an OpInfo-level change onto")] = None,
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="re-plan this backend's plan")] = None,
    capabilities: Annotated[Path | None, typer.Option(help="capability file")] = None,
    out: Annotated[Path | None, typer.Option(help="plan directory (default configs/selections/<backend>)")] = None,
    agent: Annotated[str, typer.Option(help="offline or claude")] = "offline",
    disabled: Annotated[Path | None, typer.Option(help="disabled-tests JSON")] = None,
    pytorch_src: Annotated[Path | None, typer.Option(help="the new version's checkout, for the agent's read_test_source")] = None,
    markdown: Annotated[Path | None, typer.Option(help="also write the plan diff Markdown here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print counts as JSON")] = False,
    device: Annotated[str | None, typer.Option("--device", help="read a torch for this device type's tests only "
                                               "(default: the backend's device; without --backend every device)")] = None,
) -> None:
    from crcr.contracts.inventory import load_inventory
    from selector.upgrade import compare, project_opinfo, with_new_opinfo

    if device is None and backend is not None:
        from selector.capabilities import capability_path, load_capabilities

        device = load_capabilities(capabilities or capability_path(backend)).device
    old, new = _load_inventory_arg(from_, device), _load_inventory_arg(to, device)
    diff = compare(old, new)
    result: dict[str, Any] = {"from": old.torch_version, "to": new.torch_version, "granularity": new.granularity,
                              **diff.counts()}
    if new.granularity == "opinfo":
        result["device"] = new.device  # null: every device's attributes were read
    test_inv = None
    # One set of re-evaluated tests, counted the same in every line: the tests of added or changed ops
    # (OpInfo level with --tests), or the added and changed tests (test level).
    re_evaluated: set[str] = set()
    if new.granularity == "opinfo" and tests is not None:
        test_inv = load_inventory(tests)
        projected = project_opinfo(diff, test_inv)
        re_evaluated = set(projected.changed)
        result["tests"] = projected.counts()  # the test inventory's tests by their op's fate
    elif new.granularity != "opinfo":
        re_evaluated = set(diff.to_reevaluate)
    if new.granularity != "opinfo" or test_inv is not None:
        result["re_evaluated"] = len(re_evaluated)
        result["re_evaluated_ids"] = sorted(re_evaluated)
    not_static = sorted({f"{e.torch_version}: {e.missing or e.file + ': ' + e.message}"
                         for inv in (old, new) for e in inv.errors if e.error_class == "NotEvaluated"})
    if not_static:
        result["unevaluated"] = not_static
    if not as_json:
        scope = f", for {new.device}'s tests" if new.granularity == "opinfo" and new.device else ""
        typer.echo(f"{result['from']} -> {result['to']} ({new.granularity}{scope}): added {diff.counts()['added']}, "
                   f"removed {diff.counts()['removed']}, changed {diff.counts()['changed']}, "
                   f"unchanged {diff.counts()['unchanged']}")
        if "tests" in result:
            t = result["tests"]
            typer.echo(f"tests of {tests}: {result['re_evaluated']} re-evaluated (op added or changed), {t['removed']} "
                       f"removed, {t['unchanged']} unchanged")
        elif "re_evaluated" in result:
            typer.echo(f"tests: {result['re_evaluated']} re-evaluated (added or changed)")
        if result.get("unevaluated"):
            typer.echo(f"not evaluated statically: {len(result['unevaluated'])} (named entries count as changed): "
                       f"{'; '.join(result['unevaluated'][:10])}" + (" ..." if len(result["unevaluated"]) > 10 else ""))
    if backend is None:
        if as_json:
            typer.echo(json.dumps(result, indent=1, sort_keys=True))
        return
    from crcr.contracts.plan import load_plan
    from selector.agent.tools import Tools
    from selector.diff import diff_plans, render_markdown
    from selector.inventory.sources import TorchSources, installed_torch_dir
    from selector.plan import run_plan

    target = new if new.granularity == "test" else (with_new_opinfo(test_inv, old, new) if test_inv else None)
    if target is None:
        raise InputError("an OpInfo-level upgrade needs --tests INVENTORY to re-plan", hint="pass the test-level inventory")
    out_dir = out or Path("configs/selections") / backend
    before = load_plan(out_dir) if out_dir.is_dir() and any(out_dir.rglob("*.yaml")) else None
    caps, dis = _plan_inputs(backend, capabilities, disabled)
    tools = Tools(caps, target.by_id(), pytorch_src, TorchSources(installed_torch_dir()))
    if new.granularity == "test":
        unchanged = set(diff.unchanged)
    else:
        unchanged = {t.id for t in target.tests} - set(project_opinfo(diff, test_inv).changed)
    report = run_plan(target, backend=backend, out_dir=out_dir, caps=caps, disabled=dis, agent=_build_agent(agent),
                      tools=tools, data_dir=_settings().data_dir, keep=(before, unchanged) if before else None)
    classified = set(report.classified_ids)
    again = classified & re_evaluated
    first = classified - re_evaluated  # unchanged, but the previous plan held no bot decision for them
    line = f"re-planned: {len(re_evaluated)} re-evaluated tests"
    if len(again) != len(re_evaluated):
        line += f" ({len(again)} classified again, {len(re_evaluated) - len(again)} reused from the decision cache)"
    else:
        line += " classified again"
    if first:
        line += (f"; {len(first)} unchanged tests classified for the first time "
                 f"(no bot decision for them in {'the previous plan' if before is not None else 'any plan: none existed'})")
    typer.echo(f"{line}; {report.reused} decisions kept", err=True)
    # The same set again, for a bot: the JSON's re-plan counts are the ones printed above.
    result["replan"] = {"re_evaluated": len(re_evaluated), "classified_again": len(again),
                        "reused_from_cache": len(re_evaluated) - len(again), "first_time": len(first),
                        "first_time_ids": sorted(first), "decisions_kept": report.reused}
    if before is not None:
        flips, n = diff_plans(before, load_plan(out_dir), target)
        md = render_markdown(flips, n, f"Plan change for {backend}: torch {old.torch_version} → {new.torch_version} "
                                       f"({len(re_evaluated)} tests re-evaluated)")
        result["replan"]["mode_changes"] = [f.test_id for f in flips]
        if as_json:
            result["replan"]["markdown"] = md
            if markdown:
                markdown.write_text(md, encoding="utf-8")
        else:
            _emit_markdown(md, markdown)
    if as_json:
        typer.echo(json.dumps(result, indent=1, sort_keys=True))


@app.command("refine", help=(
    "Update a plan from run results (crcr run --results): a run test failing on the backend becomes skip "
    "(the op is missing: NotImplementedError) or xfail (it fails); an xfail that passes gets a promotion "
    "proposal (not applied); mixed outcomes on one commit mark it flaky (xfail, non-strict). Entries are "
    "source: logs with evidence (run id, error class, excerpt). Reviewer entries are never changed."
))
def refine_cmd(
    results: Annotated[list[Path], typer.Option("--results", help="results JSON (repeatable)")],
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="backend name")] = None,
    plan: PlanDir = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="report, write nothing")] = False,
    show_accuracy: Annotated[bool, typer.Option("--accuracy", help="print the plan's accuracy against these results first")] = False,
) -> None:
    from crcr.contracts.plan import load_plan
    from crcr.contracts.results import load_results
    from selector.refine import accuracy, refine

    plan_dir = _plan_dir(plan, backend)
    p = load_plan(plan_dir)
    runs = [load_results(r) for r in results]
    if show_accuracy:
        a = accuracy(p, runs)
        typer.echo(f"accuracy before refine: {a['confirmed']}/{a['tests']} = {a['accuracy']:.1%}  wrong: {a['wrong']}")
    history = _settings().data_dir / "selector" / f"history-{p.backend}.jsonl"
    report = refine(plan_dir, p, runs, history=None if dry_run else history, dry_run=dry_run)
    typer.echo(f"{report.observed} tests observed; {len(report.changed)} modes changed, {len(report.proposals)} "
               f"promotion proposals, {len(report.flaky)} flaky, {len(report.reviewer_conflicts)} reviewer entries kept; "
               f"{report.files_written} files written")
    for tid, a_mode, b_mode in report.changed[:20]:
        typer.echo(f"  {a_mode} -> {b_mode}: {tid}")
    for c in report.reviewer_conflicts[:20]:
        typer.echo(f"  kept reviewer entry: {c}")
    if show_accuracy and not dry_run:
        a = accuracy(load_plan(plan_dir), runs)
        typer.echo(f"accuracy after refine: {a['confirmed']}/{a['tests']} = {a['accuracy']:.1%}")


@app.command("explain", help="Show a test's mode, reason, source, deciding entry, evidence and run history.")
def explain_cmd(
    test_id: Annotated[str, typer.Argument(help="full pytest id, e.g. test/test_ops.py::Cls::test_x")],
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="backend name")] = None,
    plan: PlanDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    from crcr.contracts.plan import load_plan
    from selector.explain import explain, render_text

    p = load_plan(_plan_dir(plan, backend))
    info = explain(p, test_id, _settings().data_dir / "selector" / f"history-{p.backend}.jsonl")
    typer.echo(json.dumps(info, indent=1, default=str) if as_json else render_text(info))


@app.command("export", help="Export a plan in another format: --format spyre writes torch-spyre's test_suite_config YAML.")
def export_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="file to write")],
    format: Annotated[str, typer.Option("--format", help="spyre")] = "spyre",
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="backend name")] = None,
    plan: PlanDir = None,
    inventory: Annotated[Path | None, typer.Option(help="expand pattern entries against this inventory")] = None,
) -> None:
    from crcr.contracts.inventory import load_inventory
    from crcr.contracts.plan import load_plan
    from crcr.fileio import atomic_write_text
    from selector.spyre import export_spyre

    if format != "spyre":
        raise InputError(f"--format {format!r}: unknown format", hint="supported: spyre")
    text, notes = export_spyre(load_plan(_plan_dir(plan, backend)), load_inventory(inventory) if inventory else None)
    atomic_write_text(out, text)
    for n in notes[:20]:
        typer.echo(f"note: {n}", err=True)
    typer.echo(f"wrote {out}")


@app.command("import", help=(
    "Import torch-spyre's test_suite_config YAML as plan files (source: reviewer; Spyre's generic names "
    "become patterns over the instantiated ids)."
))
def import_cmd(
    source: Annotated[Path, typer.Argument(help="the Spyre config YAML")],
    backend: Backend,
    out: Annotated[Path | None, typer.Option(help="plan directory (default configs/selections/<backend>)")] = None,
    format: Annotated[str, typer.Option("--format", help="spyre")] = "spyre",
    force: Annotated[bool, typer.Option("--force", help="overwrite existing plan files")] = False,
) -> None:
    from crcr.contracts.plan import plan_path_for
    from selector.planfiles import write_plan_file
    from selector.spyre import import_spyre

    if format != "spyre":
        raise InputError(f"--format {format!r}: unknown format", hint="supported: spyre")
    if not source.is_file():
        raise InputError(f"{source} does not exist", hint="give the path of the file to import")
    files, notes = import_spyre(source.read_text(encoding="utf-8"), backend, str(source))
    out_dir = out or Path("configs/selections") / backend
    for upstream, text in sorted(files.items()):
        path = plan_path_for(out_dir, upstream)
        if path.exists() and not force:
            raise InputError(f"{path} exists", hint="pass --force to overwrite, or import into another --out")
        write_plan_file(path, text)
        typer.echo(f"wrote {path}")
    for n in notes[:20]:
        typer.echo(f"note: {n}", err=True)


@app.command("check", help=(
    "Validate plan files (a directory or files): schema, modes, empty reasons, duplicate or shadowed entries, "
    "unsafe YAML tags, size; with --inventory also patterns matching nothing and unknown ids. Prints "
    "'file:line: problem; what to do' and exits 1 on errors (fit for pre-commit and CI)."
))
def check_cmd(
    paths: Annotated[list[Path], typer.Argument(help="plan directories or files")],
    inventory: Annotated[Path | None, typer.Option(help="inventory to check ids and patterns against")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="warnings fail too")] = False,
) -> None:
    from crcr.contracts.inventory import load_inventory
    from selector.check import check_paths

    findings = check_paths(paths, load_inventory(inventory) if inventory else None)
    for f in findings:
        typer.echo(f"{f}" + (" (warning)" if f.severity == "warning" else ""))
    errors = [f for f in findings if f.severity == "error" or strict]
    if errors:
        typer.echo(f"{len(errors)} problem(s) found", err=True)
        raise typer.Exit(1)
    typer.echo(f"ok ({len(findings)} warning(s))" if findings else "ok", err=True)


@app.command("diff", help="Show, per test, which modes a plan change flips and why, as Markdown for a PR comment.")
def diff_cmd(
    old: Annotated[Path, typer.Argument(help="old plan directory")],
    new: Annotated[Path, typer.Argument(help="new plan directory")],
    inventory: Annotated[Path | None, typer.Option(help="resolve every test of this inventory (else entries only)")] = None,
    out: Annotated[Path | None, typer.Option(help="write the Markdown here too")] = None,
) -> None:
    from crcr.contracts.inventory import load_inventory
    from crcr.contracts.plan import load_plan
    from selector.diff import diff_plans, render_markdown

    flips, n = diff_plans(load_plan(old), load_plan(new), load_inventory(inventory) if inventory else None)
    md = render_markdown(flips, n)
    _emit_markdown(md, out)


def _parse_duration(text: str) -> float:
    """``600``, ``600s``, ``10m``, ``1h30m`` -> seconds."""
    import re

    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not text.strip() or not m or not any(m.groups()):
        raise InputError(f"--budget {text!r}: not a duration", hint="e.g. --budget 600, --budget 45m or --budget 1h30m")
    h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
    seconds = h * 3600 + mi * 60 + sec
    if seconds <= 0:
        raise InputError(f"--budget {text!r}: must be positive", hint="e.g. --budget 600 (seconds)")
    return seconds


@app.command("pick", help=(
    "Rank upstream test files (and the plan's tests in them) for one change and cut them by a time budget; "
    "writes a pick JSON for `crcr run --pick`.\n\n"
    "The change: --diff PATCH, --event DISPATCH_JSON (a pull_request payload; files read from GitHub) or --pr N "
    "(read from GitHub, --repo, paginated). Candidates: every file of test-times.json and the inventory that the "
    "plan runs (--unplanned: also files the plan has no file for). Signals: edited-test (always picked), "
    "op-touched, import-graph, coverage (our coverage map, --coverage-map), mentioned (PR text, as data), "
    "failure-history (--history), path-keyword. "
    "A docs-only change picks the smoke set. Budget: --budget DURATION or --budget-share 0.25 of the total time, "
    "using measured durations. Nothing picked: the reason is printed and the exit status is 1."
))
def pick_cmd(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="pick JSON to write (default: print a summary only)")] = None,
    diff: Annotated[Path | None, typer.Option(help="unified diff of the change (git diff)")] = None,
    event: Annotated[Path | None, typer.Option(help="dispatch payload JSON of a pull_request event")] = None,
    pr: Annotated[int | None, typer.Option(help="PR number: read it from GitHub (or, with --diff, only record it)")] = None,
    repo: Annotated[str, typer.Option(help="with --pr: the upstream repository")] = "pytorch/pytorch",
    inventory: Annotated[Path | None, typer.Option(help="inventory JSON (test-level tests rank inside their files)")] = None,
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="backend name")] = None,
    plan: PlanDir = None,
    pytorch_src: Annotated[Path | None, typer.Option(help="PyTorch checkout: test files' real imports for the import graph")] = None,
    budget: Annotated[str | None, typer.Option(help="time budget, e.g. 600, 45m, 1h30m (default: no cut)")] = None,
    budget_share: Annotated[float | None, typer.Option(help="budget as a share of all candidate files' time, e.g. 0.25")] = None,
    pr_text: Annotated[Path | None, typer.Option(help="file with the PR title and body (with --diff)")] = None,
    history: Annotated[list[Path] | None, typer.Option(help="stored results JSON: failure history and own durations (repeatable)")] = None,
    unplanned: Annotated[bool, typer.Option("--unplanned", help="also pick files the plan has no file for")] = False,
    trial: Annotated[list[str] | None, typer.Option(help="run this signal in trial mode: scored, not counted (repeatable)")] = None,
    keyword_weights: Annotated[Path | None, typer.Option(
        help="path-keyword weights JSON (default: the shipped ones, learned from the mutation cases)")] = None,
    pointed_only: Annotated[bool, typer.Option(
        "--pointed-only", help="inside a picked file, run only the tests the test-level signals point at "
                               "(a file with none still runs whole): op-level precision for short runs")] = False,
    failed_only: Annotated[bool, typer.Option(
        "--failed-only", help="pick only the tests that failed in the --history runs and that the plan runs "
                              "(a triage rerun: is this commit good or bad for what broke?); when none did, "
                              "the usual pick follows")] = False,
    coverage_map: CoverageMapOpt = None,
) -> None:
    from crcr.contracts.inventory import load_inventory
    from crcr.contracts.pick import Pick, PickedTest
    from crcr.contracts.plan import load_plan
    from crcr.contracts.results import load_results
    from crcr.data import KEYWORD_WEIGHTS, TEST_TIMES
    from crcr.fileio import atomic_write_text
    from selector.changes import change_from_diff, change_from_github, github_client, pr_from_event
    from selector.filepick import pick_files
    from selector.importgraph import cached_torch_graph, graph_cache
    from selector.inventory.opdb import load_opdb
    from selector.inventory.sources import installed_torch_dir
    from selector.inventory.test_times import FILE_LEVEL_ID, file_times
    from selector.keyword_weights import load as load_keyword_weights
    from selector.pick import PickContext
    from selector.pick import pick as pick_tests
    from selector.signals import SIGNAL_NAMES
    from selector.universe import build_universe

    sources = sum(x is not None for x in (diff, event)) + (pr is not None and diff is None and event is None)
    if sources != 1:
        raise InputError("give exactly one change: --diff PATCH, --event DISPATCH_JSON or --pr N",
                         hint="e.g. crcr select pick --diff pr.diff --plan configs/selections/snpu")
    if budget is not None and budget_share is not None:
        raise InputError("--budget and --budget-share both given", hint="choose one")
    if budget_share is not None and not 0 < budget_share <= 1:
        raise InputError(f"--budget-share {budget_share}: must be in (0, 1]", hint="e.g. --budget-share 0.25")
    for name in trial or []:
        if name not in SIGNAL_NAMES:
            raise InputError(f"--trial {name!r}: unknown signal", hint=f"signals: {', '.join(SIGNAL_NAMES)}")
    budget_s = _parse_duration(budget) if budget is not None else None
    text = pr_text.read_text(encoding="utf-8", errors="replace")[:1_000_000] if pr_text else ""
    pr_number = pr
    if diff is not None:
        change = change_from_diff(diff, text)
    else:
        s = _settings()
        client = github_client(s.github_api_url, s.github_token.get_secret_value() if s.github_token else None)
        if event is not None:
            repo, pr_number, event_text = pr_from_event(event)
            change = change_from_github(client, repo, pr_number, known_text=event_text)
        else:
            change = change_from_github(client, repo, int(pr))
    the_plan = load_plan(_plan_dir(plan, backend))
    inv = load_inventory(inventory) if inventory is not None else None
    runs = [load_results(h) for h in history or []]
    if failed_only:
        from selector.pick import failures_pick

        rerun = failures_pick(the_plan, runs, inv, pr_number)
        if rerun is not None:
            if out is not None:
                atomic_write_text(out, rerun.model_dump_json(indent=1, exclude_none=True) + "\n")
            typer.echo(f"picked {len(rerun.tests)} tests that failed in the {len(runs)} --history run(s), "
                       f"{len(rerun.files)} files" + (f" -> {out}" if out else ""))
            for f in rerun.files[:10]:
                typer.echo(f"  {len(f.tests):5d} tests  {f.file}")
            return
        typer.echo(f"--failed-only: no test the plan runs failed in the {len(runs)} --history run(s); "
                   "the usual pick follows", err=True)
    data_dir = _settings().data_dir
    torch_dir = installed_torch_dir()
    from importlib.metadata import version

    graph = cached_torch_graph(torch_dir, graph_cache(data_dir, version("torch")))
    universe = build_universe(the_plan, file_times(TEST_TIMES, all_configs=True), inv, unplanned=unplanned,
                              results=runs, torch_modules=graph, checkout=pytorch_src, opdb=load_opdb(data_dir),
                              coverage=_coverage_map(coverage_map))
    if keyword_weights is not None or KEYWORD_WEIGHTS.is_file():
        universe.keyword_weights = load_keyword_weights(keyword_weights or KEYWORD_WEIGHTS)
    total = sum(universe.durations.values())
    if budget_share is not None:
        budget_s = round(total * budget_share, 3)
    fp = pick_files(change, universe, budget_s=budget_s, trial=trial or ())
    # Inside the picked files, the plan's known tests in the order of the test-level heuristics.
    tests: list[PickedTest] = []
    if inv is not None:
        failures: dict[str, int] = {}
        for r in runs:
            for t in r.failed():
                failures[t.id] = failures.get(t.id, 0) + 1
        known = inv.model_copy(update={"tests": [t for t in inv.tests if t.method != FILE_LEVEL_ID]})
        ctx = PickContext(change.diffs, change.text, failures)
        ranked = pick_tests(the_plan, known, ctx, None, file_times(TEST_TIMES))
        picked_files = {f.file: f for f in fp.files}
        seen = set()
        for t in ranked.tests:
            if t.id.split("::", 1)[0] in picked_files:
                tests.append(t)
                seen.add(t.id)
        pointed_files = {i.split("::", 1)[0] for i in seen}
        for f in fp.files:
            if pointed_only and f.file in pointed_files:
                continue  # the signals named this file's tests: run those, not the whole file
            rest = [i for i in f.tests if i not in seen]
            for i in rest:
                tests.append(PickedTest(id=i, score=f.score, reason=f.reason,
                                        estimated_s=round(f.estimated_s / max(len(f.tests), 1), 3)))
    result = Pick(backend=the_plan.backend, budget_s=budget_s, plan_digest=the_plan.digest, pr=pr_number,
                  tests=tests, dropped=fp.dropped, files=fp.files, total_s=round(total, 3),
                  empty_reason=fp.empty_reason)
    if out is not None:
        atomic_write_text(out, result.model_dump_json(indent=1, exclude_none=True) + "\n")
    share = fp.spent_s / total if total else 0.0
    typer.echo(f"picked {len(fp.files)} of {len(universe.durations)} files ({fp.mode}), {len(tests)} known tests, "
               f"~{fp.spent_s:.0f}s = {share:.1%} of the time" + (f" -> {out}" if out else ""))
    for f in fp.files[:10]:
        typer.echo(f"  {f.score:7.2f}  {f.estimated_s:8.1f}s  {f.file}  {f.reason}")
    if not fp.files and not tests:
        typer.echo(f"error[empty-pick]: nothing picked: {fp.empty_reason}\n"
                   "hint: check the plan runs some files (or pass --unplanned), and the change and budget", err=True)
        raise typer.Exit(1)


@app.command("evaluate", help=(
    "Measure picks on cases with known failing tests (JSONL: id, kind, diff or paths, failing_files, source): "
    "change recall, file recall and selection rate at 25% and 50% of the total test time, and APFD, for each "
    "signal alone and combined, against a seeded random order and a path-keyword-only order computed in the "
    "same run; the combined pick and both baselines also per torch subfolder and per split (tune / held-out). "
    "Path-keyword weights are cross-fitted: each half of the cases is ranked with weights learned from the other "
    "half. Candidates: every file of test-times.json (or the files --plan runs). Prints a table; --json "
    "writes the figures."
))
def evaluate_cmd(
    cases: Annotated[Path, typer.Option("--cases", help="cases JSONL")],
    plan: Annotated[Path | None, typer.Option(help="only the files this plan runs (default: every upstream file)")] = None,
    pytorch_src: Annotated[Path | None, typer.Option(help="PyTorch checkout: test files' real imports")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures as JSON here")] = None,
    coverage_map: CoverageMapOpt = None,
    write_keyword_weights: Annotated[Path | None, typer.Option(
        help="also learn path-keyword weights from all these cases and write them here (what pick loads)")] = None,
) -> None:
    from importlib.metadata import version

    from crcr.contracts.plan import load_plan
    from crcr.data import TEST_TIMES
    from crcr.fileio import atomic_write_text
    from selector.evaluate import evaluate, load_cases, render_table
    from selector.importgraph import cached_torch_graph, graph_cache
    from selector.inventory.opdb import load_opdb
    from selector.inventory.sources import installed_torch_dir
    from selector.inventory.test_times import file_times
    from selector.universe import build_universe

    data_dir = _settings().data_dir
    the_cases = load_cases(cases)
    graph = cached_torch_graph(installed_torch_dir(), graph_cache(data_dir, version("torch")))
    universe = build_universe(load_plan(plan) if plan else None, file_times(TEST_TIMES, all_configs=True),
                              torch_modules=graph, checkout=pytorch_src, opdb=load_opdb(data_dir),
                              coverage=_coverage_map(coverage_map))
    report = evaluate(the_cases, universe)
    typer.echo(render_table(report))
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(report, indent=1, sort_keys=True) + "\n")
    if write_keyword_weights is not None:
        from selector.keyword_weights import learn, save

        weights = learn([(c.change.paths, c.failing_files, c.known_files) for c in the_cases], universe.files)
        save(write_keyword_weights, weights, f"{len(the_cases)} cases of {cases.name} over {len(universe.files)} files")
        typer.echo(f"{len(weights) - 1} keyword weights -> {write_keyword_weights}")


@app.command("coverage-map", help=(
    "Rebuild the coverage map the coverage signal reads: run test files one at a time under coverage of the "
    "installed torch's Python sources and record, per test file, the torch functions it executes beyond a "
    "baseline (import torch and the test harness, one empty test). Runs the embedded suite's files "
    "(--embedded, the default) and the upstream test files of a checkout's test/ folder named with --test "
    "(or all of them with --all-tests); each file runs under --timeout, and a file stopped by it keeps what "
    "was measured so far. --out: the map to write (gzip JSON); files already in it that are not run again are "
    "kept. PyTorch's published coverage maps are never read."
))
def coverage_map_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="coverage map to write (gzip JSON; merged into if present)")],
    pytorch_src: Annotated[Path | None, typer.Option(help="checkout (or scratch folder) with test/ files to run")] = None,
    test: Annotated[list[str] | None, typer.Option(help="test file under --pytorch-src, e.g. test/test_nn.py (repeatable)")] = None,
    all_tests: Annotated[bool, typer.Option("--all-tests", help="every test/**/test_*.py under --pytorch-src")] = False,
    embedded: Annotated[bool, typer.Option("--embedded/--no-embedded", help="run the embedded suite's files")] = True,
    timeout: Annotated[float, typer.Option(help="seconds per test file")] = 300.0,
) -> None:
    import importlib.util

    from runners.suites import EMBEDDED_ROOT
    from selector.covmap import build_map, load_map
    from selector.inventory.sources import installed_torch_dir

    if importlib.util.find_spec("coverage") is None:
        raise InputError("the coverage package is not installed", hint="pip install 'coverage>=7.4'")
    if timeout <= 0:
        raise InputError(f"--timeout {timeout}: must be positive", hint="e.g. --timeout 300")
    roots: list[tuple[Path, list[str], str]] = []
    if embedded:
        roots.append((EMBEDDED_ROOT, sorted(p.relative_to(EMBEDDED_ROOT).as_posix()
                                            for p in (EMBEDDED_ROOT / "test").glob("test_*.py")), "embedded suite"))
    if test or all_tests:
        if pytorch_src is None or not (pytorch_src / "test").is_dir():
            raise InputError("--test/--all-tests need --pytorch-src DIR with a test/ folder",
                             hint="e.g. --pytorch-src ~/pytorch --test test/test_nn.py")
        root = pytorch_src.resolve()
        names = sorted(p.relative_to(root).as_posix() for p in (root / "test").rglob("test_*.py")) if all_tests else []
        for t in test or []:
            p = (root / t).resolve()
            if not p.is_relative_to(root / "test") or not p.is_file() or p.suffix != ".py":
                raise InputError(f"--test {t}: not a .py file under {root / 'test'}", hint="e.g. --test test/test_nn.py")
            names.append(p.relative_to(root).as_posix())
        roots.append((root, sorted(set(names)), "upstream test file of --pytorch-src"))
    if not any(files for _, files, _ in roots):
        raise InputError("no test file to run", hint="keep --embedded, or pass --pytorch-src with --test or --all-tests")
    try:
        previous = load_map(out) if out.is_file() else None
    except ValueError as exc:
        raise InputError(f"--out {out}: {exc}", hint="choose a new file or remove it") from None
    repo_root = EMBEDDED_ROOT.parents[2]  # the embedded tests import runners.suites._checks
    cmap = build_map(roots, installed_torch_dir(), timeout_s=timeout, previous=previous, pythonpath=[repo_root],
                     progress=lambda line: typer.echo(line, err=True))
    cmap.save(out)
    funcs = sum(len(f) for src in cmap.tests.values() for f in src.values())
    typer.echo(f"coverage map: {len(cmap.tests)} test files, {funcs} (test file, torch function) pairs -> {out}")
