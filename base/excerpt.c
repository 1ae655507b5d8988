#include "base/excerpt.h"
#include <stdio.h>

const char *mist_excerpt(const char *s, char *buf, size_t len) {
    if (!len) return buf;
    size_t o = 0;
    int shown = 0;
    buf[0] = 0;
    if (!s) return buf;
    for (; *s && shown < MIST_EXCERPT_CHARS; s++, shown++) {
        unsigned char c = (unsigned char)*s;
        char piece[8];
        if (c == '\\') snprintf(piece, sizeof piece, "\\\\");
        else if (c >= 0x20 && c < 0x7f) snprintf(piece, sizeof piece, "%c", c);
        else snprintf(piece, sizeof piece, "\\x%02x", c);
        size_t n = 0;
        while (piece[n]) n++;
        if (o + n + 1 > len) break;
        for (size_t i = 0; i < n; i++) buf[o++] = piece[i];
        buf[o] = 0;
    }
    if (*s && o + 4 <= len) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.', buf[o] = 0;
    return buf;
}
