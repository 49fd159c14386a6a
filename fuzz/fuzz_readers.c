// fuzz_readers.c - libFuzzer target for the text readers of `kda tokenize`
// (src/data/readers.h: JSONL / .txt, plain, gzip or zstd). The reader takes paths, so each
// run writes the input to a file in a per-process folder under /tmp.
//
// Input layout: byte 0 selects the mode, the rest is the file's content.
//   mode & 3         extension: 0 .jsonl, 1 .txt, 2 .jsonl.gz, 3 .txt.zst
//   mode & 4         for .gz/.zst: the harness compresses the data (valid stream); otherwise
//                    the bytes are written as they are (corrupt/truncated streams)
//   mode & 8         txt_lines = 1
//   mode & 16        skip_bad = 1
//   mode & 32        json_key "a" instead of "text"
//   mode & 64        the same file is given twice (exercises the switch between files)
// Contract checked: docreader_next returns 1 (document), 0 (end) or -1 with a non-empty
// one-line message that names the file; every document's bytes are readable (ASan); stats
// add up (docs returned, files done).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "data/readers.h"

static void put(const char *path, const uint8_t *p, size_t n, int how) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (how == 1) { // gzip
        gzFile g = gzdopen(fileno(f), "wb1");
        if (!g) abort();
        if (n && gzwrite(g, p, (unsigned)n) != (int)n) abort();
        gzclose(g); // closes the descriptor too
        return;
    }
    if (how == 2) { // zstd
        size_t cap = ZSTD_compressBound(n);
        void *z = malloc(cap ? cap : 1);
        size_t zn = ZSTD_compress(z, cap, p, n, 1);
        if (ZSTD_isError(zn)) abort();
        fwrite(z, 1, zn, f);
        free(z);
    } else if (n && fwrite(p, 1, n, f) != n) {
        abort();
    }
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kda_fuzz_readers_%d", (int)getpid());
        mkdir(dir, 0700);
    }
    if (size < 1) return 0;
    static const char *const ext[4] = {".jsonl", ".txt", ".jsonl.gz", ".txt.zst"};
    int mode = data[0], e = mode & 3;
    char path[128];
    snprintf(path, sizeof path, "%s/in%s", dir, ext[e]);
    put(path, data + 1, size - 1, (mode & 4) ? (e == 2 ? 1 : e == 3 ? 2 : 0) : 0);

    DocReaderOptions opt = {.json_key = (mode & 32) ? "a" : "text",
                            .txt_lines = (mode & 8) != 0,
                            .skip_bad = (mode & 16) != 0};
    char *paths[2] = {path, path};
    DocReader *r;
    KdaError err;
    if (docreader_open(&r, paths, (mode & 64) ? 2 : 1, &opt, &err)) abort(); // the file exists
    const char *text;
    size_t len;
    int rc;
    int64_t docs = 0;
    while ((rc = docreader_next(r, &text, &len, &err)) == 1) {
        docs++;
        if (len && !text) abort();
        unsigned h = 0;
        for (size_t i = 0; i < len; i++)
            h += (unsigned char)text[i]; // every byte readable
        (void)h;
        (void)docreader_where(r);
    }
    if (rc == -1) {
        if (!err.msg[0] || strchr(err.msg, '\n') || !strstr(err.msg, path)) {
            fprintf(stderr, "bad message: %s\n", err.msg);
            abort();
        }
    } else if (rc != 0) {
        abort();
    } else {
        DocReaderStats st;
        docreader_stats(r, &st);
        if (st.docs != docs || st.files_done != st.n_files) abort();
    }
    docreader_close(r);
    return 0;
}
