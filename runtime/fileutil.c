// File-system helpers: mkdir -p, durable rename, atomic small-file writes.
#define _POSIX_C_SOURCE 200809L
#include "runtime/fileutil.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mist_mkdir_p(const char *dir, char *err, size_t errlen) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0) return 0;
    if (n >= sizeof buf) {
        snprintf(err, errlen, "directory path too long (%zu characters, at most %zu): %.80s...", n, sizeof buf - 1, dir);
        return -1;
    }
    memcpy(buf, dir, n + 1);
    // create each prefix ending at a '/', then the whole path
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create directory '%s': %s (hint: check permissions and that no file has that name)",
                     buf, strerror(errno));
            return -1;
        }
        buf[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "'%s' exists but is not a directory (hint: choose another path or remove that file)", dir);
        return -1;
    }
    return 0;
}

// the directory part of PATH ("." when it has none)
static void parent_of(const char *path, char *out, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) { snprintf(out, len, "."); return; }
    if (slash == path) { snprintf(out, len, "/"); return; }
    snprintf(out, len, "%.*s", (int)(slash - path), path);
}

int mist_mkdir_parent(const char *path, char *err, size_t errlen) {
    char dir[4096];
    if (!strchr(path, '/')) return 0;
    parent_of(path, dir, sizeof dir);
    return mist_mkdir_p(dir, err, errlen);
}

int mist_fsync_parent(const char *path, char *err, size_t errlen) {
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open directory '%s' to sync it: %s", dir, strerror(errno));
        return -1;
    }
    // Some file systems refuse fsync on directories (EINVAL); the rename is still done.
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc != 0 && saved != EINVAL && saved != EROFS) {
        snprintf(err, errlen, "cannot sync directory '%s': %s", dir, strerror(saved));
        return -1;
    }
    return 0;
}

int mist_write_file_atomic(const char *path, const void *data, size_t bytes, char *err, size_t errlen) {
    char tmp[4096 + 8];
    if (strlen(path) >= 4096) {
        snprintf(err, errlen, "path too long: %.80s...", path);
        return -1;
    }
    if (mist_mkdir_parent(path, err, errlen) != 0) return -1;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create '%s': %s (hint: check the directory exists and is writable)", tmp, strerror(errno));
        return -1;
    }
    const char *p = data;
    size_t left = bytes;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(err, errlen, "cannot write '%s': %s (hint: is the disk full?)", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    int synced = fsync(fd) == 0;
    if (close(fd) != 0 || !synced) {
        snprintf(err, errlen, "cannot flush '%s' to disk: %s (hint: is the disk full?)", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return mist_fsync_parent(path, err, errlen);
}
