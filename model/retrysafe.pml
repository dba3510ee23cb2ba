/*
 * retrysafe's protocol for one effect step of one outcome, checked by SPIN.
 * What it covers, its bounds, properties and switches: docs/reliability.md
 * ("The protocol, model-checked"); run it with model/check.
 *
 * Ledger: SQLite (default: every worker on one host, a transaction's clock is
 * the clock of the process that runs it) or PostgreSQL (-DPG: workers on two
 * hosts, the server's clock). Every ledger transaction is one atomic block.
 *
 * Assumptions, each one switchable:
 *   -DKEYLESS       the provider ignores the step key: every call that lands
 *                   is an effect of its own (default: it applies one per key)
 *   -DWRONG_ABSENT  a lookup (or a human's resolve --absent) may answer absent
 *                   although a call with the key was made: it landed, or it is
 *                   still on its way (lookup lag)
 *   -DBREAK_WITHOUT_STOP  a human breaks the lease of a frozen holder without
 *                   stopping its process first (docs/concepts.md says: stop it)
 *   -DRESOLVE_BY_LEASE    a human resolves a running step whose lease expired
 *                   while its process still lives (the ledger allows it)
 * Mutants (each must give a counterexample): -DNO_CHECK_BEFORE_ACT,
 *   -DNO_LOOKUP_FIRST (model/decide.pml), -DNO_FENCE, -DNO_SAME_HOST_RULE.
 * The effect class: -DCLASS_PAYMENT (lookup first, approval) or the default
 *   message (lookup first, no approval); both retry a failed try and look up
 *   after an unclear one.
 */
#include "decide.pml"

#ifdef PG
#define NW 2                          /* worker 0 on host 0, worker 1 on host 1 */
#define HOST_OF(w) ((w) == 1 -> 1 : 0)
#define LNOW(w) (now)                 /* the server's clock */
#else
#define NW 2                          /* both on host 0 (a SQLite file is one host's) */
#define HOST_OF(w) (0)
#define LNOW(w) (now + skew[w])       /* the clock of the process that writes */
#endif
#define FIN NW                        /* the final, fresh run (a process slot of its own) */

#define TMAX   3                      /* ticks of real time */
#define LEASE  1                      /* lease, in ticks; renewed at every tick */
#define JUMP   2                      /* one worker's clock jumps this far ahead */
#define MAXATT 3                      /* the job's max_attempts */
#define CLAIMS 1                      /* runs each worker starts */

/* the class policy */
#ifdef CLASS_PAYMENT
#define P_APPROVAL 1
#else
#define P_APPROVAL 0
#endif
#define P_RETRY_FAILED 1
#define P_ON_UNKNOWN OU_LOOKUP
#define P_LOOKUP_FIRST 1
#define HAS_LOOKUP 1

/* outcome states */
#define O_PLANNED 0
#define O_RUNNING 1
#define O_DONE    2
#define O_BLOCKED 3
#define O_OTHER   4                   /* failed or unknown: a later run continues */

/* claim answers, write answers, lookup answers */
#define R_STARTED 0
#define R_BUSY    1
#define R_DONE    2
#define R_BLOCKED 3
#define W_OK      0
#define W_STALE   1
#define W_BUSY    2
#define L_FOUND     0
#define L_ABSENT    1
#define L_AMBIGUOUS 2
#define L_FAILED    3

/* --- the ledger ------------------------------------------------------------------ */
byte o_state = O_PLANNED, o_cause, o_fence, o_attempts;
byte o_cur;                          /* current attempt's worker + 1; 0: none */
byte lease_exp;
byte s_state = S_NONE, s_fence, s_runner, s_cause;
bit  s_tried, s_approved;

/* --- the world ------------------------------------------------------------------- */
byte now, skew[NW + 1];
bit  jumped;
bit  alive[NW + 1], frozen[NW + 1], killed[NW + 1];
byte myfence[NW + 1];
byte crashes = 1, freezes = 1, ended;
bit  human_done, final_run;
/* the external system */
byte inflight;                        /* calls sent whose effect has not landed */
byte effects;                         /* effects of the step key in the system */
byte calls;                           /* calls the protocol made with the key */
/* ghosts, for the properties */
bit  wrong_absent;                    /* an absent answer was given after a call */
bit  lease_taken[NW + 1];             /* superseded by another host, by lease expiry */
bit  zombie_called;                   /* such an attempt called the provider afterwards */

#ifdef NO_FENCE
#define FENCE_OK(w) (1)
#else
#define FENCE_OK(w) (o_cur == (w) + 1 && o_fence == myfence[w])
#endif
#ifdef NO_SAME_HOST_RULE
#define SAME_HOST(a, b) (0)
#else
#define SAME_HOST(a, b) (HOST_OF(a) == HOST_OF(b))
#endif

/* a crash, a freeze (resumed later by env) or nothing, at every point */
#define CP(w) \
  if \
  :: skip \
  :: atomic { !final_run && crashes > 0 -> crashes--; printf("MSC: w%d crashes\n", w) }; goto dead \
  :: atomic { !final_run && freezes > 0 -> freezes--; frozen[w] = 1; printf("MSC: w%d freezes\n", w) }; \
     (!frozen[w]); \
     if \
     :: killed[w] -> goto dead \
     :: else -> skip \
     fi \
  fi

/* trail text */
inline say_state(x)
{
  if
  :: x == S_NONE -> printf("none")
  :: x == S_PLANNED -> printf("planned")
  :: x == S_RUNNING -> printf("running")
  :: x == S_DONE -> printf("done")
  :: x == S_FAILED -> printf("failed")
  :: x == S_UNKNOWN -> printf("unknown")
  :: x == S_BLOCKED -> printf("blocked")
  fi
}

/* a write of an attempt: fenced and conditional on the state it expects */
#define STALE_NEVER_WRITES(w) \
  stale_write: assert(o_cur == (w) + 1 && o_fence == myfence[w])

inline move(w, expect, to, cause, res)
{
  atomic {
    if
    :: !FENCE_OK(w) -> res = W_STALE
    :: else ->
       if
       :: s_state != expect -> res = W_BUSY
       :: else ->
          STALE_NEVER_WRITES(w);
          assert(to != S_BLOCKED || cause != C_NONE);
          printf("MSC: w%d (fence %d) writes step ", w, myfence[w]); say_state(expect);
          printf(" -> "); say_state(to); printf("\n");
          s_state = to; s_fence = myfence[w]; s_cause = cause;
          if
          :: to == S_RUNNING -> s_runner = w; s_tried = 1
          :: else -> skip
          fi;
          res = W_OK
       fi
    fi
  }
}

/* claim() takes over the current attempt: its running step becomes unknown */
inline supersede()
{
  if
  :: s_state == S_RUNNING && s_fence == o_fence -> s_state = S_UNKNOWN
  :: else -> skip
  fi;
  o_cur = 0;
  if
  :: o_state == O_RUNNING -> o_state = O_OTHER
  :: else -> skip
  fi
}

inline claim(w, res)
{
  atomic {
    if
    :: o_state == O_DONE -> res = R_DONE
    :: else ->
       res = R_STARTED;
       if
       :: o_cur != 0 ->
          h = o_cur - 1;
          if
          /* the same-host rule: anything of the attempt alive here wins, whatever the clocks */
          :: SAME_HOST(h, w) && alive[h] -> res = R_BUSY
          :: SAME_HOST(h, w) && !alive[h] -> supersede()
          /* another host: the lease, by the ledger's clock */
          :: else ->
             if
             :: lease_exp > LNOW(w) -> res = R_BUSY
             :: else -> lease_taken[h] = (HOST_OF(h) != HOST_OF(w)); supersede()
             fi
          fi
       :: else -> skip
       fi;
       if
       :: res == R_BUSY -> skip
       :: o_state == O_BLOCKED -> res = R_BLOCKED
       :: o_state != O_BLOCKED && o_attempts >= MAXATT ->
          o_state = O_BLOCKED; o_cause = C_EXHAUSTED; res = R_BLOCKED
       :: else ->
          o_attempts++; o_fence++; o_cur = w + 1; myfence[w] = o_fence;
          lease_exp = LNOW(w) + LEASE; o_state = O_RUNNING; lease_taken[w] = 0
       fi
    fi;
    printf("MSC: w%d claims at its t=%d: ", w, LNOW(w));
    if
    :: res == R_STARTED -> printf("started, fence %d\n", o_fence)
    :: res == R_BUSY -> printf("busy\n")
    :: res == R_DONE -> printf("done\n")
    :: res == R_BLOCKED -> printf("blocked\n")
    fi;
    h = 0
  }
}

/* close-out: the outcome as the step says; a running step of this attempt is unknown */
inline finish(w)
{
  atomic {
    if
    :: FENCE_OK(w) ->
       STALE_NEVER_WRITES(w);
       if
       :: s_state == S_RUNNING && s_fence == myfence[w] -> s_state = S_UNKNOWN
       :: else -> skip
       fi;
       o_cur = 0;
       if
       :: s_state == S_DONE -> o_state = O_DONE
       :: s_state == S_BLOCKED -> o_state = O_BLOCKED; o_cause = C_STEP
       :: else -> o_state = O_OTHER
       fi
    :: else -> skip
    fi
  }
}

/* the external system answers a lookup by step key */
inline lookup(ans)
{
  atomic {
    if
    :: effects > 0 -> ans = L_FOUND
    :: effects == 0 && inflight == 0 -> ans = L_ABSENT
    :: ans = L_AMBIGUOUS
    :: !final_run -> ans = L_FAILED
#ifdef WRONG_ABSENT
    :: effects > 0 || inflight > 0 -> ans = L_ABSENT; wrong_absent = 1
#endif
    fi;
    if
    :: ans == L_FOUND -> printf("MSC: lookup answers found\n")
    :: ans == L_ABSENT -> printf("MSC: lookup answers absent\n")
    :: ans == L_AMBIGUOUS -> printf("MSC: lookup answers ambiguous\n")
    :: ans == L_FAILED -> printf("MSC: lookup fails (try later)\n")
    fi
  }
}

/* a call lands: one effect per key, or (KEYLESS) one per call */
inline land()
{
#ifdef KEYLESS
  effects++;
#else
  if
  :: effects == 0 -> effects++
  :: else -> skip
  fi;
#endif
  printf("MSC: a call lands: %d effect(s)\n", effects);
  once: assert(effects <= 1)
}

/* the holder of the step as the deciding process w sees it (Run._runner_gone) */
#define LV_OF(w) \
  (s_fence != myfence[w] -> LV_OTHER : \
   (s_runner == (w) -> LV_ALIVE : \
    (HOST_OF(s_runner) != HOST_OF(w) -> LV_REMOTE : (alive[s_runner] -> LV_ALIVE : LV_DEAD))))

proctype worker(byte w)
{
  byte res, rd, rtp, rap, rlv, act, why, ans, lu, n, h;
  alive[w] = 1;
  n = (w == FIN -> 1 : CLAIMS);
  do
  :: n == 0 -> break
  :: n > 0 ->
     n--;
     CP(w);
     claim(w, res);
     if
     :: res == R_STARTED -> skip
     :: res == R_BUSY -> assert(!final_run); goto next     /* "stuck": nothing of it runs */
     :: else -> break
     fi;
     CP(w);
     /* the fast path: a step this outcome never saw, when no lookup comes first */
     if
     :: !P_APPROVAL && !(LOOKUP_FIRST_ON && P_LOOKUP_FIRST && HAS_LOOKUP) ->
        move(w, S_NONE, S_RUNNING, C_NONE, res);
        if
        :: res == W_OK -> goto perform
        :: else -> skip
        fi;
        CP(w)
     :: else -> skip
     fi;
     lu = 0;
read:
     atomic {
       rd = s_state; rtp = s_tried; rap = s_approved;
       rlv = (s_state == S_RUNNING -> LV_OF(w) : LV_ALIVE);
       decide(rd, rtp, rlv, HAS_LOOKUP, lu, rap, P_RETRY_FAILED, P_ON_UNKNOWN, P_APPROVAL,
              P_LOOKUP_FIRST, act, why)
     };
     if
     :: act == A_SKIP || act == A_BUSY -> goto close
     :: act == A_BLOCKED ->
        if
        :: rd == S_BLOCKED -> skip
        :: else -> CP(w); move(w, rd, S_BLOCKED, why, res)
        fi;
        goto close
     :: act == A_LOOKUP ->
        CP(w);
        lookup(ans);
        CP(w);
        if
        :: ans == L_FOUND ->                           /* settle_found */
           move(w, rd, S_DONE, C_NONE, res)
        :: ans == L_AMBIGUOUS ->
           move(w, rd, S_BLOCKED, C_AMBIGUOUS, res)
        :: ans == L_FAILED -> skip                      /* stays as it is; try later */
        :: ans == L_ABSENT -> lu = 1; goto read
        fi;
        if
        :: res == W_STALE -> goto stale
        :: else -> goto close
        fi
     :: act == A_EXECUTE ->
        CP(w);
        move(w, rd, S_RUNNING, C_NONE, res);             /* the intent, durable */
        if
        :: res == W_OK -> skip
        :: res == W_STALE -> goto stale
        :: else -> goto close
        fi
     fi;
perform:
     CP(w);
     if
     :: !final_run -> goto closed_refused              /* EffectFailed: nothing sent */
     :: atomic {
          zombie_called = zombie_called || (o_cur != w + 1 && lease_taken[w]);
          twice: assert(calls == 0 || wrong_absent || zombie_called);
          calls++; printf("MSC: w%d calls the provider (call %d)\n", w, calls);
          if
          :: final_run -> land()
          :: else -> inflight++
          fi
        }
     fi;
     CP(w);
     if
     :: move(w, S_RUNNING, S_DONE, C_NONE, res)        /* the evidence, done */
     :: !final_run -> move(w, S_RUNNING, S_UNKNOWN, C_NONE, res)   /* unclear */
     fi;
     if
     :: res == W_STALE -> goto stale
     :: else -> goto close
     fi;
closed_refused:
     move(w, S_RUNNING, S_FAILED, C_NONE, res);
     if
     :: res == W_STALE -> goto stale
     :: else -> skip
     fi;
close:
     CP(w);
     finish(w);
next:
     atomic { res = 0; rd = 0; rtp = 0; rap = 0; rlv = 0; act = 0; why = 0; ans = 0; lu = 0 }
  od;
stale:
dead:
  atomic { alive[w] = 0; frozen[w] = 0; ended++ }
}

/* resolve refuses a step running in a live attempt. The ledger judges "live" by the
   lease alone (Ledger._live_attempt); -DRESOLVE_BY_LEASE models exactly that. By
   default the human settles a running step only once its process is gone (stopped
   first, as for break-lease): see docs/reliability.md for why. */
#ifdef RESOLVE_BY_LEASE
#define RESOLVE_OK !(s_state == S_RUNNING && o_cur != 0 && lease_exp > now)
#else
#define RESOLVE_OK (!(s_state == S_RUNNING && o_cur != 0 && lease_exp > now) && \
                    !(s_state == S_RUNNING && alive[s_runner]))
#endif

/* a human, at any time: resolve (found / absent), approve, break-lease */
proctype human()
{
  byte h;
  if
  :: skip
  :: atomic {                                          /* resolve --found EVIDENCE */
       effects > 0 && s_state != S_NONE && s_state != S_DONE && s_state != S_FAILED &&
       RESOLVE_OK ->
       s_state = S_DONE; s_cause = C_NONE; printf("MSC: human resolves found\n");
       if
       :: o_state == O_BLOCKED && o_cause != C_EXHAUSTED -> o_state = O_OTHER
       :: else -> skip
       fi
     }
  :: atomic {                                          /* resolve --absent */
#ifdef WRONG_ABSENT
       s_state != S_NONE && s_state != S_DONE &&
#else
       effects == 0 && inflight == 0 && s_state != S_NONE && s_state != S_DONE &&
#endif
       RESOLVE_OK ->
       if
       :: effects > 0 || inflight > 0 -> wrong_absent = 1
       :: else -> skip
       fi;
       s_state = S_PLANNED; s_cause = C_NONE; printf("MSC: human resolves absent\n");
       if
       :: o_state == O_BLOCKED && o_cause != C_EXHAUSTED -> o_state = O_OTHER
       :: else -> skip
       fi
     }
  :: atomic {                                          /* approve (--new ahead of the first run) */
       o_state != O_DONE && s_state != S_DONE ->
       s_approved = 1; printf("MSC: human approves\n");
       if
       :: s_state == S_NONE -> s_state = S_PLANNED
       :: s_state == S_BLOCKED && s_cause == C_APPROVAL -> s_state = S_PLANNED; s_cause = C_NONE
       :: else -> skip
       fi;
       if
       :: o_state == O_BLOCKED && o_cause != C_EXHAUSTED && s_state != S_BLOCKED -> o_state = O_OTHER
       :: else -> skip
       fi
     }
  :: atomic {                                          /* break-lease of a stuck holder */
       o_cur != 0 && (frozen[o_cur - 1] || !alive[o_cur - 1]) ->
       h = o_cur - 1; printf("MSC: human breaks the lease of w%d\n", h);
#ifndef BREAK_WITHOUT_STOP
       killed[h] = 1; alive[h] = 0;                    /* its processes stopped first */
#endif
       supersede();
       h = 0
     }
  fi;
  human_done = 1
}

/* time, heartbeats, resumes, one clock jump, landing calls; then one fresh run */
init {
  byte w;
  atomic {
    if
    :: effects = 0
    :: effects = 1; printf("MSC: the effect exists already\n")   /* made before this ledger knew the step (a lost ledger, another home) */
    fi;
    run worker(0); run worker(1);
    run human()
  }
  do
  :: atomic {
       now < TMAX -> now++; printf("MSC: tick t=%d\n", now);
       /* the heartbeat of a live, running holder; refused once it is stale */
       if
       :: o_cur != 0 && alive[o_cur - 1] && !frozen[o_cur - 1] ->
          lease_exp = LNOW(o_cur - 1) + LEASE
       :: else -> skip
       fi
     }
  :: atomic { frozen[0] -> frozen[0] = 0; printf("MSC: w0 resumes\n") }
  :: atomic { frozen[1] -> frozen[1] = 0; printf("MSC: w1 resumes\n") }
#ifndef PG
  :: atomic { !jumped && now < TMAX -> jumped = 1; skew[0] = JUMP; printf("MSC: w0's clock jumps +%d\n", JUMP) }
  :: atomic { !jumped && now < TMAX -> jumped = 1; skew[1] = JUMP; printf("MSC: w1's clock jumps +%d\n", JUMP) }
#endif
  :: atomic { inflight > 0 -> inflight--; land() }
  :: ended == NW && human_done && inflight == 0 -> break
  od;
  /* progress: a fresh run, once time has passed and nothing of the others runs,
     ends done or waiting for a human with a reason; it is never busy */
  atomic { now = TMAX + JUMP + LEASE + 1; final_run = 1; printf("MSC: a fresh run (w%d) later\n", FIN); run worker(FIN) };
  ended == NW + 1;
  progress_: assert(o_state == O_DONE || (o_state == O_BLOCKED && o_cause != C_NONE))
}
