"""A store's ``already_fired`` answer, stood in for: the interfaces' unit tests
of the dedup window (HTTP, the command channel, the client, the CLI) need a
create of an id that fired within its window without firing anything.

:func:`refuse_as_fired` makes a store's ``insert`` answer for the ids given
as :meth:`~triggerhook.interfaces.TaskStore.insert` says a store holding
their fired records does: with ``atomic`` (and not ``fired_ok``) the first such row raises
:class:`~triggerhook.errors.AlreadyFiredError` (its index) and nothing is
written; else that row is answered ``ALREADY_FIRED`` with its ``fired_ms``
and the others are inserted as they would be. The store's own records (the
contract suite's subject) are not used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triggerhook.domain.task import InsertOutcome
from triggerhook.errors import AlreadyFiredError
from triggerhook.interfaces import Inserted, NewRow


def refuse_as_fired(store: Any, fired: Mapping[str, int]) -> None:
    """From now on ``store.insert`` answers the ids of ``fired`` as fired at
    ``fired[id]`` (epoch ms), within their windows."""
    real: Callable[..., list[Inserted]] = store.insert

    def insert(rows: Sequence[NewRow], atomic: bool, *args: Any, **kwargs: Any) -> list[Inserted]:
        refused = [index for index, row in enumerate(rows) if row.task.id in fired]
        if not refused:
            return real(rows, atomic, *args, **kwargs)
        if atomic and not kwargs.get("fired_ok", False):
            first = rows[refused[0]].task.id
            raise AlreadyFiredError(first, fired[first], refused[0])
        others = [row for row in rows if row.task.id not in fired]
        answers = iter(real(others, atomic, *args, **kwargs) if others else [])
        return [
            Inserted(InsertOutcome.ALREADY_FIRED, row.task, fired_ms=fired[row.task.id])
            if row.task.id in fired
            else next(answers)
            for row in rows
        ]

    store.insert = insert
