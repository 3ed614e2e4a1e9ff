"""The engine: one thread per job, joined by bounded in-memory stages.

    preloader --claims--> Armer.pending --arms--> Scheduler.armed --fires-->
    SendBuffer --publisher--> broker --confirms--> Confirmer --deletes rows

Ownership: each heap belongs to the thread named with it and is touched by
other threads only through its locked ``push_*`` methods; the
:class:`~triggerhook.engine.inventory.Inventory` counts every task held in
memory, from claim until its row is deleted or released.
"""
