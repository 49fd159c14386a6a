// test_score.c - `kda score` end to end on a tiny model saved to a temp dir: output matches a
// direct kda_model_forward, and malformed input lines give FILE:LINE errors.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/json.h"
#include "core/util.h"
#include "eval/score.h"
#include "io/model_io.h"
#include "model/model.h"
#include "test.h"

static void tiny_dir_(KdaModel *m, const char *dir) {
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 32, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 8;
    c.expand_v = 1.0, c.intermediate_size_raw = 48, c.vocab_size = 50, c.tie_word_embeddings = 1;
    KdaError err;
    KDA_ASSERT(kda_config_derive(&c, "tiny", &err) == 0);
    KDA_ASSERT(kda_model_init(m, &c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, 3);
    CHECK(kda_model_save_dir(dir, &m->cfg, &m->table, m->params, KDA_DTYPE_F32, &err) == 0);
}

static void write_text_(const char *path, const char *s) {
    KdaError err;
    KDA_ASSERT(write_file_atomic(path, s, strlen(s), &err) == 0);
}

KDA_TEST(score_matches_model_forward) {
    char dir[1024], in[1024], out[1024];
    KdaModel m;
    snprintf(dir, sizeof dir, "%s/model", test_tmpdir());
    tiny_dir_(&m, dir);
    snprintf(in, sizeof in, "%s/in.jsonl", test_tmpdir());
    snprintf(out, sizeof out, "%s/out.jsonl", test_tmpdir());
    write_text_(in, "{\"ids\": [1, 2, 3, 4, 5]}\n\n  {\"ids\": [7, 7]}\r\n");
    char *argv[] = {"--model", dir, "--input", in, "--output", out, "--device", "cpu"};
    CHECK_EQ_INT(cmd_score(8, argv), 0);
    size_t n;
    KdaError err;
    char *txt = read_file(out, &n, &err);
    CHECK(txt != NULL);
    if (!txt) return;
    // output line i is input line i: the blank line 2 gives a 0-token record with null losses
    // (issue 15, finding 13: blank lines used to be dropped, shifting the numbering)
    int32_t ids[3][5] = {{1, 2, 3, 4, 5}, {0}, {7, 7}};
    int64_t lens[3] = {5, 0, 2};
    char *line = txt;
    for (int i = 0; i < 3; i++) {
        char *nl = strchr(line, '\n');
        CHECK(nl != NULL);
        if (!nl) break;
        JsonDoc d;
        CHECK(json_parse(&d, line, (size_t)(nl - line), &err) == 0);
        if (lens[i] == 0) {
            const JsonValue *l = json_get(&d.root, "loss");
            CHECK_MSG(l && l->type == JSON_NULL, "%.*s", (int)(nl - line), line);
            json_free(&d);
            line = nl + 1;
            continue;
        }
        float loss, nll[5];
        CHECK(kda_model_forward(&m, ids[i], NULL, 1, lens[i], nll, NULL, &loss, &err) == 0);
        int64_t tokens;
        double l, s;
        CHECK(json_get_int(&d.root, "tokens", &tokens) == 0 && tokens == lens[i]);
        CHECK(json_get_num(&d.root, "loss", &l) == 0 && json_get_num(&d.root, "sum_nll", &s) == 0);
        CHECK_NEAR(l, loss, 1e-6 * loss); // same code path; only print rounding
        CHECK_NEAR(s, loss * (lens[i] - 1), 1e-5 * s);
        double sum = 0.0; // printed with 17 digits: the double sum itself, not 9 digits of it
        for (int64_t t = 0; t < lens[i]; t++)
            sum += nll[t];
        CHECK_MSG(s == sum, "sum_nll %.17g vs %.17g", s, sum);
        json_free(&d);
        line = nl + 1;
    }
    CHECK(*line == 0);
    free(txt);
    kda_model_free(&m);
}

KDA_TEST(score_rejects_bad_lines) {
    char in[1024];
    snprintf(in, sizeof in, "%s/bad.jsonl", test_tmpdir());
    const char *cases[][2] = {
        {"{\"ids\": [1, 2]}\n{\"ids\": [1, 50]}\n", ":2: ids[1] = 50 is outside"},
        {"{\"ids\": [3]}\n", ":1: 1 token(s)"},
        {"\n{\"ids\": [1, 2]\n", ":2: "},
        {"{\"text\": \"hello\"}\n", ":1: a \"text\" line needs --tokenizer"},
        {"{\"ids\": [1, 2.5]}\n", ":1: ids[1] is not an integer"},
        {"[1, 2]\n", ":1: expected an object"},
        {"{\"ids\": [-1, 2]}\n", ":1: ids[0] = -1 is outside"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_text_(in, cases[i][0]);
        ScoreSeq *seqs = NULL;
        int64_t n = 0;
        KdaError err = {{0}};
        CHECK_EQ_INT(score_read_input(in, NULL, 0, 50, &seqs, &n, &err), -1);
        CHECK_MSG(strstr(err.msg, in) && strstr(err.msg, cases[i][1]), "case %zu: '%s'", i,
                  err.msg);
    }
    write_text_(in, "{\"ids\": [0, 49, 3]}\n\n");
    ScoreSeq *seqs = NULL;
    int64_t n = 0;
    KdaError err;
    CHECK(score_read_input(in, NULL, 0, 50, &seqs, &n, &err) == 0);
    CHECK(n == 2 && seqs[0].n == 3 && seqs[0].ids[1] == 49 && seqs[1].n == 0);
    score_seqs_free(seqs, n);
}

// A model whose weights are NaN scores NaN: the output says null (valid JSON), not "nan"
// (issue 15, finding 4).
KDA_TEST(score_nonfinite_is_null) {
    char dir[1024], in[1024], out[1024];
    KdaModel m;
    snprintf(dir, sizeof dir, "%s/model", test_tmpdir());
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 32, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 8;
    c.expand_v = 1.0, c.intermediate_size_raw = 48, c.vocab_size = 50, c.tie_word_embeddings = 1;
    KdaError err;
    CHECK(kda_config_derive(&c, "tiny", &err) == 0);
    CHECK(kda_model_init(&m, &c, &err) == 0);
    for (int64_t i = 0; i < m.table.total_numel; i++)
        m.params[i] = NAN;
    CHECK(kda_model_save_dir(dir, &m.cfg, &m.table, m.params, KDA_DTYPE_F32, &err) == 0);
    kda_model_free(&m);
    snprintf(in, sizeof in, "%s/in.jsonl", test_tmpdir());
    snprintf(out, sizeof out, "%s/out.jsonl", test_tmpdir());
    write_text_(in, "{\"ids\": [1, 2, 3]}\n");
    char *argv[] = {"--model", dir, "--input", in, "--output", out, "--device", "cpu"};
    CHECK_EQ_INT(cmd_score(8, argv), 0);
    size_t n;
    char *txt = read_file(out, &n, &err);
    JsonDoc d;
    CHECK_MSG(txt && json_parse(&d, txt, n, &err) == 0, "%s", txt ? txt : err.msg);
    if (!kda_test_failed()) {
        const JsonValue *l = json_get(&d.root, "loss");
        CHECK(l && l->type == JSON_NULL);
        json_free(&d);
    }
    free(txt);
}

// A score line with "ids" twice is an error naming FILE:LINE, not "first wins" (issue 15,
// finding 6); so is a config.json with a key twice (kda and FLA must read the same model).
KDA_TEST(score_and_config_reject_duplicate_keys) {
    char in[1024];
    snprintf(in, sizeof in, "%s/dup.jsonl", test_tmpdir());
    write_text_(in, "{\"ids\": [1, 2]}\n{\"ids\": [1, 2], \"ids\": [3, 4]}\n");
    ScoreSeq *seqs = NULL;
    int64_t n = 0;
    KdaError err = {{0}};
    CHECK_EQ_INT(score_read_input(in, NULL, 0, 50, &seqs, &n, &err), -1);
    CHECK_MSG(strstr(err.msg, ":2: ") && strstr(err.msg, "duplicate key \"ids\""), "%s", err.msg);
    size_t len;
    char *cfg = read_file("configs/tiny.json", &len, &err), p[1024];
    CHECK(cfg && cfg[0] == '{');
    if (!cfg) return;
    snprintf(p, sizeof p, "%s/config.json", test_tmpdir());
    char *dup = kda_malloc(len + 64);
    snprintf(dup, len + 64, "{\"allow_neg_eigval\": true, %s", cfg + 1);
    write_text_(p, dup);
    KdaConfig c;
    CHECK(kda_config_load(&c, p, &err) == -1);
    CHECK_MSG(strstr(err.msg, p) && strstr(err.msg, "duplicate key"), "%s", err.msg);
    free(dup);
    free(cfg);
}
