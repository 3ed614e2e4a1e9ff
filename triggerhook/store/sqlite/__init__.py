"""The embedded SQLite backend (``triggerhook dev``; ``SQLiteStore(":memory:")``
is the tests' and the simulator's in-memory store): the store (``store.py``:
R1, R2 and the reads), its steps for the store kernel (``tables.py``), its
SQL (``sql.py``; the listing's: ``listing.py``) and the file and its schema
(``schema.py``)."""

from triggerhook.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
