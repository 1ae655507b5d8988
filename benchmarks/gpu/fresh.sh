# Sourced by run.sh and train.sh: incremental builds in a kept OUTDIR, so that
# a second call on a GPU machine recompiles only what changed.
# fresh OBJ SRC: OBJ exists and is newer than SRC and than every header of the
# tree (any header change rebuilds everything: simple, and still correct).
fresh() {
    [ -f "$1" ] && [ "$1" -nt "$2" ] &&
        [ -z "$(find "$top/base" "$top/expr" "$top/kernels" "$top/models" "$top/planner" "$top/runtime" \
                \( -name '*.h' -o -name '*.cuh' \) -newer "$1" 2>/dev/null | head -1)" ]
}
# fresh_arch OUTDIR ARCH: objects built for another CUDA_ARCH are removed
fresh_arch() {
    mkdir -p "$1/obj" "$1/obj-train"
    if [ "$(cat "$1/obj/arch" 2>/dev/null)" != "$2" ]; then
        rm -f "$1"/obj/*.o "$1"/obj-train/*.o
        echo "$2" >"$1/obj/arch"
    fi
}
# sources_hash: one hash of every file the GPU programs are built from (and the
# target and inih). A kept or carried OUTDIR whose programs were built from the
# same sources is used as it is: copying a tree to another machine changes the
# files' times, not their contents, so `fresh` alone would rebuild everything there.
sources_hash() {
    (cd "$top" && find base expr kernels models planner runtime tests benchmarks/gpu -type f \( -name '*.c' -o -name '*.h' \
        -o -name '*.cu' -o -name '*.cuh' -o -name '*.sh' \) 2>/dev/null | LC_ALL=C sort | xargs cat
     echo "$arch ${INIH_DIR:-}") | sha256sum | cut -d' ' -f1
}
# prebuilt STAMP PROGRAM...: STAMP holds the hash of these sources and every
# program exists and finds its shared libraries here
prebuilt() {
    stamp=$1; shift
    [ "$(cat "$stamp" 2>/dev/null)" = "$(sources_hash)" ] || return 1
    for p in "$@"; do
        [ -x "$p" ] || return 1
        ! ldd "$p" 2>/dev/null | grep -q 'not found' || return 1
    done
}
# build OBJ SRC COMPILER ARGS...: compile SRC into OBJ in the background unless
# it is fresh; OBJ joins $objs, the job's pid $pids (wait_builds waits for them)
build() {
    obj=$1; src=$2; shift 2
    if ! fresh "$obj" "$src"; then
        "$@" -c -o "$obj" "$src" &
        pids="$pids $!"
    fi
    objs="$objs $obj"
}
# wait for every build job: a bare wait would not see a failed compile
wait_builds() {
    failed=0
    for p in $pids; do wait "$p" || failed=1; done
    pids=""
    [ "$failed" = 0 ] || { echo "$0: a compile failed (messages above)" >&2; exit 1; }
}
