// Token data loader over llm.c shards: random access to fixed-length samples
// of the concatenated token stream, with a stateless per-epoch shuffle.
#define _FILE_OFFSET_BITS 64
#define _XOPEN_SOURCE 700
#include "runtime/dataloader.h"
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/shard.h"

typedef struct {
    char *path;
    int fd;
    int64_t ntok;   // tokens in this shard
    int64_t start;  // position of its first token in the concatenated stream
} Shard;

struct DataLoader {
    Shard *shards;
    int nshards;
    int64_t ntok;      // total tokens
    int64_t nsamples;  // (ntok - 1) / T
    int T, vocab, shuffle;
    uint64_t seed;
    int64_t global_batch;  // set by dataloader_set_rank (0 before)
    int b, dp, rank, micro_batches;
    uint16_t *window;  // (T+1) raw tokens of one sample
};

// ---- the shuffle ------------------------------------------------------------

static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int64_t dataloader_permute(int64_t i, int64_t n, uint64_t seed, int64_t epoch) {
    if (n <= 1) return i;
    int bits = 0;
    while (bits < 63 && ((int64_t)1 << bits) < n) bits++;
    int half = (bits + 1) / 2;  // domain 2^(2*half) >= n, at most 4n, so the walk takes < 4 steps on average
    uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t key = splitmix64(seed ^ splitmix64((uint64_t)epoch));
    uint64_t x = (uint64_t)i;
    do {  // cycle walking: a permutation of the big domain, restricted to [0, n), is a permutation of [0, n)
        uint64_t left = x >> half, right = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = splitmix64(right ^ (key + round * 0xD1B54A32D192ED03ull)) & mask;
            uint64_t next = left ^ f;
            left = right;
            right = next;
        }
        x = (left << half) | right;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

int64_t dataloader_sample_of(const DataLoader *dl, int64_t k) {
    int64_t epoch = k / dl->nsamples, i = k % dl->nsamples;
    return dl->shuffle ? dataloader_permute(i, dl->nsamples, dl->seed, epoch) : i;
}

// ---- open / close -------------------------------------------------------------

void dataloader_close(DataLoader *dl) {
    if (!dl) return;
    for (int s = 0; s < dl->nshards; s++) {
        if (dl->shards[s].fd >= 0) close(dl->shards[s].fd);
        free(dl->shards[s].path);
    }
    free(dl->shards);
    free(dl->window);
    free(dl);
}

int dataloader_open(DataLoader **out, const char *pattern, int T, int vocab, int shuffle,
                    uint64_t seed, char *err, size_t errlen) {
    *out = NULL;
    if (T < 1) {
        snprintf(err, errlen, "data loader: sequence length %d must be >= 1", T);
        return -1;
    }
    if (vocab < 1 || vocab > 65536) {
        snprintf(err, errlen, "data loader: vocab %d is outside 1..65536, the range of uint16 token shards", vocab);
        return -1;
    }
    if (!pattern || !pattern[0]) {
        snprintf(err, errlen, "data loader: no token shard given (hint: set [data] train, e.g. train = data/tiny_train.bin)");
        return -1;
    }
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == GLOB_NOMATCH && !strpbrk(pattern, "*?[")) {
        // a plain file name that does not exist: say why it cannot be opened
        int64_t unused;
        globfree(&g);
        if (shard_read_header(pattern, &unused, err, errlen) == 0)
            snprintf(err, errlen, "token shard '%s' exists but did not match as a file name", pattern);
        return -1;
    }
    if (grc != 0) {
        if (grc == GLOB_NOMATCH)
            snprintf(err, errlen, "no token shard matches '%s' (hint: check [data] train/val; create shards with "
                     "`mist-tokenize INPUT.txt PREFIX`, see docs/data.md)", pattern);
        else
            snprintf(err, errlen, "cannot expand the shard pattern '%s' (glob error %d)", pattern, grc);
        if (grc == GLOB_NOMATCH) globfree(&g);
        return -1;
    }
    DataLoader *dl = calloc(1, sizeof *dl);
    if (!dl) { globfree(&g); snprintf(err, errlen, "out of host memory"); return -1; }
    dl->T = T;
    dl->vocab = vocab;
    dl->shuffle = shuffle;
    dl->seed = seed;
    dl->shards = calloc(g.gl_pathc, sizeof *dl->shards);
    dl->window = malloc((size_t)(T + 1) * sizeof *dl->window);
    if (!dl->shards || !dl->window) {
        globfree(&g);
        dataloader_close(dl);
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    for (size_t p = 0; p < g.gl_pathc; p++) {
        int64_t ntok;
        if (shard_read_header(g.gl_pathv[p], &ntok, err, errlen) != 0) {
            globfree(&g);
            dataloader_close(dl);
            return -1;
        }
        Shard *s = &dl->shards[dl->nshards++];
        s->fd = -1;
        s->path = strdup(g.gl_pathv[p]);
        s->ntok = ntok;
        s->start = dl->ntok;
        dl->ntok += ntok;
        if (s->path) s->fd = open(s->path, O_RDONLY);
        if (!s->path || s->fd < 0) {
            snprintf(err, errlen, "cannot open token shard '%s': %s", g.gl_pathv[p], strerror(errno));
            globfree(&g);
            dataloader_close(dl);
            return -1;
        }
    }
    globfree(&g);
    dl->nsamples = (dl->ntok - 1) / T;
    if (dl->nsamples < 1) {
        snprintf(err, errlen, "'%s' holds %lld tokens in %d shard(s), fewer than one sample of T+1 = %d tokens "
                 "(hint: use a shorter seq_len or more data)", pattern, (long long)dl->ntok, dl->nshards, T + 1);
        dataloader_close(dl);
        return -1;
    }
    *out = dl;
    return 0;
}

int64_t dataloader_num_samples(const DataLoader *dl) { return dl->nsamples; }
int64_t dataloader_num_tokens(const DataLoader *dl) { return dl->ntok; }
int dataloader_num_shards(const DataLoader *dl) { return dl->nshards; }

// ---- reading --------------------------------------------------------------------

// the shard holding stream position pos (binary search over the start offsets)
static int shard_at(const DataLoader *dl, int64_t pos) {
    int lo = 0, hi = dl->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->shards[mid].start <= pos) lo = mid; else hi = mid - 1;
    }
    while (dl->shards[lo].ntok == 0 || pos >= dl->shards[lo].start + dl->shards[lo].ntok) lo++;  // skip empty shards
    return lo;
}

// Copy n tokens starting at stream position pos into dst, checking each is < vocab.
static int read_tokens(DataLoader *dl, int64_t pos, int64_t n, uint16_t *dst, char *err, size_t errlen) {
    while (n > 0) {
        int si = shard_at(dl, pos);
        const Shard *s = &dl->shards[si];
        int64_t local = pos - s->start;
        int64_t take = s->ntok - local < n ? s->ntok - local : n;
        off_t offset = (off_t)SHARD_HEADER_BYTES + (off_t)local * 2;  // 64-bit: shards may exceed 2 GiB
        size_t want = (size_t)take * 2, done = 0;
        while (done < want) {
            ssize_t r = pread(s->fd, (char *)dst + done, want - done, offset + (off_t)done);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                snprintf(err, errlen, "cannot read token shard '%s' at byte %lld: %s (hint: was the file changed or "
                         "truncated while training?)", s->path, (long long)(offset + (off_t)done),
                         r < 0 ? strerror(errno) : "unexpected end of file");
                return -1;
            }
            done += (size_t)r;
        }
        int64_t bad = shard_find_bad_token(dst, take, dl->vocab);
        if (bad >= 0) {
            snprintf(err, errlen, "token shard '%s': token %lld (byte %lld) is %d, but the model vocabulary is %d "
                     "(allowed 0..%d) (hint: the shard was made with a different tokenizer; set [model] vocab to match "
                     "or re-tokenize the data)", s->path, (long long)(local + bad),
                     (long long)(SHARD_HEADER_BYTES + 2 * (local + bad)), dst[bad], dl->vocab, dl->vocab - 1);
            return -1;
        }
        dst += take;
        pos += take;
        n -= take;
    }
    return 0;
}

int dataloader_read(DataLoader *dl, int64_t first, int count, int32_t *inputs, int32_t *targets,
                    char *err, size_t errlen) {
    if (first < 0 || count < 0) {
        snprintf(err, errlen, "data loader: bad request first=%lld count=%d (both must be >= 0)", (long long)first, count);
        return -1;
    }
    const int T = dl->T;
    for (int c = 0; c < count; c++) {
        int64_t sample = dataloader_sample_of(dl, first + c);
        if (read_tokens(dl, sample * T, T + 1, dl->window, err, errlen) != 0) return -1;
        int32_t *in = inputs + (size_t)c * T, *tg = targets + (size_t)c * T;  // (T) each
        for (int t = 0; t < T; t++) {
            in[t] = dl->window[t];
            tg[t] = dl->window[t + 1];
        }
    }
    return 0;
}

int dataloader_scan(DataLoader *dl, char *err, size_t errlen) {
    // one pass over every shard in 1 Mi-token chunks (2 MiB of buffer): at a
    // disk's 1 GB/s a 10B-token corpus takes 20 s, against hours of training
    // that a bad token found at iteration 141 would throw away
    enum { CHUNK = 1 << 20 };
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) { snprintf(err, errlen, "out of host memory"); return -1; }
    int rc = 0;
    for (int64_t pos = 0; pos < dl->ntok && rc == 0; pos += CHUNK) {
        int64_t n = dl->ntok - pos < CHUNK ? dl->ntok - pos : CHUNK;
        rc = read_tokens(dl, pos, n, buf, err, errlen);
    }
    free(buf);
    return rc;
}

// ---- the training order ----

int dataloader_set_rank(DataLoader *dl, int64_t global_batch, int b, int dp, int r, char *err, size_t errlen) {
    if (b < 1 || dp < 1 || r < 0 || r >= dp || global_batch < 1 || global_batch % ((int64_t)b * dp) != 0) {
        snprintf(err, errlen, "data loader: global_batch %lld, micro-batch b %d, dp %d, rank %d: need b >= 1, "
                 "0 <= rank < dp and global_batch a multiple of b*dp = %lld (hint: check [train] global_batch "
                 "and the plan's b and dp)", (long long)global_batch, b, dp, r, (long long)b * dp);
        return -1;
    }
    dl->global_batch = global_batch;
    dl->b = b;
    dl->dp = dp;
    dl->rank = r;
    dl->micro_batches = (int)(global_batch / ((int64_t)b * dp));
    return 0;
}

int dataloader_next_batch(DataLoader *dl, int64_t it, int g, int32_t *inputs, int32_t *targets, char *err, size_t errlen) {
    if (dl->global_batch == 0) {
        snprintf(err, errlen, "data loader: dataloader_next_batch before dataloader_set_rank");
        return -1;
    }
    if (it < 0 || g < 0 || g >= dl->micro_batches) {
        snprintf(err, errlen, "data loader: iteration %lld, micro-batch %d is out of range (micro-batches 0..%d)",
                 (long long)it, g, dl->micro_batches - 1);
        return -1;
    }
    int64_t first = dataloader_first_sample(it, g, dl->global_batch, dl->b, dl->dp, dl->rank);
    return dataloader_read(dl, first, dl->b, inputs, targets, err, errlen);
}

int64_t dataloader_position(const DataLoader *dl, int64_t it) { return it * dl->global_batch; }

int dataloader_micro_batches(const DataLoader *dl) { return dl->micro_batches; }
