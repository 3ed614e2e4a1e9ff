"""The task stores (:class:`triggerhook.interfaces.TaskStore`): MySQL/MariaDB
(``mysql.py``; only ``drivers.py`` imports its drivers), embedded SQLite for
``triggerhook dev`` (``sqlite.py``) and in memory for tests (``memory.py``)."""
