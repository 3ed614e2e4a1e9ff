/*
 * Lanes (docs/design/flow-control.md, section 3b): one task id whose row may
 * be in either of two shards, its home shard s (lane 0) or s + N (lane 1,
 * for routing keys a rate limit names), each owned in turn by two instances.
 *
 * What lanes change, and only that, is modelled here; every rule of one
 * shard (R2 to R8, and R3a, R5s, R5d, R8p) holds per shard as it is and is
 * checked in models/ownership.pml. Here:
 * - the writer chooses the lane at each insert (its settings: a routing key
 *   a limit names goes to lane 1; instances may disagree);
 * - a write by id (R6's reschedule, R6r's replace, R7's cancel) does not know
 *   the lane from the id: it locks both candidate shard rows in shared mode,
 *   then the task row, so it is atomic with respect to the arming of the
 *   shard the row is in, whichever that is;
 * - a replace (R6r) whose routing key belongs to the other lane moves the
 *   row: the new incarnation is written in the other shard, unarmed there (its
 *   gen that shard's arm_gen, read under that shard row's lock), in the same
 *   transaction that removes the old row.
 * As in ownership.pml, with one row a shard's watermark and generation
 * reduce to "armed" (and the epoch of the shard that armed it).
 *
 * Mutations, each a rule broken on purpose, which the checker must catch
 * (tests/model/test_lanes_model.py):
 * -DLOCK_HOME_ONLY: a write by id locks only the home shard row; for a row in
 *   lane 1 its check of the armed state and its write are then two steps
 *   (it holds the task row's lock in between, which arming does not take),
 *   and a pass of the other shard can arm the row between them (I1);
 * -DMOVE_KEEPS_GEN: a replace across lanes keeps the row's generation: in
 *   the other shard it may already count as armed, by a pass that never read
 *   it, in no one's memory (I4: it never fires while its owner lives).
 */

#define NI 2
#define NS 2
#define NONE 255
#ifndef MAX_OPS
#define MAX_OPS 4        /* client operations */
#endif
#ifndef MAX_RETURNS
#define MAX_RETURNS 1    /* events the broker gives back */
#endif
#ifndef MAX_EXPIRE
#define MAX_EXPIRE 2     /* lapses of a live owner's lease, over both shards */
#endif
#ifndef MAX_RELEASE
#define MAX_RELEASE 1    /* graceful releases */
#endif
#ifndef MAX_REPLACE
#define MAX_REPLACE 2    /* replaces (R6r): each may move the row */
#endif
#define MAXREV 8
#define MAXINC 6
#define MAXEPOCH 7        /* epochs 1 .. 6 per shard */

/* th_shards: the id's two candidate shard rows */
byte owner[NS];
byte epoch[NS];
bool lease_valid[NS];

/* th_tasks: the id's one row (the primary key is the id, in either lane) */
bool exists = false;
byte lane = 0;            /* the shard the row is in */
byte rev = 0;
bool armed = false;       /* by its shard's marks */
byte armed_epoch = 0;     /* the epoch of its shard that armed it */
bool row_locked = false;  /* a client's transaction holds the task row (LOCK_HOME_ONLY) */

/* history, for the properties */
byte nrev = 0;
byte ninc = 0;
byte inc_of[MAXREV];
bool cancelled[MAXINC];
bool replaced[MAXREV];
bool published[MAXREV];
byte epoch_owner[NS * MAXEPOCH];
bool crashed[NI];
byte crashes = 0;
byte expiries = 0;
byte returns = 0;
byte releases = 0;
byte replaces = 0;

inline new_rev(incarnation) {
    nrev++;
    inc_of[nrev] = incarnation;
    rev = nrev
}

#define OWNS(s) (my_epoch[s] != 0 && owner[s] == me && epoch[s] == my_epoch[s])

/* The steps of one shard S, written out for each (a step that would do
   nothing is not a step: an endless run of them would hide the others) */
#define SHARD_STEPS(S) \
    /* R2: acquire a free or expired shard; its epoch grows */ \
    :: atomic { my_epoch[S] == 0 && (owner[S] == NONE || !lease_valid[S]) && \
                epoch[S] < MAXEPOCH - 1 -> \
         owner[S] = me; epoch[S]++; my_epoch[S] = epoch[S]; lease_valid[S] = true; \
         assert(epoch_owner[S * MAXEPOCH + epoch[S]] == NONE);  /* I3, per shard */ \
         epoch_owner[S * MAXEPOCH + epoch[S]] = me } \
    /* R2: renew a lapsed lease, fenced by the epoch */ \
    :: atomic { OWNS(S) && !lease_valid[S] -> lease_valid[S] = true } \
    /* lost the shard: its copy dropped (a publish already decided goes on) */ \
    :: atomic { my_epoch[S] != 0 && !(owner[S] == me && epoch[S] == my_epoch[S]) -> \
         my_epoch[S] = 0; \
         if \
         :: held != 0 && held_shard == S && checked == 0 -> held = 0 \
         :: else -> skip \
         fi } \
    /* R2: graceful release, after draining */ \
    :: atomic { OWNS(S) && held == 0 && checked == 0 && sent == 0 && releases < MAX_RELEASE -> \
         releases++; owner[S] = NONE; lease_valid[S] = false; my_epoch[S] = 0 }

proctype Instance(byte me) {
    byte my_epoch[NS];   /* per shard, the epoch it believes it owns; 0: none */
    byte held = 0;       /* the armed copy in memory (its revision) */
    byte held_shard = 0; /* the shard (lease) it was armed under */
    byte checked = 0;
    byte sent = 0;
    byte sent_shard = 0;
end:
    do
    SHARD_STEPS(0)
    SHARD_STEPS(1)

    /* R3: an arming pass of the shard the row is in, fenced by its epoch
       (the other shard's passes change nothing of this row) */
    :: atomic { exists && OWNS(lane) && held == 0 &&
                (!armed || (armed_epoch != my_epoch[lane] && sent != rev)) ->
         if
         :: !armed -> armed = true; armed_epoch = my_epoch[lane]
         :: else -> skip  /* inherited: fired (again) */
         fi;
         held = rev; held_shard = lane }

    /* R4: the lease of the copy's shard checked, then publish */
    :: atomic { held != 0 && checked == 0 && OWNS(held_shard) && lease_valid[held_shard] ->
         checked = held }
    :: atomic { checked != 0 && sent == 0 ->
         assert(!cancelled[inc_of[checked]]);  /* I1: not after CANCELLED */
         assert(!replaced[checked]);           /* I1: not after RESCHEDULED or REPLACED */
         published[checked] = true;
         sent = checked; sent_shard = held_shard; held = 0; checked = 0 }

    /* R5: delete by revision (it waits for a client's lock on the row) */
    :: atomic { sent != 0 && !row_locked ->
         if
         :: exists && rev == sent -> assert(published[rev]); exists = false; armed = false
         :: else -> skip
         fi;
         sent = 0 }

    /* R8: the event given back; rewritten unarmed if armed in this epoch of
       the copy's shard, fenced by it */
    :: atomic { sent != 0 && !row_locked && returns < MAX_RETURNS ->
         returns++;
         if
         :: OWNS(sent_shard) && exists && lane == sent_shard && rev == sent && armed ->
              if
              :: armed_epoch == my_epoch[sent_shard] && nrev < MAXREV - 1 ->
                   new_rev(inc_of[rev]); armed = false
              :: else ->
                   if
                   :: held == 0 -> held = sent; held_shard = sent_shard
                   :: else -> skip
                   fi
              fi
         :: else -> skip
         fi;
         sent = 0 }

    :: atomic { crashes == 0 -> crashes++; crashed[me] = true; break }
    od
}

/* Leases lapse: a live owner's a bounded number of times, a crashed owner's always */
#define LAPSE(S) \
    :: atomic { lease_valid[S] && owner[S] != NONE && (crashed[owner[S]] || expiries < MAX_EXPIRE) -> \
         if \
         :: !crashed[owner[S]] -> expiries++ \
         :: else -> skip \
         fi; \
         lease_valid[S] = false }

active proctype Time() {
end:
    do
    LAPSE(0)
    LAPSE(1)
    od
}

/* R6's insert in the lane the writer's settings choose */
inline create() {
    atomic { !exists && ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
         ninc++; new_rev(ninc); exists = true; armed = false;
         if
         :: lane = 0
         :: lane = 1
         fi }
}

/* R6r: the unarmed row replaced, in the lane of the new routing key */
inline replace() {
    atomic { exists && !armed && replaces < MAX_REPLACE &&
             ninc < MAXINC - 1 && nrev < MAXREV - 1 ->
         replaces++; replaced[rev] = true;
         ninc++; new_rev(ninc); armed = false;
         if
         :: skip  /* the same lane */
         :: lane = 1 - lane;
#ifdef MOVE_KEEPS_GEN
            /* broken on purpose: its old gen may lie below the new shard's
               arm_gen, under its watermark: armed by a pass of this epoch
               that never read it (as if in its owner's memory) */
            if
            :: epoch[lane] != 0 && owner[lane] != NONE ->
                 armed = true; armed_epoch = epoch[lane]
            :: skip
            fi
#else
            skip
#endif
         fi }
}

active proctype Client() {
    byte ops = 0;
#ifdef LOCK_HOME_ONLY
    byte seen = 0;
#endif
end:
    do
    :: ops < MAX_OPS ->
         ops++;
         if
         :: create()
         :: replace()
#ifndef LOCK_HOME_ONLY
         /* both candidate shard rows locked: atomic with either shard's arming */
         :: atomic { exists && !armed ->
              cancelled[inc_of[rev]] = true; exists = false; armed = false }  /* CANCELLED */
         :: atomic { exists && !armed && nrev < MAXREV - 1 ->
              replaced[rev] = true; new_rev(inc_of[rev]) }  /* RESCHEDULED */
#else
         /* broken on purpose: only the home shard row (lane 0) locked. In
            lane 0 the write is atomic as above; in lane 1 the check and the
            write are two steps, the task row locked in between */
         :: atomic { exists && !armed && lane == 0 ->
              cancelled[inc_of[rev]] = true; exists = false; armed = false }
         :: atomic { exists && !armed && lane == 0 && nrev < MAXREV - 1 ->
              replaced[rev] = true; new_rev(inc_of[rev]) }
         :: atomic { exists && !armed && lane == 1 -> row_locked = true; seen = rev };
            atomic { cancelled[inc_of[seen]] = true; exists = false; armed = false;
                     row_locked = false }
#endif
         :: else -> skip  /* too late, not found, or a conflict */
         fi
    :: ops == MAX_OPS -> break
    od
}

init {
    byte i;
    atomic {
        for (i : 0 .. NS * MAXEPOCH - 1) { epoch_owner[i] = NONE }
        for (i : 0 .. NS - 1) { owner[i] = NONE }
        run Instance(0);
        run Instance(1)
    }
}

/* I4: while some instance lives, the task is eventually fired and deleted,
   or cancelled, and the row stays gone */
ltl settles { <>[] !exists }
