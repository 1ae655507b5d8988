// mist-plan's reports: a search's plan (or the closest one when nothing fits)
// in the --analyze format with the search's statistics, or one JSON object;
// with --compare the best plan of every smaller space; a fixed plan's
// analysis with what does not fit; and the header of the plan file a search
// writes. Messages go to stderr as "mist-plan: ...".
#ifndef MIST_PLAN_REPORT_H
#define MIST_PLAN_REPORT_H
#include <stdio.h>
#include "base/plan.h"
#include "base/profile.h"
#include "base/schema.h"
#include "planner/optable.h"
#include "planner/search.h"

// Searches the fastest plan that fits and prints it (json: as one object).
// Returns 0 with the plan in *found, 3 when nothing fits (the reason on
// stderr), 2 on a configuration error, 1 on an internal one.
int plan_report_search(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *so,
                       int json, int compare, Plan *found);

// Analyzes a fixed plan and prints it (json: as one object). Returns 0, 3
// when a stage does not fit (each such stage on stderr), 2 when the plan does
// not analyze.
int plan_report_analysis(const MistConfig *cfg, const Plan *plan, const HwProfile *hw, const OpTable *table, int json);

// The plan file of a search: comment lines with the node shape and profile it
// was priced on (--analyze needs both to predict the same), then the plan.
// hardware: the profile's name as the comment may show it (short: the INI
// reader takes lines of up to 200 characters).
void plan_report_write_file(FILE *f, const Plan *plan, const SearchOptions *so, const char *hardware);

#endif
