"""The ground floor: what every layer uses, importing nothing above it.

* worker: :class:`~triggerhook.runtime.worker.Worker`, the base of every
  background thread (engine stages, publisher, metrics reporter), and the
  ``FailureHandler`` they report to.
* counters: lock-cheap tallies and samples the threads keep for metrics.
* points: one metrics point, the unit every metrics sink accepts.

Only the standard library, :mod:`triggerhook.errors` and :mod:`triggerhook.retry`
are imported here (tests/unit/test_layers.py checks it).
"""
