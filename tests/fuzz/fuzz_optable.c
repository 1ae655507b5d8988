// Fuzz harness: measured op tables (planner/optable.c), as mist-calibrate
// writes them and mist-plan --op-table reads them. An accepted table is looked
// up the ways the cost model looks it up: every entry's curve and pricing rule,
// and the sequence-length check.
#include "planner/optable.h"
#include "tests/fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("optable.txt", data, size);
    OpTable t;
    char err[2048];
    if (optable_load(&t, path, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    optable_check_seq(&t, path, 64, err, sizeof err);
    for (int i = 0; i < t.n && i < 64; i++) {
        const OpTimeEntry *e = &t.entry[i];
        if (optable_find(&t, e->op, e->b, e->s, e->tp) != e) abort();  // load refuses duplicates
        OptableCurve c;
        for (int from = 0; optable_curve(&t, e->op, e->s, &from, &c);)
            for (int k = 1; k < c.n; k++)
                if (c.b[k - 1] >= c.b[k]) abort();  // a curve is sorted by b, without repeats
        for (int b = e->b - 1; b <= e->b + 1; b++) (void)optable_rule_name(optable_rule(&t, e->op, b, e->s, e->tp));
    }
    optable_free(&t);
    return 0;
}
