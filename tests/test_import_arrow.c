// test_import_arrow.c - HF datasets save_to_disk shards (tests/data/hf_ids: FLA's shape, an
// input_ids list column and text) -> .bin/.idx: ids copied without a tokenizer, equal to the
// text column tokenized with the Llama 3.2-style tokenizer, empty rows skipped, bad ids and a
// missing column rejected.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/json.h"
#include "core/util.h"
#include "data/indexed.h"
#include "test.h"

static char g_out[1 << 14];

static int kda_(const char *args) {
    return test_run_kda(g_out, sizeof g_out, NULL, args);
}

KDA_TEST(import_arrow_input_ids_and_text) {
    const char *d = test_tmpdir();
    char args[16384], pa[4096], pb[4096];
    char src[4096];
    snprintf(src, sizeof src, "%s", test_data("hf_ids"));
    snprintf(pa, sizeof pa, "%s/ids", d);
    snprintf(args, sizeof args, "tokenize --input %s --json-key input_ids --output-prefix %s", src,
             pa);
    CHECK_MSG(kda_(args) == 0 && strstr(g_out, "4 documents") && strstr(g_out, "(ids copied)"),
              "%s", g_out);
    IndexedDataset ds;
    KdaError err;
    CHECK_MSG(indexed_open(&ds, pa, &err) == 0, "%s", err.msg);
    JsonDoc j;
    char exp[4200];
    snprintf(exp, sizeof exp, "%s/expected.json", src);
    CHECK(json_parse_file(&j, exp, &err) == 0);
    const JsonValue *ids = json_get(&j.root, "input_ids");
    int64_t seq = 0, same = 0, want = 0;
    for (size_t r = 0; ids && r < ids->len; r++) {
        const JsonValue *row = &ids->items[r];
        if (row->len == 0) continue; // an empty document is skipped
        want++;
        int64_t t[64] = {0};
        int64_t n = indexed_read_tokens(&ds, seq++, 0, t, 64);
        int ok = n == (int64_t)row->len;
        for (int64_t i = 0; ok && i < n; i++)
            ok = t[i] == row->items[i].i;
        same += ok;
    }
    CHECK(want == 4 && same == 4 && ds.idx.n_seq == 4);
    json_free(&j);
    indexed_close(&ds);
    // the text column, tokenized: the same .bin
    snprintf(pb, sizeof pb, "%s/text", d);
    snprintf(args, sizeof args,
             "tokenize --input %s --json-key text --tokenizer assets/tokenizers/llama3 "
             "--output-prefix %s --quiet",
             src, pb);
    CHECK_MSG(kda_(args) == 0, "%s", g_out);
    char ba[4200], bb[4200];
    snprintf(ba, sizeof ba, "%s.bin", pa);
    snprintf(bb, sizeof bb, "%s.bin", pb);
    CHECK(test_files_equal(ba, bb));
    // ids above --vocab-size, a missing column, text without a tokenizer
    snprintf(args, sizeof args,
             "tokenize --input %s --json-key input_ids --vocab-size 1000 --output-prefix %s/v", src,
             d);
    CHECK(kda_(args) == 1 && strstr(g_out, "outside [0, 1000)") && strstr(g_out, "row 0"));
    snprintf(args, sizeof args, "tokenize --input %s --json-key ids --output-prefix %s/v", src, d);
    CHECK(kda_(args) == 1 && strstr(g_out, "no column 'ids'"));
    snprintf(args, sizeof args, "tokenize --input %s --json-key text --output-prefix %s/v", src, d);
    CHECK(kda_(args) == 1 && strstr(g_out, "needs --tokenizer"));
    snprintf(args, sizeof args, "%s/v.idx", d);
    CHECK(!path_exists(args)); // nothing written on an error
}
