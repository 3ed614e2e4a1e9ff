"""The engine: one thread per job, joined by bounded in-memory stages.

    Writes: plan --group commit--> store         (rows written unarmed: R6)
    ShardKeeper --leases--> ShardTable           (R1, R2: docs/design/ownership.md)
    Armer --arms under the leases--> Scheduler heap --fires (R4)--> SendBuffer
    SendBuffer --publisher--> broker --confirms--> Confirmer --deletes (id, rev)

:class:`~triggerhook.engine.writes.Writes` is the write path: every insert,
reschedule and cancel the façade is asked for (one group committer per kind).
A row enters memory only when the owner of its shard arms it.

Ownership: the shard table is written by the keeper's thread alone; each heap
belongs to the thread named with it and is touched by other threads only
through its locked ``push_*`` methods; the
:class:`~triggerhook.engine.inventory.Inventory` counts every task held in
memory, from arming until its row is deleted or its copy dropped.

Where it sits (imports point down; tests/unit/test_layers.py checks it):

    app                    the façade over the engine (wiring builds both, from Settings)
    engine/                store/  amqp/  metrics/    one layer: none imports another
    interfaces.py          the ports between them: TaskStore, EventPublisher,
                           FiredSink / FiredSource (the send buffer, both ends),
                           ConfirmSink, RetryHandler, EngineStats
    domain/                (settings.py beside it: only wiring.py and the CLI read it)
    runtime/               Worker (every thread's base), counters, metric points
    errors.py, retry.py

So the publisher (amqp/) is a runtime Worker that takes from a FiredSource and
hands confirms to a ConfirmSink; the store implements TaskStore; the metrics
collector reads the engine's counters and EngineStats. None of them imports
the engine, and the engine imports none of them.
"""
