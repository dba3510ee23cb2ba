/*
 * The decision of the effect algorithm: Run.decide (src/retrysafe/attempt.py),
 * case by case and in the same order. tests/test_model_decide.py runs this
 * inline over every combination of its inputs (model/decide_table.pml) and
 * compares each answer with the real Run.decide.
 */

/* step states (S_NONE: the step does not exist yet) */
#define S_NONE     0
#define S_PLANNED  1
#define S_RUNNING  2
#define S_DONE     3
#define S_FAILED   4
#define S_UNKNOWN  5
#define S_BLOCKED  6

/* actions (states.Action) */
#define A_EXECUTE  0
#define A_SKIP     1
#define A_LOOKUP   2
#define A_BLOCKED  3
#define A_BUSY     4

/* the holder of a running step, as the deciding process sees it */
#define LV_ALIVE   0   /* this attempt, its runner lives on this host            */
#define LV_DEAD    1   /* this attempt, its runner is gone from this host        */
#define LV_REMOTE  2   /* this attempt, its runner is on another host: unknowable */
#define LV_OTHER   3   /* another attempt's (claim superseded it, or will)       */

/* effects.OnUnknown */
#define OU_REEXECUTE 0
#define OU_LOOKUP    1
#define OU_BLOCK     2

/* block causes (states.BlockCause); C_STEP: the blocked step's own cause */
#define C_NONE         0
#define C_STEP         1
#define C_APPROVAL     2
#define C_AMBIGUOUS    3
#define C_NO_LOOKUP    4
#define C_NEVER_BLIND  5
#define C_NOT_RETRIED  6
#define C_EXHAUSTED    7

/* mutants: -DNO_LOOKUP_FIRST drops lookup_first; -DNO_CHECK_BEFORE_ACT drops
   the lookup of a step an earlier try may have acted on */
#ifdef NO_LOOKUP_FIRST
#define LOOKUP_FIRST_ON 0
#else
#define LOOKUP_FIRST_ON 1
#endif
#ifdef NO_CHECK_BEFORE_ACT
#define CHECK_BEFORE_ACT_ON 0
#else
#define CHECK_BEFORE_ACT_ON 1
#endif

/*
 * st: step state; tp: the step was tried (tries > 0); lv: LV_*; hl: a lookup
 * exists; lu: a lookup already answered absent; ap: an approval is recorded;
 * rf, ou, apr, lf: the class policy (retry_failed, on_unknown, approval,
 * lookup_first). Out: act (A_*), why (C_*, for A_BLOCKED).
 */
inline decide(st, tp, lv, hl, lu, ap, rf, ou, apr, lf, act, why)
{
  why = C_NONE;
  if
  :: LOOKUP_FIRST_ON && !lu && hl && lf && (st == S_NONE || (st == S_PLANNED && !tp)) ->
     act = A_LOOKUP
  :: else ->
     if
     :: st == S_DONE -> act = A_SKIP
     :: st == S_BLOCKED -> act = A_BLOCKED; why = C_STEP
     :: st == S_RUNNING && (lv == LV_ALIVE || lv == LV_REMOTE) -> act = A_BUSY
     :: else ->
        if
        :: (CHECK_BEFORE_ACT_ON && (st == S_UNKNOWN || st == S_RUNNING) && !lu &&
            (hl || ou == OU_LOOKUP)) ->
           act = A_LOOKUP
        :: (CHECK_BEFORE_ACT_ON && (st == S_UNKNOWN || st == S_RUNNING) && !lu &&
            !(hl || ou == OU_LOOKUP) && ou == OU_BLOCK) ->
           act = A_BLOCKED; why = C_NEVER_BLIND
        :: else ->
           if
           :: st == S_FAILED && !rf -> act = A_BLOCKED; why = C_NOT_RETRIED
           :: else ->
              if
              :: apr && !ap -> act = A_BLOCKED; why = C_APPROVAL
              :: else -> act = A_EXECUTE
              fi
           fi
        fi
     fi
  fi
}
