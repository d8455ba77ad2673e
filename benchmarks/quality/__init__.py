"""Search quality on a real public email corpus (see `corpus`), kept out of the package."""
