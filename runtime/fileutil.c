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

// all of DATA to fd (EINTR retried); 0, or -1 with errno set
static int write_all(int fd, const void *data, size_t bytes) {
    const char *p = data;
    while (bytes > 0) {
        ssize_t w = write(fd, p, bytes);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        bytes -= (size_t)w;
    }
    return 0;
}

// An existing PATH that is not a regular file (/dev/null, /dev/stdout, a FIFO) is
// written in place: renaming a temporary over it would replace the device.
static int write_in_place(const char *path, const void *data, size_t bytes, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || write_all(fd, data, bytes) != 0) {
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return close(fd) == 0 ? 0 : -1;
}

int mist_output_check(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "'%s' is a directory (hint: name a file inside it)", path);
            return -1;
        }
        if (access(path, W_OK) != 0) {
            snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
            return -1;
        }
        if (!S_ISREG(st.st_mode)) return 0;  // written in place
    }
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    if (stat(dir, &st) == 0 && access(dir, W_OK) != 0) {  // a missing parent is created when writing
        snprintf(err, errlen, "cannot create files in '%s': %s (hint: choose a writable directory)", dir,
                 strerror(errno));
        return -1;
    }
    return 0;
}

int mist_output_dir_check(const char *dir, char *err, size_t errlen) {
    // a real probe file, not access(2): root passes access() on a read-only
    // mount, and only a write shows a file system that refuses files
    char probe[4096 + 32];
    if (strlen(dir) >= 4096) {
        snprintf(err, errlen, "path too long: %.80s...", dir);
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "'%s' exists and is not a directory (hint: name a directory, or remove the file)", dir);
        return -1;
    }
    if (mist_mkdir_p(dir, err, errlen) != 0) return -1;
    snprintf(probe, sizeof probe, "%s/.mist-write-probe.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create files in '%s': %s (hint: choose a writable directory)", dir,
                 strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    return 0;
}

int mist_write_file_atomic(const char *path, const void *data, size_t bytes, char *err, size_t errlen) {
    char tmp[4096 + 8];
    if (strlen(path) >= 4096) {
        snprintf(err, errlen, "path too long: %.80s...", path);
        return -1;
    }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return write_in_place(path, data, bytes, err, errlen);
    if (mist_mkdir_parent(path, err, errlen) != 0) return -1;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create '%s': %s (hint: check the directory exists and is writable)", tmp, strerror(errno));
        return -1;
    }
    if (write_all(fd, data, bytes) != 0) {
        snprintf(err, errlen, "cannot write '%s': %s (hint: is the disk full?)", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
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

const char *mist_ini_comment_name(const char *name) {
    return strlen(name) <= 120 ? name : "(a file whose path is too long to name here)";
}
