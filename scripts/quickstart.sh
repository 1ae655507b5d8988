#!/bin/sh
# README command 1: set up, build, and run the main job on the tiny example, with the plan
# searched by rank 0 for the 4 launched ranks ([plan] mode = auto).
set -eu
cd "$(dirname "$0")/.."
sh scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
exec mpirun --oversubscribe -np 4 ./mist-train examples/tiny.ini -o plan.mode=auto "$@" </dev/null
