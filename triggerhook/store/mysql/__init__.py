"""The MySQL/MariaDB backend: the store (``store.py``: R1, R2 and the reads),
its steps for the store kernel (``tables.py``), all its SQL (``sql.py``; the
listing's: ``queries.py``, ``listing.py``), the schema and its upgrades
(``schema.py``, ``migrations.py``, ``alembic/``), the connection pool
(``connection.py``) and the drivers (``drivers.py``, the only module that
imports mysqlclient or PyMySQL), and Galera's status (``galera.py``)."""

from triggerhook.store.mysql.schema import init_schema
from triggerhook.store.mysql.store import MySQLStore
from triggerhook.store.mysql.tables import arm_reads

__all__ = ["MySQLStore", "arm_reads", "init_schema"]
