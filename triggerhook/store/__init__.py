"""The task stores (:class:`triggerhook.interfaces.TaskStore`).

``kernel.py`` holds every rule that decides what a store transaction writes,
once, over a backend's steps (``tables.py``, the seam); ``rows.py`` and
``arm_pass.py`` decide per row and per pass. The backends: MySQL/MariaDB
(``mysql.py``, ``mysql_tables.py``, ``sql.py``; only ``drivers.py`` imports
its drivers) and embedded SQLite (``sqlite.py``, ``sqlite_tables.py``,
``sqlite_sql.py``) for ``triggerhook dev`` and, as ``SQLiteStore(":memory:")``,
the in-memory store of the tests and the simulator."""
