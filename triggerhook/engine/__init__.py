"""The engine: one thread per job, joined by bounded in-memory stages.

    Writes: plan --group commit--> store --adopt--+  (rows claimed on write)
                                                  v
    preloader --claims--> hold: Armer.pending or Scheduler.armed (due soon)
    Armer.pending --arms--> Scheduler.armed --fires--> SendBuffer
    SendBuffer --publisher--> broker --confirms--> Confirmer --deletes rows

:class:`~triggerhook.engine.writes.Writes` is the write path: every insert,
reschedule and cancel the façade is asked for (one group committer per kind);
rows it claims on insert enter memory through the preloader's ``hold``.

Ownership: each heap belongs to the thread named with it and is touched by
other threads only through its locked ``push_*`` methods; the
:class:`~triggerhook.engine.inventory.Inventory` counts every task held in
memory, from claim until its row is deleted or released.

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
