"""The SQL layer: builds SQLAlchemy Core statements and never executes them.

`tables` holds the schema (what migrations create); `statements` the statements every operation
yields, with the grant's visibility condition as SQL.
"""
