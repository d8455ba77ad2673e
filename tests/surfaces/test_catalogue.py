"""The operation catalogue holds the fronts and the command line together.

`_ops.catalogue.CATALOGUE` lists every operation (name, read or write, arguments, card
returned). These tests prove that `Store`, `AsyncStore` and the CLI each have every operation,
under the same name, with the same argument names (in order, with the same required ones), and
that nothing public is missing from the catalogue: a new operation on either front fails here
until the catalogue, both fronts and the CLI all have it.
"""

from __future__ import annotations

import inspect
from typing import Any

import click
import pytest

from pdpp_store import SELECTOR_ARGS, AsyncStore, Store
from pdpp_store._ops.catalogue import CATALOGUE, Operation
from pdpp_store.cli import IO_PARAMS, OPERATIONS, cli
from pdpp_store.evidence import CARDS

LIFECYCLE = {"open", "close"}
"""Public methods of the fronts that are not operations: opening and closing the store."""


def _front_methods(front: type[Any]) -> set[str]:
    return {
        name
        for name, _ in inspect.getmembers(front, callable)
        if not name.startswith("_") and name not in LIFECYCLE
    }


def _front_arguments(method: Any) -> list[tuple[str, bool]]:
    """(name, required) of each argument after `self`; `**selector` expands to the selector's
    arguments (its annotation must be the selector's one definition)."""
    found: list[tuple[str, bool]] = []
    for parameter in list(inspect.signature(method).parameters.values())[1:]:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            assert "SelectorArgs" in str(parameter.annotation), parameter
            found.extend((name, False) for name in SELECTOR_ARGS)
            continue
        assert parameter.kind is not inspect.Parameter.VAR_POSITIONAL, parameter
        found.append((parameter.name, parameter.default is inspect.Parameter.empty))
    return found


def _catalogued(op: Operation) -> list[tuple[str, bool]]:
    return [(argument.name, argument.required) for argument in op.arguments]


@pytest.mark.parametrize("front", [Store, AsyncStore], ids=["Store", "AsyncStore"])
def test_every_public_method_of_a_front_is_a_catalogued_operation(front: type[Any]) -> None:
    assert _front_methods(front) == set(CATALOGUE)


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_both_fronts_take_the_catalogued_arguments(name: str) -> None:
    op = CATALOGUE[name]
    sync, asynchronous = getattr(Store, name), getattr(AsyncStore, name)
    assert _front_arguments(sync) == _catalogued(op)
    assert _front_arguments(asynchronous) == _catalogued(op)
    assert not inspect.iscoroutinefunction(sync)
    assert inspect.iscoroutinefunction(asynchronous)


def _command(words: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    context = click.Context(cli)
    for word in words:
        assert isinstance(command, click.Group), f"{word!r} is not under a group"
        found = command.get_command(context, word)
        assert found is not None, f"no command {' '.join(words)!r}"
        command = found
    return command


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    context = click.Context(group)
    found: set[tuple[str, ...]] = set()
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        if isinstance(command, click.Group):
            found |= _leaf_commands(command, (*prefix, name))
        else:
            found.add((*prefix, name))
    return found


def test_every_operation_has_a_command_and_no_two_share_one() -> None:
    assert set(OPERATIONS) == set(CATALOGUE)
    commands = [shell.command for shell in OPERATIONS.values()]
    assert len(set(commands)) == len(commands)
    assert set(commands) <= _leaf_commands(cli)


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_each_command_takes_the_operation_s_arguments(name: str) -> None:
    shell = OPERATIONS[name]
    command = _command(shell.command)
    params = {param.name: param for param in command.params if param.name not in IO_PARAMS}
    by_argument = {shell.sources.get(arg.name, arg.name): arg for arg in CATALOGUE[name].arguments}
    assert set(params) == set(by_argument), shell.command
    for param_name, argument in by_argument.items():
        if not argument.required:  # what the library leaves optional, the CLI does too
            assert not params[param_name].required, (shell.command, param_name)
    assert set(shell.sources) <= {arg.name for arg in CATALOGUE[name].arguments}


def test_the_catalogue_is_well_formed() -> None:
    cards = {card.__name__ for card in CARDS}
    for name, op in CATALOGUE.items():
        assert op.name == name
        assert op.kind in ("read", "write")
        assert set(op.returns) <= cards, name
        names = [argument.name for argument in op.arguments]
        assert len(names) == len(set(names)), name
        if op.kind == "read":
            assert names[:1] == ["grant"], f"{name}: every read is under a grant"
    assert {"read_field_window", "read_record", "blob_info"} <= set(CATALOGUE)


def test_the_test_would_see_an_operation_missing_from_the_cli(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A front method the catalogue lacks, or a catalogued operation the CLI lacks, fails."""
    monkeypatch.setattr(Store, "future_operation", lambda self, grant: None, raising=False)
    assert _front_methods(Store) != set(CATALOGUE)
    monkeypatch.delitem(OPERATIONS, "read_resource")
    assert set(OPERATIONS) != set(CATALOGUE)
