// A short, printable excerpt of text read from a user's file, for error
// messages: a binary file or the wrong file (hardware = /etc/passwd) must not
// have its raw content echoed to the terminal and the job's logs.
#ifndef MIST_EXCERPT_H
#define MIST_EXCERPT_H
#include <stddef.h>

#define MIST_EXCERPT_CHARS 40  // characters of the source shown at most
#define MIST_EXCERPT_BUF (4 * MIST_EXCERPT_CHARS + 8)  // every one escaped (\xNN), plus "..." and NUL

// Writes into buf (MIST_EXCERPT_BUF bytes suffice) the first MIST_EXCERPT_CHARS
// bytes of s, printable ASCII as is, every other byte as \xNN, a backslash as
// \\, and "..." when s is longer; returns buf.
const char *mist_excerpt(const char *s, char *buf, size_t len);

#endif
