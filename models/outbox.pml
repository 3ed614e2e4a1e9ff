/*
 * The outbox (docs/design/flow-control.md, section 6): schedule_in inside
 * the caller's transaction, and R6o, the mover, for one task id X.
 *
 * NC callers (business transactions) each insert one th_outbox row for X
 * in their own open transaction (invisible to every other session, and
 * locked by its insert), may do other work (any interleaving), then COMMIT
 * (the row becomes visible) or ROLL BACK (a rollback, a deadlock: the row is
 * gone). NM movers (R6o: an engine thread on any instance) each run one
 * transaction at a time in two steps with any pause between:
 *   1. SELECT ... FROM th_outbox ... FOR UPDATE SKIP LOCKED (READ COMMITTED):
 *      committed rows not locked by another mover's open transaction; it
 *      takes some of them (LIMIT) and locks them;
 *   2. R6's insert of each (on_conflict=error: the row of X is created, a new
 *      incarnation, if X is not stored; otherwise EXISTS and nothing is
 *      written), the delete of those outbox rows, COMMIT.
 * Between them a mover may abort (R10's timeout, a deadlock, a lost
 * connection: its locks released, nothing written; it takes rows again
 * later), and one mover may crash for good (its session dies with it:
 * its locks released too). The engine (R3, R4, R5) is one step: a stored
 * row of X fires and is deleted after its confirm, so that X can be created
 * again by a later move. Each atomic block is one transaction (or one step
 * of one); a pause is any interleaving.
 *
 * Invariants (asserts):
 *   I1o  no task row (so no fire) but from an outbox row whose caller
 *        committed: asserted when a move creates the row;
 *   I2o  each outbox row is moved at most once (so never two incarnations
 *        from one row): asserted at every move, created or EXISTS.
 * Liveness (ltl empties): the outbox empties for good (every committed row
 * is moved) while a mover lives. All loops are bounded (callers decide
 * once, aborts MAX_ABORTS, creates by the rows), so no fairness is assumed.
 *
 * Mutations, each a rule broken on purpose, which the checker must catch
 * (tests/model/test_outbox_model.py):
 *   -DREAD_UNCOMMITTED  step 1 sees rows of open callers: a task row is
 *                       created before (or without) its caller's commit (I1o);
 *   -DDELETE_APART      the outbox rows are deleted in a transaction of their
 *                       own after the insert's commit (step 3): in the pause
 *                       between (or after a crash there) another mover moves
 *                       the row again (I2o);
 *   -DNO_LOCK           step 1 reads without locking (a plain SELECT): two
 *                       movers take the same row (I2o);
 *   -DKEEP_LOCKS        (liveness) a mover stopped for good keeps its row
 *                       locks: its session lives on (paused, or cut off),
 *                       and no R10 timeout ends its transaction (on MySQL
 *                       only wait_timeout does, 8 hours by default): SKIP
 *                       LOCKED skips those rows forever (the outbox never
 *                       empties).
 * SKIP LOCKED itself is not a safety rule (a plain FOR UPDATE would wait for
 * the other mover's commit, then find the rows gone), so it is not mutated.
 *
 * States (Spin 6.5.2, -DCOLLAPSE, NC=3, NM=2, MAX_ABORTS=1): safety 9,993
 * states, liveness 18,738 (37,453 visited); each under a second and about
 * 180 MB (Spin's fixed hash table and depth-limit stack, not the states).
 * With NC=2: 937 and 1,666. Each mutation is caught within 3,300 states.
 */

#define NONE 255
/* The bounds (each can be given with -D): */
#ifndef NC
#define NC 3             /* callers: one outbox row each, all for the id X */
#endif
#ifndef NM
#define NM 2             /* movers */
#endif
#ifndef MAX_ABORTS
#define MAX_ABORTS 1     /* movers' transactions aborted between steps 1 and 2 */
#endif
#define MAXINC (NC + 2)  /* incarnations 1 .. NC (+1 in a mutation, before its assert) */

/* th_outbox: row c is caller c's */
#define ABSENT 0         /* not inserted yet, or rolled back */
#define OPEN 1           /* inserted by its caller's open transaction */
#define VISIBLE 2        /* committed */
#define DELETED 3        /* deleted by a mover's commit */
byte row[NC];
byte lock[NC];           /* the mover whose open transaction locked it (NONE) */
byte nrows = 0;          /* rows in th_outbox, open or committed */

/* th_tasks: the row of the id X */
bool exists = false;
byte task_inc = 0;       /* its incarnation (0: none) */

/* history, for the properties */
bool committed[NC];      /* caller c committed */
byte moved[NC];          /* times row c was moved (created, or EXISTS) */
byte ninc = 0;
byte src_of[MAXINC];     /* the outbox row an incarnation was moved from */
byte aborts = 0;
byte crashes = 0;

/* what step 1 finds: committed rows (READ COMMITTED: an open caller's row
   is invisible, and SKIP LOCKED skips it too), not locked by a mover */
#ifdef READ_UNCOMMITTED
#define seen(c) ((row[c] == VISIBLE || row[c] == OPEN) && lock[c] == NONE)
#else
#define seen(c) (row[c] == VISIBLE && lock[c] == NONE)
#endif

#if NC > 2
#define any_seen (seen(0) || seen(1) || seen(2))
#else
#define any_seen (seen(0) || seen(1))
#endif

#define has(set, c) (((set) >> (c)) & 1)

/* a mover's transaction ends without writing (abort, or a crash): the server
   releases its locks (R10, or the session's death) */
inline release(set) {
    for (c : 0 .. NC - 1) {
        if
        :: has(set, c) && lock[c] == me -> lock[c] = NONE
        :: else -> skip
        fi
    }
}

/* the delete of the moved rows (in step 2; with DELETE_APART, step 3) */
inline delete_rows(set) {
    for (c : 0 .. NC - 1) {
        if
        :: has(set, c) && row[c] == VISIBLE -> row[c] = DELETED; nrows--
        :: else -> skip  /* gone already (NO_LOCK), or still open (READ_UNCOMMITTED) */
        fi
    }
}

proctype Caller(byte me) {
    atomic { row[me] = OPEN; nrows++ }  /* BEGIN; ...; schedule_in: INSERT INTO th_outbox */
    /* the rest of the business transaction: any interleaving */
    if
    :: atomic { row[me] = VISIBLE; committed[me] = true }  /* COMMIT */
    :: atomic { row[me] = ABSENT; nrows-- }                /* ROLLBACK, or a deadlock */
    fi
}

proctype Mover(byte me) {
    byte mine = 0;      /* the rows its open transaction read (and locked) */
    byte c;
#ifdef DELETE_APART
    byte moving = 0;    /* inserted and committed, their delete not yet run */
#endif
end:
    do
    /* step 1: SELECT ... FOR UPDATE SKIP LOCKED. It takes one row it finds,
       and any others it finds (LIMIT cuts the batch anywhere); a pass that
       finds nothing changes nothing and is not modelled */
#ifdef DELETE_APART
    :: atomic { mine == 0 && moving == 0 && any_seen ->
#else
    :: atomic { mine == 0 && any_seen ->
#endif
         if
         :: seen(0) -> mine = 1
         :: seen(1) -> mine = 2
#if NC > 2
         :: seen(2) -> mine = 4
#endif
         fi;
         for (c : 0 .. NC - 1) {
             if
             :: seen(c) && !has(mine, c) -> mine = mine | (1 << c)
             :: skip
             fi
         }
#ifndef NO_LOCK
         ;
         for (c : 0 .. NC - 1) {
             if
             :: has(mine, c) -> lock[c] = me
             :: else -> skip
             fi
         }
#endif
       }

    /* step 2: R6's insert of each row read (from the values it read), the
       delete of the outbox rows, COMMIT (which releases its locks) */
    :: atomic { mine != 0 ->
         for (c : 0 .. NC - 1) {
             if
             :: has(mine, c) ->
                  assert(moved[c] == 0);  /* I2o: one move per outbox row */
                  moved[c]++;
                  if
                  :: !exists ->  /* created: a new incarnation */
                       ninc++; src_of[ninc] = c; task_inc = ninc; exists = true;
                       assert(committed[src_of[task_inc]])  /* I1o: not without the commit */
                  :: else -> skip  /* EXISTS (on_conflict=error): nothing written */
                  fi;
                  if
                  :: lock[c] == me -> lock[c] = NONE
                  :: else -> skip
                  fi
             :: else -> skip
             fi
         }
#ifdef DELETE_APART
         ; moving = mine
#else
         ; delete_rows(mine)
#endif
         ; mine = 0 }

#ifdef DELETE_APART
    /* step 3, broken on purpose: the delete in a transaction of its own */
    :: atomic { moving != 0 -> delete_rows(moving); moving = 0 }
#endif

    /* an abort between the steps: nothing written, the locks released */
    :: atomic { mine != 0 && aborts < MAX_ABORTS ->
         aborts++; release(mine); mine = 0 }

    /* one mover may crash (or hang) for good, at any point */
    :: atomic { crashes == 0 ->
         crashes++;
#ifndef KEEP_LOCKS
         release(mine);
#endif
         break }
    od
}

/* R3, R4, R5 in one step: the stored row of X fires, and is deleted after
   its confirm */
active proctype Engine() {
end:
    do
    :: atomic { exists -> exists = false; task_inc = 0 }
    od
}

init {
    byte i;
    atomic {
        for (i : 0 .. NC - 1) { lock[i] = NONE }
        for (i : 0 .. NC - 1) { run Caller(i) }
        for (i : 0 .. NM - 1) { run Mover(i) }
    }
}

/* every committed outbox row is eventually moved, and every open one
   decided: the outbox empties for good (the callers run once) */
ltl empties { <>[] (nrows == 0) }
