"""``crcr snpu``: the simulated NPU's capability file and device information."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The simulated NPU (snpu): write its capability file, show the modelled machine.",
)


@app.command(
    help=(
        "Write the capability file (configs/backends/snpu.yaml by default): the aten ops snpu implements, "
        "the OpInfo entries whose samples pass on snpu per dtype, dtypes, features and limits.\n\n"
        "The OpInfo sweep runs every op_db entry's samples on snpu and on the CPU (a few minutes); its result "
        "is cached under --cache and reused while torch and the snpu sources are unchanged. "
        "--no-opinfo writes only what is registered."
    )
)
def capabilities(
    out: Annotated[Path, typer.Option(help="where to write the YAML ('-' for stdout)")] = Path(
        "configs/backends/snpu.yaml"
    ),
    cache: Annotated[
        Path | None, typer.Option(help="sweep cache file (default: <data_dir>/snpu-opinfo-sweep.json)")
    ] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="ignore the cache and rerun the sweep")] = False,
    opinfo: Annotated[
        bool, typer.Option("--opinfo/--no-opinfo", help="run (or reuse) the OpInfo sweep")
    ] = True,
    sample_limit: Annotated[
        int | None, typer.Option(help="samples per op and dtype (default: all)", min=1)
    ] = None,
    op: Annotated[
        list[str] | None, typer.Option("--op", help="sweep only this OpInfo entry (repeatable; a quick look)")
    ] = None,
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from crcr.fileio import atomic_write_text, check_writable
    from crcr.settings import get_settings
    from runners.snpu import capabilities as caps

    if str(out) != "-":
        check_writable(out)  # before the sweep, not after it

    sweep_data = None
    if opinfo:
        cache_path = cache if cache is not None else get_settings().data_dir / "snpu-opinfo-sweep.json"
        with Progress(
            TextColumn("OpInfo sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            transient=True,
        ) as bar:
            task = bar.add_task("", total=None)

            def progress(done: int, total: int, name: str) -> None:
                bar.update(task, completed=done, total=total, description=name)

            sweep_data = caps.load_or_run_sweep(
                cache_path, refresh=refresh, sample_limit=sample_limit, only=op or None, progress=progress
            )
    text = caps.to_yaml(caps.build(sweep_data))
    if str(out) == "-":
        typer.echo(text, nl=False)
        return
    atomic_write_text(out, text)
    summary = f"wrote {out}"
    if sweep_data is not None:
        passing = sum(1 for o in sweep_data["outcomes"] if o["dtype"] == "float32" and o["status"] == "pass")
        summary += f" ({passing} OpInfo entries pass all float32 samples)"
    typer.echo(summary, err=True)


@app.command(
    help=(
        "Show the snpu device: registration, the modelled machine and how many kernels it has, by how "
        "they run (tiled, whole-tensor, view). --ops lists every aten op with how it runs."
    )
)
def info(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    ops_list: Annotated[
        bool, typer.Option("--ops", help="list every aten op with its execution: tiled, whole or view")
    ] = False,
) -> None:
    import torch

    import runners.snpu
    from runners.snpu import capabilities as caps
    from runners.snpu import machine
    from runners.snpu.dispatch import fallback_mode

    runners.snpu.install()
    ops = caps.registered_ops()
    data = {
        "device": str(torch.device("snpu", 0)),
        "available": torch.snpu.is_available(),
        "device_count": torch.snpu.device_count(),
        "torch_version": torch.__version__,
        "machine": machine.current().as_dict(),
        "kernels": {k: len(v) for k, v in ops.items()},
        "execution": {k: len(v) for k, v in caps.executions().items()},
        "fallback": "cpu" if fallback_mode() == "cpu" else "error (set CRCR_SNPU_FALLBACK=cpu to fall back)",
    }
    if ops_list:
        data["ops"] = {name: how for how, names in caps.executions().items() for name in names}
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="snpu", show_header=False)
    for key in ("device", "available", "device_count", "torch_version", "fallback"):
        table.add_row(key, str(data[key]))
    for key, value in data["machine"].items():
        table.add_row(f"machine.{key}", str(value))
    for key, value in data["kernels"].items():
        table.add_row(f"kernels.{key}", str(value))
    for key, value in data["execution"].items():
        table.add_row(f"execution.{key}", str(value))
    Console().print(table)
    if ops_list:
        listing = Table(title="snpu aten ops", show_header=True)
        listing.add_column("op")
        listing.add_column("execution")
        for name, how in sorted(data["ops"].items()):
            listing.add_row(name, how)
        Console().print(listing)
