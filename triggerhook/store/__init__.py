"""The task stores (:class:`triggerhook.interfaces.TaskStore`).

``kernel.py`` holds every rule that decides what a store transaction writes,
once, over a backend's steps (``tables.py``, the seam); ``rows.py`` and
``arm_pass.py`` decide per row and per pass. The backends, each a package of
the same shape (``store.py``, ``tables.py``, ``sql.py``, ``schema.py``,
``listing.py``): ``mysql/`` (MySQL/MariaDB; only ``mysql/drivers.py`` imports
its drivers) and ``sqlite/`` (embedded, for ``triggerhook dev`` and, as
``SQLiteStore(":memory:")``, the in-memory store of the tests and the
simulator)."""
