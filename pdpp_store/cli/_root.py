"""The root group `pdpp-store`: the global `--db` option, and every `StoreError` turned into its
envelope on stderr with exit code 1 (rule 3 of the package's docstring)."""

from __future__ import annotations

import json
from typing import Any

import click

from pdpp_store import StoreError, audit_context

__all__ = ["DEFAULT_URL", "URL_ENV", "cli"]

DEFAULT_URL = "sqlite:///pdpp-store.db"
URL_ENV = "PDPP_STORE_URL"


class _Cli(click.Group):
    """The root group: turns every `StoreError` into its envelope on stderr and exit code 1,
    and says to the read audit that the command's reads are the command line's."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with audit_context("cli"):  # the read audit's surface for this command's reads
                return super().invoke(ctx)
        except StoreError as error:
            click.echo(json.dumps(error.to_dict(), ensure_ascii=False), err=True)
            ctx.exit(1)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    envvar=URL_ENV,
    default=DEFAULT_URL,
    show_default=True,
    show_envvar=True,
    metavar="URL",
    help="The store: sqlite:///FILE or postgresql+psycopg://... (migrated when opened).",
)
@click.version_option(package_name="pdpp-store")
def cli(db: str) -> None:
    """Grant-enforced, bounded reads of personal-data records of any size."""
