"""Citus readiness: the rules a schema and its SQL keep so the store can be distributed.

A user who outgrows one Postgres moves to Citus, distributing the record data by `connection_id`
(see docs/scaling.md). Citus cannot be installed here, so these checks prove its rules on what we
can see: the migrated schema, and every statement the library sends to Postgres.

Rules:
1. Every table is classified: a *record* table (distributed by `connection_id`), a *blob* table
   (distributed by `blob_id`, co-located with the other blob tables), or a *reference* table
   (small, copied to every node). A table nobody classified fails, so a new table is a decision.
2. Every primary key and unique constraint (or unique index) of a distributed table includes its
   distribution column.
3. In one statement, every reference to a record table is tied to the others by equality on
   `connection_id`: `a.connection_id = b.connection_id`, or both equal to the same single bind
   parameter (a query routed to one shard). References in correlated subqueries count, and so
   does a derived table's, CTE's or `LATERAL` subquery's `connection_id` column that is a
   reference's column unchanged (in every branch of a `UNION`). The same holds for blob
   tables and `blob_id`.
4. No statement touches both record tables and blob tables: they are distributed by different
   columns, so a blob is read in a second statement, after the granted record named it.

Statements are parsed with sqlglot's Postgres dialect and resolved scope by scope, so two
unrelated references to one table are two nodes, not one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlglot
from sqlalchemy import Engine, inspect
from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

__all__ = [
    "BLOB_TABLES",
    "REFERENCE_TABLES",
    "SQLITE_ONLY_RECORD_TABLES",
    "StatementRecorder",
    "schema_violations",
    "sqlite_only_violations",
    "statement_violations",
]

REFERENCE_TABLES = frozenset({"manifests", "streams", "connections", "cursor_keys", "grants"})
BLOB_TABLES = frozenset({"blobs", "blob_chunks"})
NOT_DISTRIBUTED = frozenset({"alembic_version", "read_audit"})
"""Tables Citus would keep on the coordinator: the migrations' own, and the read audit (the
owner's log, written in batches and read by the owner, never joined with a table of either
kind; its `connection_id` names what was read, it does not place the row)."""
SQLITE_ONLY_RECORD_TABLES = frozenset({"search_fields"})
"""Record tables that exist only in SQLite (the search index's side table, migration 0005;
Postgres's index is a GIN index on `field_chunks`), so Citus never sees them. They still lead
their unique key with `connection_id` (tables.py Rule 1); `search_fields`' integer primary key
exists only to name chunks in the FTS5 rowid. Checked by `sqlite_only_violations`."""

RECORD_COLUMN = "connection_id"
BLOB_COLUMN = "blob_id"


def _distribution_column(table: str, record_tables: frozenset[str]) -> str | None:
    if table in record_tables:
        return RECORD_COLUMN
    if table in BLOB_TABLES:
        return BLOB_COLUMN
    return None


def record_tables_of(engine: Engine) -> frozenset[str]:
    """The tables distributed by connection: every table with that column, but the catalogue."""
    inspector = inspect(engine)
    return frozenset(
        table
        for table in inspector.get_table_names()
        if table not in REFERENCE_TABLES | NOT_DISTRIBUTED
        and any(column["name"] == RECORD_COLUMN for column in inspector.get_columns(table))
    )


def schema_violations(engine: Engine) -> list[str]:
    """Rules 1 and 2 on the schema as the database has it."""
    inspector = inspect(engine)
    records = record_tables_of(engine)
    problems: list[str] = []
    for table in sorted(inspector.get_table_names()):
        if table in NOT_DISTRIBUTED | REFERENCE_TABLES:
            continue
        column = _distribution_column(table, records)
        if column is None:
            problems.append(f"table {table} is not classified (record, blob or reference)")
            continue
        keys: list[tuple[str, list[str]]] = [
            ("primary key", inspector.get_pk_constraint(table)["constrained_columns"])
        ]
        keys += [
            (f"unique constraint {u['name']}", u["column_names"])
            for u in inspector.get_unique_constraints(table)
        ]
        keys += [
            (f"unique index {i['name']}", [c for c in i["column_names"] if c is not None])
            for i in inspector.get_indexes(table)
            if i["unique"]
        ]
        problems += [
            f"{table}: {what} ({', '.join(columns)}) lacks {column}"
            for what, columns in keys
            if column not in columns
        ]
    return problems


@dataclass
class _Components:
    """Union-find over references (scope id, alias) and bind parameters."""

    parent: dict[object, object] = field(default_factory=dict)

    def find(self, node: object) -> object:
        self.parent.setdefault(node, node)
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def union(self, a: object, b: object) -> None:
        self.parent[self.find(a)] = self.find(b)


_TARGET = 0
"""The scope id given to the table an UPDATE or DELETE writes (sqlglot lists it in no scope)."""


def _resolve(scope: Scope, qualifier: str) -> tuple[int, str]:
    """The reference a column's qualifier names: this scope's source, else an outer scope's,
    else the statement's target table."""
    current: Scope | None = scope
    while current is not None:
        if qualifier in current.sources:
            return (id(current), qualifier)
        current = current.parent
    return (_TARGET, qualifier)


def _bound_value(node: exp.Expression) -> str | None:
    """A bind parameter (or a literal), the same value wherever it appears in the statement."""
    while isinstance(node, exp.Cast | exp.Collate | exp.Paren):
        node = node.this
    if isinstance(node, exp.Placeholder):
        return f"param:{node.name}"
    if isinstance(node, exp.Literal):
        return f"literal:{node.this}"
    return None


def _column_ref(scope: Scope, node: exp.Expression, name: str) -> tuple[int, str] | None:
    while isinstance(node, exp.Cast | exp.Collate | exp.Paren):
        node = node.this
    if isinstance(node, exp.Column) and node.name == name and node.table:
        return _resolve(scope, node.table)
    return None


def _tie(
    scope: Scope, components: _Components, left: exp.Expression, right: exp.Expression, name: str
) -> None:
    for a, b in ((left, right), (right, left)):
        ref = _column_ref(scope, a, name)
        if ref is None:
            continue
        other = _column_ref(scope, b, name) or _bound_value(b)
        if other is not None:
            components.union(ref, other)


def _carried(source: Scope, name: str) -> list[tuple[int, str]]:
    """The references whose column `name` a derived table, CTE or `LATERAL` subquery passes on
    as its own column `name` unchanged (each branch of a set operation's; an expression of
    the column passes on nothing): joining on its column is joining on theirs."""
    if source.set_operation_scopes:
        return [ref for branch in source.set_operation_scopes for ref in _carried(branch, name)]
    expression = source.expression
    if isinstance(expression, exp.Lateral):
        query = expression.this.this if isinstance(expression.this, exp.Subquery) else None
        inner = [
            s for s in source.sources.values() if isinstance(s, Scope) and s.expression is query
        ]
        return [ref for scope in inner for ref in _carried(scope, name)]
    if not isinstance(expression, exp.Select):
        return []
    refs = []
    for projection in expression.selects:
        if projection.alias_or_name == name:
            node = projection.this if isinstance(projection, exp.Alias) else projection
            ref = _column_ref(source, node, name) if isinstance(node, exp.Expression) else None
            if ref is not None:
                refs.append(ref)
    return refs


def _tie_target(tree: exp.Update | exp.Delete, components: _Components) -> None:
    """The equalities of an UPDATE's or DELETE's own `WHERE` (outside its subqueries, which
    are scopes of their own): sqlglot makes no scope of the statement itself, so the target
    table's `connection_id = %(param)s` would otherwise tie it to nothing."""
    where = tree.args.get("where")
    if where is None:
        return
    target = tree.this.alias_or_name

    def ref(node: exp.Expression, name: str) -> tuple[int, str] | None:
        while isinstance(node, exp.Cast | exp.Collate | exp.Paren):
            node = node.this
        if isinstance(node, exp.Column) and node.name == name and node.table in {"", target}:
            return (_TARGET, target)
        return None

    for eq in where.find_all(exp.EQ):
        if eq.find_ancestor(exp.Subquery, exp.Select) is not None:
            continue
        for name in (RECORD_COLUMN, BLOB_COLUMN):
            for a, b in ((eq.this, eq.expression), (eq.expression, eq.this)):
                mine, other = ref(a, name), _bound_value(b)
                if mine is not None and other is not None:
                    components.union(mine, other)


def statement_violations(sql: str, record_tables: Iterable[str]) -> list[str]:
    """Rules 3 and 4 on one Postgres statement."""
    records = frozenset(record_tables)
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError as why:
        return [f"cannot parse: {why}"]
    return _violations(tree, records)


def _violations(tree: exp.Expr, records: frozenset[str]) -> list[str]:
    if isinstance(tree, exp.SetOperation):  # each branch of a UNION is planned on its own
        return _violations(tree.left, records) + _violations(tree.right, records)
    scopes = traverse_scope(tree) if isinstance(tree, exp.Query | exp.DML) else []
    nodes: dict[str, list[tuple[int, str]]] = {RECORD_COLUMN: [], BLOB_COLUMN: []}
    if isinstance(tree, exp.Update | exp.Delete) and isinstance(tree.this, exp.Table):
        column = _distribution_column(tree.this.name, records)
        if column is not None:
            nodes[column].append((_TARGET, tree.this.alias_or_name))
    components = _Components()
    if isinstance(tree, exp.Update | exp.Delete) and isinstance(tree.this, exp.Table):
        _tie_target(tree, components)
    for scope in scopes:
        for alias, source in scope.sources.items():
            if isinstance(source, exp.Table):
                column = _distribution_column(source.name, records)
                if column is not None:
                    nodes[column].append((id(scope), alias))
        for name in (RECORD_COLUMN, BLOB_COLUMN):
            for eq in scope.find_all(exp.EQ):
                _tie(scope, components, eq.this, eq.expression, name)
            for in_ in scope.find_all(exp.In):
                if len(in_.expressions) == 1:
                    _tie(scope, components, in_.this, in_.expressions[0], name)
            for alias, source in scope.sources.items():
                if isinstance(source, Scope):
                    for ref in _carried(source, name):
                        components.union((id(scope), alias), ref)
    problems: list[str] = []
    if nodes[RECORD_COLUMN] and nodes[BLOB_COLUMN]:
        problems.append("touches record tables and blob tables in one statement")
    for column, refs in nodes.items():
        if len({components.find(ref) for ref in refs}) > 1:
            aliases = ", ".join(sorted({alias for _, alias in refs}))
            problems.append(f"references to {aliases} are not all tied by equality on {column}")
    return problems


class StatementRecorder:
    """Collects every distinct statement sent to Postgres while installed: as a listener of
    SQLAlchemy's `before_cursor_execute` (writes, migrations) and as an observer of the store's
    read path (`pdpp_store._runtime.observing`), which runs below SQLAlchemy."""

    def __init__(self) -> None:
        self.statements: dict[str, int] = {}

    def __call__(self, conn: object, cursor: object, statement: str, *_: object) -> None:
        self._count(conn, statement)

    def executing(self, engine: Engine, statement: str, parameters: object) -> None:
        self._count(engine, statement)

    def fetched(self, engine: Engine, statement: str, rows: object) -> None:
        pass

    def _count(self, source: object, statement: str) -> None:
        dialect = getattr(getattr(source, "dialect", None), "name", None)
        if dialect == "postgresql":
            self.statements[statement] = self.statements.get(statement, 0) + 1

    def violations(self, record_tables: Iterable[str]) -> dict[str, list[str]]:
        tables = frozenset(record_tables)
        found: dict[str, list[str]] = {}
        for statement in self.statements:
            problems = statement_violations(statement, tables)
            if problems:
                found[statement] = problems
        return found


def sqlite_only_violations(engine: Engine) -> list[str]:
    """On a SQLite schema: every table with a `connection_id` column that Postgres does not have
    is classified (`SQLITE_ONLY_RECORD_TABLES`) and has a unique key led by `connection_id`."""
    from pdpp_store._sql.tables import metadata

    inspector = inspect(engine)
    problems: list[str] = []
    for table in sorted(inspector.get_table_names()):
        if table in metadata.tables or table in NOT_DISTRIBUTED:
            continue
        if not any(c["name"] == RECORD_COLUMN for c in inspector.get_columns(table)):
            continue
        if table not in SQLITE_ONLY_RECORD_TABLES:
            problems.append(f"table {table} is not classified (record, blob or reference)")
            continue
        keys = [u["column_names"] for u in inspector.get_unique_constraints(table)]
        if not any(key and key[0] == RECORD_COLUMN for key in keys):
            problems.append(f"table {table} has no unique key led by {RECORD_COLUMN}")
    return problems
