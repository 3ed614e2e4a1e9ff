"""Galera, MariaDB's synchronous replication, as the daemon sees it.

The shard protocol needs every write to reach one node (docs/operations.md,
"Running on a cluster"): Galera does not replicate row locks. Writes through
several nodes show in each node's conflict counters, which stay at 0 while
one node takes every write: ``wsrep_local_cert_failures`` (a local
transaction that failed certification against one from another node) and
``wsrep_local_bf_aborts`` (a local transaction aborted by a replicated one).
:class:`GaleraWatch` reads them (through ``MySQLStore.galera_status``) for the
metrics thread, which asks :meth:`GaleraWatch.figures` every period; the node
is read at most every ``interval_s``, and a WARNING logged when they grew.
Its figure, ``galera_conflicts``, is the node's count since it started.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from triggerhook.errors import TriggerHookError

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0
_HOW = (
    "the shard protocol needs every instance's writes to go to one node "
    "(docs/operations.md, 'Running on a cluster')"
)


@dataclass(frozen=True, slots=True)
class GaleraStatus:
    """The node's view: the cluster's size, and its conflicts since it started."""

    cluster_size: int
    conflicts: int


def status_of(rows: Iterable[tuple[object, object]]) -> GaleraStatus | None:
    """The status from the ``(name, value)`` rows of ``sql.GALERA_STATUS``;
    None when the server is no Galera node (MySQL, and MariaDB without a
    provider, answer without ``wsrep_cluster_size`` or with 0)."""
    values: dict[str, int] = {}
    for name, value in rows:
        text = value.decode() if isinstance(value, bytes) else str(value)
        values[str(name).lower()] = int(text) if text.isdigit() else 0
    size = values.get("wsrep_cluster_size", 0)
    if size < 1:
        return None
    conflicts = values.get("wsrep_local_cert_failures", 0) + values.get("wsrep_local_bf_aborts", 0)
    return GaleraStatus(size, conflicts)


class GaleraWatch:
    """Owned by the metrics thread (no lock). ``read``: the node's status,
    None when the database is no Galera node (then it is not read again)."""

    def __init__(
        self,
        read: Callable[[], GaleraStatus | None],
        interval_s: float = DEFAULT_INTERVAL_S,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._interval_s = interval_s
        self._clock_s = clock_s
        self._next_s = clock_s()  # the first call reads
        self._seen: GaleraStatus | None = None
        self._galera = True  # until a read says otherwise

    def figures(self) -> dict[str, float]:
        if self._galera and self._clock_s() >= self._next_s:
            self._next_s = self._clock_s() + self._interval_s
            self._check()
        return {} if self._seen is None else {"galera_conflicts": self._seen.conflicts}

    def _check(self) -> None:
        try:
            status = self._read()
        except TriggerHookError as exc:  # the engine's threads report outages
            log.debug("galera status unavailable: %s", exc)
            return
        if status is None:
            self._galera = False
            return
        if self._seen is None:
            log.info(
                "database: a Galera node, cluster of %d nodes; %s",
                status.cluster_size,
                _HOW,
                extra={"galera_conflicts": status.conflicts},
            )
        elif status.conflicts > self._seen.conflicts:
            log.warning(
                "database: writes reached more than one Galera node (%d certification "
                "conflicts on this node since the last check); %s",
                status.conflicts - self._seen.conflicts,
                _HOW,
                extra={"galera_conflicts": status.conflicts},
            )
        self._seen = status
