"""The SQL layer: builds SQLAlchemy Core statements and never executes them.

    dialects     what differs between the databases: capabilities, and every construct or
                 type spelled per dialect (the only module that names one)
    tables       the schema (what migrations create)
    requests     the protocol between operations and drivers (`Execute`, `COMMIT`, `Op`)
    visibility   the grant in SQL: one condition on `records` that every record read carries
    shapes       statements cached per shape of the grant and the filter, values as parameters
    catalogue    connections, streams and manifests, as the reads look them up
    reads        field metadata, windows of a field's text, record previews
    match        the match window: a needle's first occurrence and the window around it
    search       search's page of hits and the page's evidence
    index        the search index: its layout, its fills on writes, the questions reads ask it
    blobs        whether a grant reaches a blob, its metadata, its bytes, its insert
    writes       the write operations' statements: catalogue, records, fields, cursor keys,
                 planner statistics

Rules (every module):
1. A builder is a public function that takes the operation's values and returns what the
   operation yields: an `Execute` (or a tuple of them, run in order) carrying the statement,
   its parameters, and where they matter `when` and `bounded`. The statement itself is a
   template built once per shape and cached (a private `_name` function), or, where a dialect
   spells it differently, a `requests.Builder` of the dialect's capabilities. Operations never
   build a statement, bind a parameter or complete an `Execute` themselves.
2. Every selected column is labelled, and the function that decodes a statement's rows sits
   next to its builder, reading them by label, never by position.
3. A statement whose cost is bounded by a small constant whatever the data (catalogue and
   metadata lookups, a window of at most `MAX_LIMIT_CHARS`, a budgeted projection) is built
   `bounded=True` (`Execute.bounded`); one that may scan (a match, a search, a blob range) is
   not.
"""
