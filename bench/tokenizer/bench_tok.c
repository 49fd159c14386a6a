// bench_tok.c - kda tokenizer throughput: encodes a text file with one thread (whole file as one
// string, best of R runs) and with all threads (file cut at blank lines into ~64 KB chunks,
// chunks encoded in parallel on one shared tokenizer). Prints one JSON line per mode.
//
//   bench_tok <tokenizer> <text file> [repeats=3]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tok/tok.h"

typedef struct {
    size_t off, len;
} Chunk;

static size_t make_chunks(const char *s, size_t n, Chunk *out, size_t target) {
    size_t k = 0, start = 0;
    while (start < n) {
        size_t end = start + target < n ? start + target : n;
        const char *p = end < n ? strstr(s + end, "\n\n") : NULL; // next paragraph break
        end = p ? (size_t)(p - s) + 2 : n;
        out[k++] = (Chunk){start, end - start};
        start = end;
    }
    return k;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tok <tokenizer> <text> [repeats]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    KdaError err;
    KdaTokenizer *t;
    double t0 = now_seconds();
    if (tok_load(&t, argv[1], &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double load_s = now_seconds() - t0;
    size_t n;
    char *text = read_file(argv[2], &n, &err);
    if (!text) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    TokIds ids = {0};
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        ids.n = 0;
        t0 = now_seconds();
        tok_encode(t, text, n, 0, &ids, &err);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    printf(
        "{\"impl\": \"kda\", \"threads\": 1, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, "
        "\"load_s\": %.3f}\n",
        n, ids.n, best, load_s);
    Chunk *chunks = malloc((n / 65536 + 2) * sizeof *chunks);
    size_t nc = make_chunks(text, n, chunks, 65536);
    int nt = omp_get_max_threads();
    best = 1e30;
    size_t total = 0;
    for (int r = 0; r < reps; r++) {
        total = 0;
        t0 = now_seconds();
#pragma omp parallel reduction(+ : total)
        {
            TokIds local = {0};
            KdaError e;
#pragma omp for schedule(dynamic, 1)
            for (size_t c = 0; c < nc; c++) {
                local.n = 0;
                tok_encode(t, text + chunks[c].off, chunks[c].len, 0, &local, &e);
                total += local.n;
            }
            tok_ids_free(&local);
        }
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    printf("{\"impl\": \"kda\", \"threads\": %d, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": "
           "%.6f}\n",
           nt, n, total, best);
    tok_ids_free(&ids);
    free(chunks);
    free(text);
    tok_free(t);
    return 0;
}
