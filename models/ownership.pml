/*
 * Ownership v2 (docs/design/ownership.md), one shard and one task id.
 *
 * Two instances own the shard in turn (fenced by its epoch), arm the task
 * (rule R3), publish it (R4), delete it by revision after the confirm (R5),
 * or get it back from the broker (R8); a client creates, reschedules and
 * cancels it (R6, R7), and replaces it by a create with on_conflict=replace
 * (R6r: a new incarnation in place of an unarmed row); leases lapse at any
 * moment (a pause or an outage), and one instance may crash for good. Each
 * atomic block is one transaction (or one step of one thread); a pause is
 * any interleaving.
 *
 * Mutations, each a rule broken on purpose, which the checker must catch
 * (tests/model/test_ownership_model.py): -DDELETE_BY_ID (v1's delete),
 * -DUNARM_INHERITED (R8 unarms a row armed in an earlier epoch),
 * -DUNFENCED_REWRITE (R8 without the epoch check), -DCANCEL_ARMED (R7
 * ignores the armed state), -DREPLACE_ARMED (R6r ignores the armed state:
 * an armed row is replaced, and unarmed); and, for the liveness property,
 * -DNO_RENEW (a lapsed lease is never renewed, though nobody took the shard),
 * -DFORGET_UNANSWERED (an arming pass whose answer was lost after it
 * committed is forgotten: its rows stay armed in no one's memory).
 *
 * R8p (docs/design/flow-control.md, section 3a; -DMAX_POSTPONE=1): a copy
 * the rate limit holds back past the arming horizon leaves memory and its
 * row is postponed by R8's transaction, without a failed attempt. Its mutations:
 * -DPOSTPONE_INHERITED (a row armed in an earlier epoch is postponed too:
 * unarmed) and -DPOSTPONE_KEEPS_COPY (the copy goes back into memory
 * whatever the store answered, not only on INHERITED).
 *
 * With -DSERIES the task is a recurring series (docs/design/ownership.md,
 * R5s): the confirm of an occurrence rewrites the row to the next one
 * (unarmed, a new revision, in the same step that removes the confirmed
 * one) until the series ends after MAX_OCC occurrences; a cancel of an armed
 * occurrence is too late for it but stops the series. Its mutations:
 * -DADVANCE_BY_ID (the advance does not check the revision) and
 * -DSTOP_IGNORED (the advance ignores a stop).
 */

#define NI 2
#define NONE 255
/* The bounds (each can be given with -D): */
#ifndef MAX_OPS
#define MAX_OPS 4        /* client operations */
#endif
#ifndef MAX_RETURNS
#define MAX_RETURNS 2    /* events the broker gives back */
#endif
#ifndef MAX_EXPIRE
#define MAX_EXPIRE 2     /* lapses of a live owner's lease */
#endif
#ifndef MAX_RELEASE
#define MAX_RELEASE 1    /* graceful releases */
#endif
#ifndef MAX_LOST
#define MAX_LOST 1       /* arming passes whose answer is lost after the commit */
#endif
#ifndef MAX_REPLACE
#define MAX_REPLACE 1    /* replaces (R6r): see the client */
#endif
#ifndef MAX_POSTPONE
#define MAX_POSTPONE 0   /* copies held back by a rate limit and postponed (R8p):
                            its checks give 1 (and MAX_RETURNS=1: see the step) */
#endif
#ifndef MAX_OCC
#define MAX_OCC 3        /* occurrences of a series */
#endif
#ifdef SERIES
#define MAXREV 12        /* revisions 1 .. 11 (0: none) */
#else
#define MAXREV 8         /* revisions 1 .. 7 (0: none) */
#endif
#define MAXINC 6         /* incarnations 1 .. 5 */
#define MAXEPOCH 8

/* th_shards, the one shard row */
byte owner = NONE;
byte epoch = 0;
bool lease_valid = false;

/* th_tasks, the one id: with one row, the arm watermark and generation
   reduce to "armed", and the took frontier to the epoch that armed it */
bool exists = false;
byte rev = 0;
bool armed = false;
byte armed_epoch = 0;
byte occ = 0;             /* the occurrence the row stands for (a series) */
bool stop = false;        /* a cancel came too late for it: the series ends after it */

/* history, for the properties */
byte nrev = 0;
byte ninc = 0;
byte inc_of[MAXREV];
bool cancelled[MAXINC];   /* a cancel of the incarnation answered CANCELLED */
bool replaced[MAXREV];    /* a reschedule of the revision answered RESCHEDULED */
bool published[MAXREV];
byte occ_of[MAXREV];      /* the occurrence each revision stood for */
byte stop_after = 0;      /* the last occurrence a stop lets fire (0: no stop) */
byte epoch_owner[MAXEPOCH];
bool crashed[NI];
byte crashes = 0;
byte expiries = 0;
byte returns = 0;
byte releases = 0;
byte lost = 0;
byte replaces = 0;
byte postpones = 0;

inline new_rev(incarnation) {
    nrev++;
    inc_of[nrev] = incarnation;
    occ_of[nrev] = occ;
    rev = nrev
}

proctype Instance(byte me) {
    byte my_epoch = 0;  /* the epoch it believes it owns; 0: none */
    byte held = 0;      /* the armed copy in memory (its revision) */
    byte checked = 0;   /* held, and the lease checked: about to publish */
    byte sent = 0;      /* published, waiting for the broker's answer */
    byte postponing = 0;  /* out of memory, its postponement being written (R8p) */
    bool unanswered = false;  /* a pass whose commit's answer was lost */
end:
    do
    /* R2: acquire a free or expired shard; the epoch grows */
    :: atomic { my_epoch == 0 && (owner == NONE || !lease_valid) && epoch < MAXEPOCH - 1 ->
         owner = me; epoch++; my_epoch = epoch; lease_valid = true;
         assert(epoch_owner[epoch] == NONE);  /* I3 */
         epoch_owner[epoch] = me }

    /* R2: renew, fenced by the epoch: works on a lapsed lease as long as
       nobody acquired the shard meanwhile */
#ifndef NO_RENEW
    :: atomic { my_epoch != 0 && owner == me && epoch == my_epoch && !lease_valid ->
         lease_valid = true }
#endif

    /* R3: an arming pass, fenced by the epoch (under the shard row's lock).
       Only the passes that change something are modelled: a pass that finds
       nothing to do changes no state (and Spin's fairness is per process,
       so an endless run of no-op passes would hide the process's other
       steps). A row armed in this epoch is below this owner's watermark:
       no later pass of the epoch reads it again; one armed in an earlier
       epoch is inherited. */
    :: atomic { my_epoch != 0 && owner == me && epoch == my_epoch && exists &&
                held == 0 && !unanswered &&
                (!armed || (armed_epoch != my_epoch && sent != rev && postponing != rev)) ->
         if
         :: !armed -> armed = true; armed_epoch = my_epoch
         :: else -> skip  /* inherited, or its retry: fired (again) */
         fi;
         held = rev }
    /* R3, its answer lost: the pass committed, the instance saw an error and
       holds nothing */
    :: atomic { my_epoch != 0 && owner == me && epoch == my_epoch && exists &&
                held == 0 && !unanswered && !armed && lost < MAX_LOST ->
         lost++; armed = true; armed_epoch = my_epoch; unanswered = true }
    /* R3a: the next pass first takes what the unanswered one armed: the rows
       it read that are armed now, in a shard still held in the same epoch */
    :: atomic { unanswered && my_epoch != 0 && owner == me && epoch == my_epoch ->
         unanswered = false;
#ifndef FORGET_UNANSWERED
         if
         :: exists && armed && armed_epoch == my_epoch && held == 0 -> held = rev
         :: else -> skip
         fi
#endif
       }
    :: atomic { my_epoch != 0 && !(owner == me && epoch == my_epoch) ->
         /* lost the shard: drop it (a publish already decided goes on) */
         my_epoch = 0; unanswered = false;
         if
         :: checked == 0 -> held = 0
         :: else -> skip
         fi }

    /* R4: check the lease (a sound clock estimate: it reads the truth), then
       publish; a pause can fall in between */
    :: atomic { held != 0 && checked == 0 && my_epoch != 0 && owner == me &&
                epoch == my_epoch && lease_valid -> checked = held }
    :: atomic { checked != 0 && sent == 0 ->
#ifdef SERIES
         /* I1s: after CANCELLED, only a duplicate of an occurrence published
            before (a stale copy); a series outlives each revision */
         assert(!cancelled[inc_of[checked]] || published[checked]);
#else
         assert(!cancelled[inc_of[checked]]);  /* I1: not after CANCELLED */
#endif
         assert(!replaced[checked]);           /* I1: not after RESCHEDULED */
         /* S2: no occurrence of a stopped series after the one it stopped at */
         assert(stop_after == 0 || inc_of[checked] != ninc || occ_of[checked] <= stop_after);
         published[checked] = true;
         sent = checked; held = 0; checked = 0 }

    /* R5: confirmed; delete by revision, not fenced. R5s (a series): the
       same step writes the next occurrence, unarmed, at a new revision, or
       ends the series (its last occurrence, or stopped) */
    :: atomic { sent != 0 ->
         if
#if defined(DELETE_BY_ID) || defined(ADVANCE_BY_ID)
         :: exists ->
#else
         :: exists && rev == sent ->
#endif
              assert(published[rev]);  /* I2; for a series S1: no occurrence skipped */
#ifdef SERIES
              if
#ifdef STOP_IGNORED
              :: occ < MAX_OCC && nrev < MAXREV - 1 ->
#else
              :: occ < MAX_OCC && !stop && nrev < MAXREV - 1 ->
#endif
                   occ++; new_rev(inc_of[rev]); armed = false
              :: else -> exists = false; armed = false
              fi
#else
              exists = false; armed = false
#endif
         :: else -> skip
         fi;
         sent = 0 }

    /* R8: the broker gave the event back */
    :: atomic { sent != 0 && returns < MAX_RETURNS ->
         returns++;
         if
#ifdef UNFENCED_REWRITE
         :: exists && rev == sent && armed ->
#else
         :: my_epoch != 0 && owner == me && epoch == my_epoch &&
            exists && rev == sent && armed ->
#endif
              if
#ifdef UNARM_INHERITED
              :: nrev < MAXREV - 1 ->
#else
              :: armed_epoch == my_epoch && nrev < MAXREV - 1 ->
#endif
                   /* armed in this epoch: rewritten unarmed, retried later */
                   new_rev(inc_of[rev]); armed = false
              :: else ->
                   /* inherited: stays armed, retried from memory */
                   if
                   :: held == 0 -> held = sent
                   :: else -> skip
                   fi
              fi
         :: else -> skip  /* fenced, or the row changed: nothing */
         fi;
         sent = 0 }

    /* R8p: the rate limit holds the copy back past the arming horizon (its
       lease checked first, as R4's screen does). The copy leaves memory
       first (it cannot fire meanwhile), and the confirmer writes the
       postponement: R8's transaction, fenced by the epoch, without a failed
       attempt (the model counts none). Armed in this epoch: rewritten
       unarmed at a new revision (R3 arms it again at its token's instant);
       inherited: stays armed, and the copy goes back into memory; the row
       or the lease gone: nothing. An answer lost after the commit is a
       retry that finds another revision (GONE): as DEFERRED, nothing in
       memory, so it is not a step of its own. Off by default (MAX_POSTPONE
       0): its checks give it 1 and R8's returns 1 instead of 2 (110 million
       states); with both whole the search passed 220 million, unfinished. */
    :: atomic { held != 0 && checked == 0 && postponing == 0 && postpones < MAX_POSTPONE &&
                my_epoch != 0 && owner == me && epoch == my_epoch && lease_valid ->
         postpones++; postponing = held; held = 0 }
    :: atomic { postponing != 0 ->
         if
         :: my_epoch != 0 && owner == me && epoch == my_epoch &&
            exists && rev == postponing && armed ->
              if
#ifdef POSTPONE_INHERITED
              :: nrev < MAXREV - 1 ->
#else
              :: armed_epoch == my_epoch && nrev < MAXREV - 1 ->
#endif
                   new_rev(inc_of[rev]); armed = false;  /* DEFERRED */
#ifdef POSTPONE_KEEPS_COPY
                   if
                   :: held == 0 -> held = postponing
                   :: else -> skip
                   fi
#else
                   skip
#endif
              :: else ->  /* INHERITED: back into memory, as R8's */
                   if
                   :: held == 0 -> held = postponing
                   :: else -> skip
                   fi
              fi
         :: else -> skip  /* GONE */
         fi;
         postponing = 0 }

    /* R2: graceful release, after draining */
    :: atomic { my_epoch != 0 && owner == me && epoch == my_epoch &&
                held == 0 && checked == 0 && sent == 0 && postponing == 0 &&
                releases < MAX_RELEASE ->
         releases++; owner = NONE; lease_valid = false; my_epoch = 0 }

    /* one instance may crash, for good */
    :: atomic { crashes == 0 -> crashes++; crashed[me] = true; break }
    od
}

/* Leases lapse: a live owner's a bounded number of times (so that progress
   is possible), a crashed owner's always */
active proctype Time() {
end:
    do
    :: atomic { lease_valid && owner != NONE && (crashed[owner] || expiries < MAX_EXPIRE) ->
         if
         :: !crashed[owner] -> expiries++
         :: else -> skip
         fi;
         lease_valid = false }
    od
}

/* R6, R6r, R7: a client of any instance (they lock the shard row in shared
   mode: each is atomic with respect to arming) */
active proctype Client() {
    byte ops = 0;
end:
    do
    :: ops < MAX_OPS ->
         ops++;
         if
         :: atomic { !exists && ninc < MAXINC - 1 && nrev < MAXREV - 1 ->  /* create */
              ninc++; occ = 1; stop = false; stop_after = 0;
              new_rev(ninc); exists = true; armed = false }
#ifdef CANCEL_ARMED
         :: atomic { exists ->
#else
         :: atomic { exists && !armed ->
#endif
              cancelled[inc_of[rev]] = true; exists = false; armed = false }  /* CANCELLED */
         :: atomic { exists && nrev < MAXREV - 1 && !armed ->  /* RESCHEDULED */
              replaced[rev] = true; new_rev(inc_of[rev]) }
         /* R6r, a create with on_conflict=replace of a row with other content:
            R7's delete of the unarmed row and R6's insert, in one transaction
            (REPLACED). A new incarnation (a series starts over at occurrence
            1, no stop), unarmed; the old revision must never publish after
            the answer (R4 asserts it). An armed row answers TOO_LATE and
            nothing is written (the else below).
            At most MAX_REPLACE per run (1): one replace nearly doubles the
            search (the safety check, 29 million states without it, has 52
            million with one, 59 unbounded). The liveness checks leave it out
            (MAX_REPLACE=0): without SERIES the instances cannot tell it from
            a reschedule (both leave the row unarmed at a new revision, occ
            and stop as they were; ninc never reaches its budget in MAX_OPS
            operations), so I4 with reschedules covers it; with SERIES it
            restarts occ and clears stop. I4 holds with it too, checked once
            with and once without SERIES: 96 million states and 8 GB (54
            million and 3.8 GB without it), a series' 48 million (26). */
#ifdef REPLACE_ARMED
         :: atomic { exists && replaces < MAX_REPLACE &&
                     ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
#else
         :: atomic { exists && !armed && replaces < MAX_REPLACE &&
                     ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
#endif
              replaces++; replaced[rev] = true;
              ninc++; occ = 1; stop = false; stop_after = 0;
              new_rev(ninc); armed = false }  /* REPLACED */
#ifdef SERIES
         :: atomic { exists && armed && !stop ->  /* TOO_LATE for this occurrence: stop after it */
              stop = true; stop_after = occ }
#endif
         :: else -> skip  /* too late, not found, or a conflict */
         fi
    :: ops == MAX_OPS -> break
    od
}

init {
    byte i;
    atomic {
        for (i : 0 .. MAXEPOCH - 1) { epoch_owner[i] = NONE }
        run Instance(0);
        run Instance(1)
    }
}

/* I4: while some instance lives, the task is eventually fired and deleted,
   or cancelled, and the row stays gone (the client stops after MAX_OPS) */
ltl settles { <>[] !exists }
