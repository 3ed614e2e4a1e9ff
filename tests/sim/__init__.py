"""A fault-injection simulator that runs the real engine (issue 29).

The engine's promises — never early by the database's clock, never lost, a
task whose cancel answered CANCELLED never fires, a stale owner causes at
most a duplicate — judged by an oracle against seeded adversarial runs:
2-3 instances of the real engine (keeper, armer, scheduler, confirmer,
series advance, the database clock) stepped by one thread under simulated
time, over a real store (memory, SQLite or MariaDB) behind a fault layer,
with a publisher whose broker nacks, returns, drops the connection and
confirms late or out of order, and clients that create, cancel, reschedule,
bulk-cancel, create series (with each catch-up policy), and pause and resume
them.

* ``world``: the loop, its choices, simulated time; ``run(seed, config)``.
* ``instance``: one daemon's engine with its threads as steps.
* ``faults``: the store's fault layer (errors, lost answers, stalls, read-only).
* ``broker``: the publisher and the broker's answers.
* ``clients``: what clients do.
* ``oracle``: the invariants.
* ``backends``: the stores, and the oracle's view of their tables.

What runs for real elsewhere, and is left to chance here (the real-service
fault tests cover it: tests/integration/test_faults.py, test_db_cut.py,
test_stale_owner.py, the cluster tests):

* threads interleave only between store calls: a call is atomic, and a stall
  moves time on inside it without another instance acting meanwhile;
* writes go straight through the write path (``Writes.*.direct``), not
  through the group committers' threads; bulk cancels go without faults (their
  retries wait in real time); a restart retries ``register`` rather than
  running ``NameClaim``'s real-time watch;
* the publisher is simulated: pika's I/O loop, the HTTP API, the AMQP command
  consumer and the API processes are not in the simulation;
* the database's clock steps forward only, by default (a step back is a known
  limit: ``--db-clock-steps-back``).

Run it: ``scripts/sim`` (``--help``); the test command runs a CI-sized set
(``tests/sim/test_sim.py``). Every run prints its seed; ``scripts/sim --seed
N`` replays it and prints the trace of a failing one.
"""
