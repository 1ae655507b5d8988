# Sourced by run.sh and train.sh: incremental builds in a kept OUTDIR, so that
# a second call on a GPU machine recompiles only what changed.
# fresh OBJ SRC: OBJ exists and is newer than SRC and than every header of the
# tree (any header change rebuilds everything: simple, and still correct).
fresh() {
    [ -f "$1" ] && [ "$1" -nt "$2" ] &&
        [ -z "$(find "$top/kernels" "$top/runtime" "$top/planner" "$top/models" \
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
