// What the fuzz harnesses share: the loaders under test take a path, so each
// input is written to a file in a directory of this process's own (under
// /dev/shm when it exists, for speed, else $TMPDIR or /tmp), removed at exit.
// The harnesses build two ways: with clang's libFuzzer (tests/fuzz/build.sh)
// and with the normal build's compiler and replay_main.c (make check replays
// the seeds and the regression corpus through them).
#ifndef MIST_FUZZ_FILE_H
#define MIST_FUZZ_FILE_H
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir_[512];

static void fuzz_dir_remove_(void) {
    DIR *d = opendir(fuzz_dir_);
    if (!d) return;
    struct dirent *de;
    char path[1024];
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", fuzz_dir_, de->d_name);
        if (unlink(path) != 0) rmdir(path);  // the harnesses make no nested directories with files
    }
    closedir(d);
    rmdir(fuzz_dir_);
}

// The per-process directory (created on first use).
static inline const char *fuzz_dir(void) {
    if (fuzz_dir_[0]) return fuzz_dir_;
    struct stat st;
    const char *tmp = getenv("TMPDIR");
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : tmp && tmp[0]                                                                     ? tmp
                                                                                                           : "/tmp";
    snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/mist-fuzz-%ld", base, (long)getpid());
    if (mkdir(fuzz_dir_, 0700) != 0 && (stat(fuzz_dir_, &st) != 0 || !S_ISDIR(st.st_mode))) {
        perror(fuzz_dir_);
        abort();
    }
    atexit(fuzz_dir_remove_);
    return fuzz_dir_;
}

// Writes data to fuzz_dir()/name and returns that path (a static buffer per call site is not needed:
// each harness uses the path before writing the next file).
static inline const char *fuzz_write(const char *name, const void *data, size_t size) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

// Where the harnesses print what a loaded file holds (the printers run on every accepted input).
static inline FILE *fuzz_null(void) {
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    if (!f) abort();
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#endif
