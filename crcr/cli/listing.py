"""What ``crcr deliveries`` and ``crcr dispatches`` share: the migrated store and a list
printed as one JSON array or as a table."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import typer


def store_runtime() -> Any:  # -> relay.runtime.Runtime
    """The relay's runtime over the configured store, migrated to the newest schema."""
    from crcr.settings import get_settings
    from crcr.store.migrate import upgrade
    from relay.runtime import Runtime

    runtime = Runtime.from_settings(get_settings())
    upgrade(runtime.engine)
    return runtime


def print_rows(rows: list[dict[str, Any]], as_json: bool, columns: Sequence[str], title: str,
               cells: Callable[[dict[str, Any]], Sequence[str]]) -> None:
    """``rows`` as one JSON array (``[]`` when none), or as a table of ``columns``."""
    if as_json:
        typer.echo(json.dumps(rows))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, title=title)
    for r in rows:
        table.add_row(*cells(r))
    Console().print(table)
