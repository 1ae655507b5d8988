// Small file-system helpers shared by checkpoints, logs and the tokenizer:
// create parent directories, make a rename durable, write a file atomically.
// "Atomically" means readers see either the old file or the complete new one,
// never a half-written one: write PATH.tmp, fsync it, rename over PATH, fsync
// the directory (POSIX rename(2) is atomic within one file system).
#ifndef MIST_FILEUTIL_H
#define MIST_FILEUTIL_H
#include <stddef.h>

// mkdir -p DIR (mode 0777 & ~umask). 0 on success, -1 with err filled.
int mist_mkdir_p(const char *dir, char *err, size_t errlen);
// mkdir -p of the directory part of PATH ("a/b/c.json" creates "a/b").
int mist_mkdir_parent(const char *path, char *err, size_t errlen);
// fsync the directory holding PATH so that a rename/unlink inside it survives a crash.
int mist_fsync_parent(const char *path, char *err, size_t errlen);
// Write BYTES of DATA to PATH via PATH.tmp + fsync + rename + fsync(dir); creates parents.
// An existing PATH that is not a regular file (/dev/null, /dev/stdout, a FIFO) is
// written in place instead, never replaced.
int mist_write_file_atomic(const char *path, const void *data, size_t bytes, char *err, size_t errlen);
// Whether PATH can be written (before long work whose result goes there): 0, or -1
// with err (a directory, no write permission on the file or its directory).
int mist_output_check(const char *path, char *err, size_t errlen);
// Whether files can be created in DIR (created when missing), probed by creating
// one: 0, or -1 with err (a file where the directory should be, no permission,
// a read-only file system). Checked at start, before work that would be lost.
int mist_output_dir_check(const char *dir, char *err, size_t errlen);
// NAME itself, or a placeholder when it is longer than 120 characters: for a name (a
// profile file's path) in a comment line of an INI file mist writes, whose readers refuse
// lines over 200 characters (inih).
const char *mist_ini_comment_name(const char *name);

#endif
