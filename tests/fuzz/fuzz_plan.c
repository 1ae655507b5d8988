// Fuzz harness: plan files (base/plan_file.c), as mist-plan --out writes them
// and `[plan] file` reads them. An accepted plan is checked against a small
// GPT (examples/tiny.ini's model, global batch 16, 4 ranks), written back and
// printed as the summary prints it; the plan it writes must load again and
// hold the same stages.
#include <string.h>
#include "base/plan_file.h"
#include "tests/fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("plan.ini", data, size);
    static Plan plan, again;
    char err[2048];
    if (plan_file_load(&plan, path, err, sizeof err) != 0) {
        if (!err[0]) abort();  // a refusal always says why
        return 0;
    }
    ModelConfig m = model_family_config(FAMILY_GPT, 2, 64, 4, 256, 64);
    plan_validate(&plan, &m, 16, 4, path, err, sizeof err);
    static Plan checked;
    plan_file_load_checked(&checked, path, &m, 16, 4, err, sizeof err);
    plan_print_stages(&plan, fuzz_null());
    // round trip: what plan_write_ini writes, plan_file_load reads back unchanged
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    plan_write_ini(&plan, f);
    fclose(f);
    const char *copy = fuzz_write("plan_again.ini", text, len);
    free(text);
    if (plan_file_load(&again, copy, err, sizeof err) != 0) {
        fprintf(stderr, "a plan that loaded does not load after plan_write_ini: %s\n", err);
        abort();
    }
    if (again.G != plan.G || again.num_stages != plan.num_stages) abort();
    for (int s = 0; s < plan.num_stages; s++)
        if (!stage_plan_equal(&again.stage[s], &plan.stage[s])) {
            fprintf(stderr, "stage %d changed in the round trip through plan_write_ini\n", s);
            abort();
        }
    return 0;
}
