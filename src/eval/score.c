// score.c - reading and validating the JSON-lines input of `kda score` (contract in score.h).
#include "eval/score.h"

#include <stdlib.h>
#include <string.h>

#include "core/json.h" // defines: JsonDoc, json_parse, json_get
#include "core/util.h" // defines: read_file

// Fills *s from one JSON object; -1 with "what" (no file:line prefix) on error.
static int parse_obj_(ScoreSeq *s, const JsonValue *root, const KdaTokenizer *tok, int tok_flags,
                      int64_t vocab, KdaError *err) {
    if (root->type != JSON_OBJECT)
        return kda_fail(err, "expected an object {\"ids\": [...]} or {\"text\": \"...\"}");
    const JsonValue *ids = json_get(root, "ids"), *text = json_get(root, "text");
    if (ids && text) return kda_fail(err, "give either \"ids\" or \"text\", not both");
    if (ids) {
        if (ids->type != JSON_ARRAY) return kda_fail(err, "\"ids\" must be an array of integers");
        s->ids = kda_malloc((ids->len + 1) * sizeof(int32_t));
        for (size_t i = 0; i < ids->len; i++) {
            const JsonValue *v = &ids->items[i];
            if (v->type != JSON_NUMBER || !v->is_int)
                return kda_fail(err, "ids[%zu] is not an integer", i);
            if (v->i < 0 || v->i >= vocab)
                return kda_fail(err, "ids[%zu] = %lld is outside the model vocabulary [0, %lld)", i,
                                (long long)v->i, (long long)vocab);
            s->ids[i] = (int32_t)v->i;
        }
        s->n = (int64_t)ids->len;
    } else if (text) {
        if (text->type != JSON_STRING) return kda_fail(err, "\"text\" must be a string");
        if (!tok) return kda_fail(err, "a \"text\" line needs --tokenizer (or give \"ids\")");
        TokIds out = {0};
        if (tok_encode(tok, text->str, text->len, tok_flags, &out, err)) return -1;
        s->ids = out.ids; // TokIds buffers come from kda_realloc: plain free() releases them
        s->n = (int64_t)out.n;
        for (int64_t i = 0; i < s->n; i++)
            if (s->ids[i] >= vocab)
                return kda_fail(err,
                                "the tokenizer produced id %d, outside the model "
                                "vocabulary [0, %lld)",
                                s->ids[i], (long long)vocab);
    } else {
        return kda_fail(err, "missing \"ids\" (or \"text\")");
    }
    if (s->n < 2) return kda_fail(err, "%lld token(s); scoring needs at least 2", (long long)s->n);
    return 0;
}

static int parse_line_(ScoreSeq *s, const char *line, size_t len, const KdaTokenizer *tok,
                       int tok_flags, int64_t vocab, KdaError *err) {
    JsonDoc doc;
    if (json_parse(&doc, line, len, err)) return -1;
    int rc = parse_obj_(s, &doc.root, tok, tok_flags, vocab, err);
    json_free(&doc);
    return rc;
}

int score_read_input(const char *file, const KdaTokenizer *tok, int tok_flags, int64_t vocab,
                     ScoreSeq **seqs_out, int64_t *n_out, KdaError *err) {
    size_t len;
    char *buf = read_file(file, &len, err);
    if (!buf) return -1;
    ScoreSeq *seqs = NULL;
    int64_t cnt = 0, cap = 0, lineno = 0;
    for (size_t pos = 0; pos < len;) {
        size_t end = pos;
        while (end < len && buf[end] != '\n')
            end++;
        lineno++;
        size_t a = pos, b = end;
        while (a < b && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r'))
            a++;
        while (b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\r'))
            b--;
        pos = end + 1;
        if (cnt == cap) seqs = kda_realloc(seqs, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *seqs);
        memset(&seqs[cnt], 0, sizeof *seqs);
        if (b == a) { // blank line: an empty entry, so that output line i is input line i
            cnt++;
            continue;
        }
        KdaError e;
        if (parse_line_(&seqs[cnt++], buf + a, b - a, tok, tok_flags, vocab, &e)) {
            kda_fail(err, "%s:%lld: %s", file, (long long)lineno, e.msg);
            score_seqs_free(seqs, cnt);
            free(buf);
            return -1;
        }
    }
    free(buf);
    *seqs_out = seqs;
    *n_out = cnt;
    return 0;
}

void score_seqs_free(ScoreSeq *seqs, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        free(seqs[i].ids);
    free(seqs);
}
