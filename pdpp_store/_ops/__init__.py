"""The operations, written once as generators that yield statements and receive rows.

`writes` (ingestion, manifests, connections, blobs, cursor keys) and `reads` (grant-enforced
windows, projections and blobs). The drivers in `_runtime` run them; the fronts in `_store` are
one line per operation.
"""
