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
 *
 * With -DDEDUP (docs/design/flow-control.md, section 2; off by default, so
 * the other checks' state spaces are unchanged) an incarnation may have a
 * dedup window, the client's choice at each create (windowed[inc]). R5d:
 * R5's delete of a row with a window and the insert of its th_fired record
 * (rec_live, rec_inc) are one step; a series writes none (R5s). A record
 * expires MAX_EXPIRE_REC times (1; the sweep is the same here). R6's locked
 * path is one step: its insert goes in only once the old row is gone (R5d
 * committed), and its locking read then finds a live record: ALREADY_FIRED,
 * nothing written. The fast path (a task without a window, no read of
 * th_fired) runs only while th_meta's flag is unset; the first insert of a
 * task with a window sets it, in its step. D1, at the publish: no
 * incarnation fires while an earlier one's record lives (a copy of the one
 * that wrote it, or of an older one, is a duplicate: at-least-once). Its
 * mutations (tests/model/test_dedup_model.py): -DCHECK_BEFORE_INSERT (the
 * check is a step of its own before the insert: it reads no record while
 * R5d holds the old row, and the insert goes in once R5d commits),
 * -DFAST_PATH_UNFLAGGED (the fast path ignores the flag) and -DRECORD_APART
 * (the record is written in a step after the delete's). Its checks take
 * MAX_OPS=3 and MAX_REPLACE=0: safety 27 million states (1.8 GB); liveness,
 * with MAX_RETURNS=1 too, 18 million (1.8 GB; 48 million and 3.5 GB with two
 * returns). Checked once: with MAX_OPS=4 safety has 148 million (11 GB, 10
 * minutes); with the replace (MAX_REPLACE=1), 48 million (3.6 GB).
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
#ifndef MAX_EXPIRE_REC
#define MAX_EXPIRE_REC 1 /* expiries of a dedup record (DEDUP) */
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

#ifdef DEDUP
/* th_fired, the id's record (a record of an earlier incarnation, expired but
   not swept yet, is overwritten: the sweep is the expiry here), and th_meta's
   flag: a task with a window was written */
bool windowed[MAXINC];    /* the incarnation has a dedup window */
bool rec_live = false;    /* a record, not expired */
byte rec_inc = 0;         /* the incarnation that wrote it (0: none) */
bool dedup_flag = false;
byte rec_expiries = 0;
#endif

inline new_rev(incarnation) {
    nrev++;
    inc_of[nrev] = incarnation;
    occ_of[nrev] = occ;
    rev = nrev
}

#ifdef DEDUP
/* R6 (and R6r) with DEDUP: the new incarnation has a window or not, the
   client's choice; the insert of one with a window sets th_meta's flag, in
   its transaction */
inline choose_window() {
    if
    :: windowed[ninc] = true; dedup_flag = true
    :: skip
    fi
}

/* R5d: R5's delete and, for a row with a window, the insert of its record,
   in one transaction (RECORD_APART: the record in a step of its own, after) */
inline record_fired() {
    if
#ifdef RECORD_APART
    :: windowed[inc_of[rev]] -> recording = inc_of[rev]
#else
    :: windowed[inc_of[rev]] -> rec_live = true; rec_inc = inc_of[rev]
#endif
    :: else -> skip
    fi
}
#endif

proctype Instance(byte me) {
    byte my_epoch = 0;  /* the epoch it believes it owns; 0: none */
    byte held = 0;      /* the armed copy in memory (its revision) */
    byte checked = 0;   /* held, and the lease checked: about to publish */
    byte sent = 0;      /* published, waiting for the broker's answer */
    byte postponing = 0;  /* out of memory, its postponement being written (R8p) */
    bool unanswered = false;  /* a pass whose commit's answer was lost */
#ifdef RECORD_APART
    byte recording = 0;  /* deleted, its record not written yet (its incarnation) */
#endif
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
#ifdef DEDUP
         /* D1: no incarnation fires inside the window of an earlier one's
            fire (its live record). A copy of the incarnation that wrote the
            record, or of an older one (a stale duplicate: R4's pause), is
            at-least-once delivery, not a second create that fired */
         assert(!rec_live || inc_of[checked] <= rec_inc);
#endif
         published[checked] = true;
         sent = checked; held = 0; checked = 0 }

    /* R5: confirmed; delete by revision, not fenced. R5s (a series): the
       same step writes the next occurrence, unarmed, at a new revision, or
       ends the series (its last occurrence, or stopped). R5d (DEDUP): the
       same step writes the record of a row with a window */
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
              :: else -> exists = false; armed = false  /* no record (DEDUP): a series writes none */
              fi
#else
              exists = false; armed = false
#ifdef DEDUP
              ; record_fired()
#endif
#endif
         :: else -> skip
         fi;
         sent = 0 }

#ifdef RECORD_APART
    /* broken on purpose: R5d's record written after its delete committed */
    :: atomic { recording != 0 -> rec_live = true; rec_inc = recording; recording = 0 }
#endif

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
#ifdef DEDUP
    /* a record expires (or the sweep deletes it: the same here), a bounded
       number of times */
    :: atomic { rec_live && rec_expiries < MAX_EXPIRE_REC ->
         rec_expiries++; rec_live = false; rec_inc = 0 }
#endif
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
#ifndef DEDUP
         :: atomic { !exists && ninc < MAXINC - 1 && nrev < MAXREV - 1 ->  /* create */
              ninc++; occ = 1; stop = false; stop_after = 0;
              new_rev(ninc); exists = true; armed = false }
#else
         /* R6 with DEDUP, the locked path: the insert, then a locking read
            of th_fired, in one transaction. The insert goes in only once the
            old row is gone (a duplicate key waits on R5d's lock, or fails: the
            else below), so R5d has committed and its record is visible: a
            live one answers ALREADY_FIRED, and nothing is written */
#ifndef CHECK_BEFORE_INSERT
         :: atomic { !exists && ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
              if
              :: rec_live -> skip  /* ALREADY_FIRED */
              :: else ->
                   ninc++; occ = 1; stop = false; stop_after = 0;
                   new_rev(ninc); exists = true; armed = false; choose_window()
              fi }
#else
         /* broken on purpose: the check before the insert, as a step of its
            own; it can read while R5d holds the old row, and the insert
            then goes in once that commits */
         :: !rec_live ->
              atomic {
                if
                :: !exists && ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
                     ninc++; occ = 1; stop = false; stop_after = 0;
                     new_rev(ninc); exists = true; armed = false; choose_window()
                :: else -> skip  /* a conflict */
                fi }
#endif
         /* the fast path: one statement (INSERT ... SELECT) that does not
            read th_fired, for a task without a window, and only while
            th_meta's flag is unset (the statement joins it) */
#ifdef FAST_PATH_UNFLAGGED
         :: atomic { !exists && ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
#else
         :: atomic { !exists && !dedup_flag && ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
#endif
              ninc++; occ = 1; stop = false; stop_after = 0;
              new_rev(ninc); exists = true; armed = false }
#endif
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
              new_rev(ninc); armed = false
#ifdef DEDUP
              /* no record is live while the row exists (R5d writes one with
                 the delete, and a create waits for it to expire): R6's check
                 would find none */
              ; choose_window()
#endif
            }  /* REPLACED */
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
