// One mist-train job on this rank after the command line: the config every
// rank shares, measured transfers, the plan, the grid, then a dry run or
// training (runtime/train_job.h).
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/train_job.h"
#include "base/config_load.h"
#include "base/plan_file.h"
#include "base/profile.h"
#include "base/schema.h"
#include "planner/analyze.h"
#include "planner/search.h"
#include "runtime/comm_mpi.h"
#include "runtime/fileutil.h"
#include "runtime/grid.h"
#include "runtime/profile_measure.h"
#include "runtime/train.h"

// Rank 0 reads the file; everyone gets the status, then the config as bytes.
// Returns 0 or the (job-wide) exit code; rank 0 has printed the reason.
static int load_config(MistConfig *cfg, const TrainArgs *a, const Launch *L) {
    char err[2048] = "";
    int status = 0;
    if (L->world_rank == 0)
        // A single-process dry run previews a plan of any size (it is not launched).
        status = config_load(cfg, a->config, a->overrides, a->n_overrides,
                             a->dry_run && L->world_size == 1 ? 0 : L->world_size, err, sizeof err);
    if (L->world_rank == 0 && status == 0) {
        // the profile prices the plan (mode = auto) and the MFU of every log line: a broken
        // profile file is a configuration error in every plan mode, reported before training
        static HwProfile hw;
        char perr[1024];
        if (profile_load(&hw, cfg->cluster.hardware[0] ? cfg->cluster.hardware : "cpu", perr, sizeof perr) != 0) {
            snprintf(err, sizeof err, "%s: [cluster] hardware: %s", a->config, perr);
            status = MIST_EXIT_CONFIG;
        }
    }
    if (MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        launch_abort(1, "sharing the configuration status failed");
    if (status) {
        if (L->world_rank == 0) fprintf(stderr, "mist-train: %s\n", err[0] ? err : "invalid configuration");
        return status;
    }
    if (MPI_Bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        launch_abort(1, "broadcasting the configuration failed");
    return 0;
}

// [cluster] measure_transfers: every rank measures the job's collectives (each
// group shape, on the comm path training takes) and host copies, as
// mist-profile does with two sizes; rank 0 puts the lines into the profile,
// prints them and saves the profile next to the checkpoints, and every rank
// gets it, so that mode = auto plans with it and the predicted iteration
// compares with it. A dry run does not measure. Returns 0 or an exit code.
static int measure_transfers(MistConfig *cfg, const Launch *L, int dry_run) {
    if (!cfg->cluster.measure_transfers || dry_run) return 0;
    char err[1024], comm[256];
    const CommBackend *mpi = comm_mpi_backend();
    CommGroup *world = NULL;
    commCheck(mpi, mpi->group_world(mpi, &world));
    MeasureOptions o = {.bytes = {(size_t)1 << 20, (size_t)16 << 20}, .num_sizes = 2, .warmup = 1, .iters = 3};
    static ProfileMeasure m;
    int rc = profile_measure_job(mpi, world, L->device, &o, &m, comm, sizeof comm, err, sizeof err) ? 1 : 0;
    mpi->group_free(mpi, world);
    if (rc && L->world_rank == 0) fprintf(stderr, "mist-train: [cluster] measure_transfers: %s\n", err);
    if (!rc && L->world_rank == 0) {
        const char *base = cfg->cluster.hardware[0] ? cfg->cluster.hardware : "cpu";
        HwProfile *p = &cfg->cluster.measured;
        if (profile_load(p, base, err, sizeof err) != 0) launch_abort(1, "%s", err);  // load_config checked it
        profile_apply_measure(p, &m);
        snprintf(p->name, sizeof p->name, "%.40s measured", base);
        cfg->cluster.measured_valid = 1;
        profile_measure_print(stdout, "mist-train: [cluster] measure_transfers", &m, &o, comm, L->world_size);
        if (cfg->checkpoint.dir[0]) {
            char path[MIST_PATH_MAX + 16];
            size_t len = 0;
            snprintf(path, sizeof path, "%s/profile.ini", cfg->checkpoint.dir);
            char *text = profile_measure_ini(p, &m, "mist-train", base, comm, &len);
            if (!text || mist_write_file_atomic(path, text, len, err, sizeof err) != 0)
                fprintf(stderr, "mist-train: warning: could not save the measured profile to %s: %s\n", path,
                        text ? err : "no memory");
            else
                printf("measured profile saved to %s (reuse: -o cluster.hardware=%s)\n", path, path);
            free(text);
        }
        fflush(stdout);
    }
    if (MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Bcast(&cfg->cluster.measured_valid, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Bcast(&cfg->cluster.measured, (int)sizeof cfg->cluster.measured, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        launch_abort(1, "sharing the measured profile failed");
    return rc;
}

// Saves the planner's plan next to the checkpoints (a resumed or later run can
// pin it with -o plan.file=...), or says why it is not saved.
static void save_plan(const MistConfig *cfg, const Plan *plan, int nodes, int gpus_per_node, const char *hardware,
                      int save) {
    char err[1024];
    if (!save) {
        printf("plan not saved (a dry run writes nothing)\n");
    } else if (cfg->checkpoint.dir[0]) {
        char path[MIST_PATH_MAX + 16], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/plan.ini", cfg->checkpoint.dir);
        FILE *m = open_memstream(&text, &len);
        if (m) {
            // no path in the file: its lines must stay under the INI reader's 200 characters
            fprintf(m, "; the plan mist-train chose ([plan] mode = auto) for %d rank(s) (%d node(s) x %d)\n",
                    nodes * gpus_per_node, nodes, gpus_per_node);
            fprintf(m, "; hardware: %s\n", mist_ini_comment_name(hardware));
            fprintf(m, "; reuse it: -o plan.file=THIS_FILE\n");
            plan_write_ini(plan, m);
            fclose(m);
        }
        if (!text || mist_write_file_atomic(path, text, len, err, sizeof err) != 0)
            fprintf(stderr, "mist-train: warning: could not save the plan to %s: %s\n", path, text ? err : "no memory");
        else
            printf("plan saved to %s\n", path);
        free(text);
    } else {
        printf("plan not saved ([checkpoint] dir is empty; with one it goes to DIR/plan.ini)\n");
    }
}

// Rank 0 searches and reports; returns 0 (plan filled), 3 (nothing fits) or 2.
static int plan_on_rank0(MistConfig *cfg, int nodes, int gpus_per_node, int save, Plan *plan) {
    HwProfile hw;
    char err[1024];
    if (config_profile(cfg, &hw, err, sizeof err) != 0) {
        fprintf(stderr, "mist-train: %s: [cluster] hardware: %s\n", cfg->source, err);
        return MIST_EXIT_CONFIG;
    }
    SearchOptions so;
    search_options_default(&so, cfg);
    so.nodes = nodes;
    so.gpus_per_node = gpus_per_node;
    train_runtime_limits(&so.limits);
    static SearchResult r;
    SearchStats st;
    int rc = plan_search(cfg, &hw, NULL, &so, &r, &st, err, sizeof err);
    if (rc == 2) {
        fprintf(stderr, "mist-train: %s: [plan] mode = auto: %s\n", cfg->source, err);
        return MIST_EXIT_CONFIG;
    }
    if (rc == 3) {
        fprintf(stderr, "mist-train: %s: [plan] mode = auto, %d rank(s) (%d node(s) x %d), hardware %s, within what "
                "the runtime executes: ", cfg->source, nodes * gpus_per_node,
                nodes, gpus_per_node, hw.name);
        search_print_no_fit(&r, cfg, stderr);
        return 3;
    }
    *plan = r.plan;
    if (plan_validate(plan, &cfg->model, cfg->train.global_batch, nodes * gpus_per_node, "the planner's plan", err,
                      sizeof err) != 0) {
        fprintf(stderr, "mist-train: internal error: %s\n", err);
        return 1;
    }
    static PlanAnalysis an;
    printf("mist-train: [plan] mode = auto: the planner's plan for %d rank(s) (%d node(s) x %d), hardware %s, space "
           "%s within the runtime's limits\n", nodes * gpus_per_node, nodes, gpus_per_node, hw.name,
           search_space_name(so.space));
    if (plan_analyze(&an, cfg, plan, &hw, NULL, err, sizeof err) == 0) analysis_print_text(&an, cfg, stdout);
    search_stats_print_text(&st, &so, stdout);
    save_plan(cfg, plan, nodes, gpus_per_node, hw.name, save);
    fflush(stdout);
    return 0;
}

// The plan to run. A fixed plan (or a plan file) is already in cfg. With
// [plan] mode = auto, rank 0 searches for the real world size -- nodes x ranks
// per node as launched -- within what the runtime executes, prints the plan,
// saves it next to the checkpoints and broadcasts it; when nothing fits every
// rank ends with exit code 3.
static int resolve_plan(MistConfig *cfg, const Launch *L, int dry_run) {
    if (cfg->plan.mode != PLAN_AUTO || cfg->plan.file[0]) return 0;
    // ranks per host: equal on every host gives nodes x gpus_per_node; otherwise one flat node
    int lmin = L->local_size, lmax = L->local_size;
    if (MPI_Allreduce(MPI_IN_PLACE, &lmin, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Allreduce(MPI_IN_PLACE, &lmax, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        launch_abort(1, "sharing the ranks per host failed");
    int gpn = L->world_size, nodes = 1;
    if (lmin == lmax && lmin > 0 && L->world_size % lmin == 0) gpn = lmin, nodes = L->world_size / lmin;
    int status = 0;
    static Plan plan;
    memset(&plan, 0, sizeof plan);
    if (L->world_rank == 0) status = plan_on_rank0(cfg, nodes, gpn, !dry_run, &plan);
    if (MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        launch_abort(1, "sharing the planner's status failed");
    if (status) return status;
    if (MPI_Bcast(&plan, (int)sizeof plan, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        launch_abort(1, "broadcasting the plan failed");
    cfg->plan.plan = plan;
    return 0;
}

// The process grid of the plan, then the dry run's tables or the training.
static int build_grid_and_run(const MistConfig *cfg, const Launch *L, int dry_run) {
    Grid grid;
    char err[1024];
    if (dry_run && L->world_size == 1 && plan_world_size(&cfg->plan.plan) > 1) {
        config_print_summary(cfg, stdout);
        int rc = grid_print_plan_table(&cfg->plan.plan, stdout, err, sizeof err);
        if (rc) fprintf(stderr, "mist-train: %s: %s\n", cfg->source, err);
        return rc;
    }
    int rc = grid_build(&grid, &cfg->plan.plan, comm_mpi_backend(), err, sizeof err);
    if (rc == MIST_EXIT_CONFIG) {  // same plan everywhere: every rank saw it, rank 0 says it
        if (L->world_rank == 0) fprintf(stderr, "mist-train: %s: %s\n", cfg->source, err);
        return rc;
    }
    if (rc) launch_abort(1, "%s", err);
    if (dry_run) {
        if (L->world_rank == 0) {
            config_print_summary(cfg, stdout);
            fflush(stdout);
        }
        grid_print_table(&grid, stdout);
        grid_free(&grid);
        return 0;
    }
    rc = mist_train_run(cfg, &grid);
    grid_free(&grid);
    return rc;
}

int train_job_run(const TrainArgs *a, const Launch *L) {
    static MistConfig cfg;
    int rc;
    if ((rc = load_config(&cfg, a, L))) return rc;
    if ((rc = measure_transfers(&cfg, L, a->dry_run))) return rc;
    if ((rc = resolve_plan(&cfg, L, a->dry_run))) return rc;
    return build_grid_and_run(&cfg, L, a->dry_run);
}
