"""Entry point of the ``crcr`` command.

Subcommands are imported only when invoked, so ``crcr serve`` never imports torch and
``crcr --help`` is instant. Each subcommand module exposes ``app`` (a ``typer.Typer``
or a ``click.Command``). Errors from crcr (``CrcrError``) print as
``error[reference]: message`` plus a hint, without a traceback unless ``--debug``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click
import typer

from crcr.errors import CrcrError

try:  # typer >= 0.2x vendors its own click: its Exit/UsageError are not click's classes
    from typer._click.exceptions import ClickException as _TyperClickException
except ImportError:  # pragma: no cover - older typer uses click itself
    _TyperClickException = click.exceptions.ClickException

# name -> (module, one-line help). Keep the help here so `crcr --help` imports nothing.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("crcr.cli.serve", "Run the relay (webhooks, callbacks, dashboard) with its dispatch worker."),
    "worker": ("crcr.cli.worker", "Run extra dispatch workers against the shared database and queue."),
    "db": ("crcr.cli.db", "Database migrations and retention (upgrade, prune)."),
    "dispatches": ("crcr.cli.dispatches", "Inspect and redeliver dispatches (list, show, redeliver)."),
    "deliveries": ("crcr.cli.deliveries", "Every webhook received, ignored and rejected ones too (list, show)."),
    "downstream": ("crcr.cli.downstream", "Consume one dispatch payload from stdin (what a local target runs)."),
    "run": ("crcr.cli.run", "Run upstream tests on cpu, cuda or snpu and write JUnit and results JSON."),
    "report": ("crcr.cli.report", "Post a job's results to the relay as CRCR callbacks and a results upload."),
    "select": ("crcr.cli.select", "Build, check, upgrade and refine per-backend test plans; pick tests for a PR."),
    "snpu": ("crcr.cli.snpu", "The simulated NPU: capabilities file and device information."),
    "triage": ("crcr.cli.triage", "Triage a backend's trunk failures: suspect commit, reruns, autorevert report."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        module_name, short_help = SUBCOMMANDS[cmd_name]
        module = importlib.import_module(module_name)
        app = module.app
        command = typer.main.get_command(app) if isinstance(app, typer.Typer) else app
        command.name = cmd_name
        if not command.short_help:
            command.short_help = short_help
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="CRCR_DEBUG", help="Show tracebacks for errors.")
@click.version_option(package_name="crcr")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """crcr: cross-repository CI for PyTorch out-of-tree backends.

    The embedded default needs nothing installed: `crcr serve` runs the relay on
    SQLite with its own dispatch worker. Every setting is a CRCR_* environment variable
    (see docs/configuration.md).
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if debug:
        os.environ["CRCR_DEBUG"] = "1"


def print_error(exc: CrcrError) -> None:
    click.secho(f"error[{exc.reference}]: {exc.message}", fg="red", err=True)
    if exc.hint:
        click.echo(f"hint: {exc.hint}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; map crcr errors to their exit status without a traceback."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or os.environ.get("CRCR_DEBUG") == "1"
    try:
        cli.main(args=argv, prog_name="crcr", standalone_mode=False)
    except CrcrError as exc:
        if debug:
            raise
        print_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Exit as exc:  # e.g. `crcr serve --help`
        sys.exit(exc.exit_code)
    except typer.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except _TyperClickException as exc:  # bad options of a typer subcommand
        exc.show()
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
