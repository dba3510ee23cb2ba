/*
 * Prints the model's decision table: one line per combination of the inputs
 * of decide (model/decide.pml). Run it with `spin model/decide_table.pml`.
 *   ROW st tp lv hl lu ap rf ou apr lf act why
 */
#include "decide.pml"

init {
  byte st, tp, lv, hl, lu, ap, rf, ou, apr, lf, act, why;
  for (st : S_NONE .. S_BLOCKED) {
    for (tp : 0 .. 1) {
      for (lv : LV_ALIVE .. LV_OTHER) {
        for (hl : 0 .. 1) {
          for (lu : 0 .. 1) {
            for (ap : 0 .. 1) {
              for (rf : 0 .. 1) {
                for (ou : OU_REEXECUTE .. OU_BLOCK) {
                  for (apr : 0 .. 1) {
                    for (lf : 0 .. 1) {
                      if
                      :: st == S_NONE && (tp || ap) -> skip  /* no such step */
                      :: else ->
                         decide(st, tp, lv, hl, lu, ap, rf, ou, apr, lf, act, why);
                         printf("ROW %d %d %d %d %d %d %d %d %d %d %d %d\n",
                                st, tp, lv, hl, lu, ap, rf, ou, apr, lf, act, why)
                      fi
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}
