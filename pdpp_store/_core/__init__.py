"""The pure core: values and rules with no I/O and no SQLAlchemy.

Errors, safe names and record identity, grants, selectors and window arithmetic, the cursor
codec, case folding, manifests and record encoding. Every value here validates itself when it is
built, so a value that exists is valid.
"""
