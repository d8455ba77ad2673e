"""`pdpp-store demo`: the demo's mailbox and the agent's walk through it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from click.core import ParameterSource

from pdpp_store import Store
from pdpp_store.demo import run_demo

from ._root import cli


@cli.command()
@click.option("--db", "url", metavar="URL", help="Run on this store instead of a fresh file.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the demo's SQLite file in DIR (default: a temporary directory, removed after).",
)
@click.pass_context
def demo(ctx: click.Context, url: str | None, directory: Path | None) -> None:
    """Load a realistic mailbox and chat, and walk the content ladder as an agent would."""
    root = ctx.find_root()
    if url is None and root.get_parameter_source("db") is ParameterSource.COMMANDLINE:
        url = root.params["db"]  # an explicit global --db, never the default or the env var
    if url is not None and directory is not None:
        raise click.UsageError("give --db or --dir, not both")
    if url is not None:
        Store.open(url).close()  # an unopenable store: a one-line error, before the demo
        run_demo(url, click.echo)
    elif directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        run_demo(f"sqlite:///{directory.resolve() / 'demo.db'}", click.echo)
    else:
        with tempfile.TemporaryDirectory(prefix="pdpp-store-demo-") as temporary:
            run_demo(f"sqlite:///{Path(temporary) / 'demo.db'}", click.echo)
        click.echo("(the demo's database was temporary and is gone; --dir DIR keeps it)")
