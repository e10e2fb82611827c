"""``crcr run``: run upstream tests on cpu, cuda or snpu; write results JSON and JUnit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=False)


@app.command(
    help=(
        "Run upstream tests on cpu, cuda or snpu and write JUnit and results JSON.\n\n"
        "Without --pytorch-src the embedded op suite runs: device-generic checks over the installed torch's "
        "op_db and module_db, with ids like test/test_ops.py::TestCommonPRIVATEUSE1::test_compare_cpu_add_snpu_float32. "
        "With --pytorch-src PATH the checkout's test/ files run the way out-of-tree backends run them.\n\n"
        "--plan DIR skips and xfails tests with the plan's reasons; tests of files no plan file covers stop the "
        "run before anything runs (exit 1) unless --unplanned run or --unplanned skip says what to do with them; --pick FILE runs only the picked tests, in "
        "their order; --shard I/N runs one of N time-balanced shards (--matrix N prints the GitHub Actions "
        "matrix). A test that crashes or hangs is recorded as an error and the run goes on; a failed test is "
        "rerun once (failed then passed = flaky).\n\n"
        "The summary says how many tests were planned, unplanned and run.\n\n"
        "Exit status: 0 nothing failed and not every selected test was skipped; 1 a test failed or errored, every "
        "selected test was skipped, "
        "the plan does not cover the run, or the run could not complete; "
        "2 bad input; 3 the device is not available here (e.g. --device cuda without a GPU)."
    ),
)
def run(
    device: Annotated[str, typer.Option(help="cpu, cuda or snpu")] = "cpu",
    plan: Annotated[Path | None, typer.Option("--plan", help="plan directory: configs/selections/<backend>")] = None,
    pick: Annotated[Path | None, typer.Option(help="pick file (JSON from crcr select pick): run these, in order")] = None,
    shard: Annotated[str | None, typer.Option(help="run shard I of N, e.g. 2/8 (time-balanced)")] = None,
    junit: Annotated[Path | None, typer.Option(help="write JUnit XML here")] = None,
    results: Annotated[Path | None, typer.Option(help="write the results JSON (crcr.contracts.results) here")] = None,
    pytorch_src: Annotated[Path | None, typer.Option(help="a PyTorch source checkout whose test/ tree to run")] = None,
    keyword: Annotated[str | None, typer.Option("-k", help="pytest -k expression to narrow the tests")] = None,
    test_id: Annotated[list[str] | None, typer.Option("--id", help="run exactly this test id (repeatable)")] = None,
    file: Annotated[list[str] | None, typer.Option("--file", help="only this upstream file or folder, e.g. test/test_ops.py (repeatable)")] = None,
    collect_only: Annotated[bool, typer.Option("--collect-only", help="collect, don't run; needs --inventory")] = False,
    inventory: Annotated[Path | None, typer.Option(help="with --collect-only: write the inventory JSON here")] = None,
    matrix: Annotated[int | None, typer.Option(help="print the GitHub Actions matrix JSON for N shards and exit")] = None,
    timeout: Annotated[float, typer.Option(help="per-test timeout in seconds (a hang is recorded as error)")] = 300.0,
    rerun: Annotated[bool, typer.Option("--rerun/--no-rerun", help="rerun a failed test once to tell flaky from broken")] = True,
    durations: Annotated[list[Path] | None, typer.Option(help="previous results files whose durations balance the shards")] = None,
    log: Annotated[Path | None, typer.Option(help="keep pytest's own output in this file")] = None,
    upstream_sha: Annotated[str | None, typer.Option(help="upstream commit under test, recorded in the results")] = None,
    overlay: Annotated[Path | None, typer.Option(help="a checkout of the commit under test: the functions its torch/**.py "
                                                      "files change replace the installed torch's (Python changes only)")] = None,
    unplanned: Annotated[str, typer.Option(
        help="with --plan, tests of files no plan file covers: error (refuse the run), skip, or run")] = "error",
) -> None:
    from crcr.errors import InputError
    from runners import sharding

    if matrix is not None:
        typer.echo(json.dumps(sharding.matrix(matrix), separators=(",", ":")))
        return
    if timeout <= 0:
        raise InputError(f"--timeout {timeout}: must be positive", hint="e.g. --timeout 300 (seconds per test)")

    from runners.driver import RunOptions, execute, exit_status, prepare
    from runners.progress import Progress
    from runners.results import plan_line, summary_line

    options = RunOptions(
        device=device, plan_dir=plan, pick=pick, shard=shard, junit=junit, results=results,
        pytorch_src=pytorch_src, keyword=keyword, ids=list(test_id or []), files=list(file or []),
        collect_only=collect_only, inventory=inventory, timeout_s=timeout, rerun_failures=rerun,
        durations=list(durations or []), log=log, upstream_sha=upstream_sha, overlay=overlay,
        unplanned=unplanned,
    )
    if overlay is not None and not (overlay / "torch").is_dir():
        raise InputError(f"--overlay {overlay}: no torch/ folder in it", hint="pass the root of a PyTorch checkout")
    prepared = prepare(options)
    with Progress(sys.stderr) as progress:
        outcome = execute(prepared, on_event=progress)
    if outcome is None:
        typer.echo(f"inventory of {progress.total} tests written to {inventory}", err=True)
        return
    typer.echo(summary_line(outcome), err=True)
    typer.echo(plan_line(outcome), err=True)
    for test in outcome.failed()[:20]:
        typer.echo(f"  {test.outcome}: {test.id} [{test.error_class or '-'}]", err=True)
    if results:
        typer.echo(f"results: {results}", err=True)
    if junit:
        typer.echo(f"junit: {junit}", err=True)
    sys.exit(exit_status(outcome))
