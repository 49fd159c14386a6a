// fuzz_eval_tasks.c - libFuzzer target for the eval task loaders (src/eval/tasks.h): the
// HF-layout JSONL loader eval_task_load_jsonl for each task, and the OLMo request loader
// eval_task_load_olmo. Both read files, so each run writes the input under a per-process
// folder in /tmp (page cache only; a few µs).
//
// Input layout: byte 0 selects the mode, the rest is the data.
//   (mode & 0x3f) % 9 = 0..7  task arc_easy, arc_challenge, openbookqa, piqa, hellaswag,
//                    winogrande, mmlu, race: the data is the task's .jsonl file;
//   (mode & 0x3f) % 9 = 8  OLMo: the data up to the first NUL byte is config.json, the rest is
//                    requests.jsonl.gz (no NUL: no config.json);
//   mode & 0x40      the harness gzips the file (exercises zlib's path with valid streams;
//                    otherwise the bytes are read as they are, which gzread passes through);
//   mode & 0x80      limit = 2 documents (per subject for mmlu).
// Contract checked: a rejection gives a non-empty one-line message that starts with the task
// name; an accepted task has documents, each with >= 1 choice, 0 <= gold < n_choices, non-NULL
// context and continuation strings and norm_len >= 0; mmlu subtask indexes are in range.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "eval/tasks.h"

static const char *const g_names[8] = {"arc_easy",  "arc_challenge", "openbookqa", "piqa",
                                       "hellaswag", "winogrande",    "mmlu",       "race"};

static void put(const char *path, const uint8_t *p, size_t n, int gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb1");
        if (!f) abort();
        if (n && gzwrite(f, p, (unsigned)n) != (int)n) abort();
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) abort();
        if (n && fwrite(p, 1, n, f) != n) abort();
        fclose(f);
    }
}

static void check_task(const EvalTask *t) {
    if (t->n_docs <= 0) abort();
    for (int64_t i = 0; i < t->n_docs; i++) {
        const EvalDoc *d = &t->docs[i];
        if (d->n_choices < 1 || d->gold < 0 || d->gold >= d->n_choices) abort();
        if (d->subtask < 0 || (d->subtask > 0 && d->subtask >= t->n_subtasks)) abort();
        for (int k = 0; k < d->n_choices; k++) {
            if (!d->req[k].context || !d->req[k].continuation || d->norm_len[k] < 0) abort();
            (void)strlen(d->req[k].context); // reads every byte: ASan checks the string
            (void)strlen(d->req[k].continuation);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kda_fuzz_eval_%d", (int)getpid());
        mkdir(dir, 0700);
    }
    if (size < 1) return 0;
    int mode = data[0], gz = (mode & 0x40) != 0;
    int64_t limit = (mode & 0x80) ? 2 : 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    char path[128], cfg[128];
    EvalTask t;
    KdaError err;
    const char *name;
    int rc;
    if ((mode & 0x3f) % 9 == 8) {
        name = "olmo:arc_easy/rc_0shot";
        snprintf(path, sizeof path, "%s/requests.jsonl.gz", dir);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        const uint8_t *nul = memchr(p, 0, n);
        if (nul) {
            put(cfg, p, (size_t)(nul - p), 0);
            n -= (size_t)(nul - p) + 1, p = nul + 1;
        } else {
            unlink(cfg);
        }
        put(path, p, n, gz);
        rc = eval_task_load_olmo(&t, name, dir, limit, &err);
    } else {
        name = g_names[(mode & 0x3f) % 9];
        snprintf(path, sizeof path, "%s/%s.jsonl%s", dir, name, gz ? ".gz" : "");
        put(path, p, n, gz);
        rc = eval_task_load_jsonl(&t, name, path, limit, &err);
        unlink(path);
    }
    if (rc == 0) {
        check_task(&t);
        eval_task_free(&t);
    } else if (!err.msg[0] || strchr(err.msg, '\n') || strncmp(err.msg, name, strlen(name))) {
        fprintf(stderr, "bad message: %s\n", err.msg);
        abort();
    }
    return 0;
}
