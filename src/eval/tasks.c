// tasks.c - lm-eval task templates, HellaSwag cleaning, RACE problem parsing, task loading
// from JSON lines / Arrow folders / OLMo request files (see tasks.h).
#include "eval/tasks.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"  // defines: utf8_next_lenient, py_isspace, utf8_encode, path_join
#include "data/arrow.h" // defines: ArrowTable, arrow_load_file, arrow_row_json
#include "data/jsonl.h" // defines: jsonl_for_each

// ---- growable string --------------------------------------------------------------------------

typedef struct {
    char *p;
    size_t n, cap;
} Str;

static void str_add(Str *s, const char *x, size_t n) {
    if (s->n + n + 1 > s->cap) {
        s->cap = (s->n + n + 1) * 2 + 16;
        s->p = kda_realloc(s->p, s->cap);
    }
    if (n) memcpy(s->p + s->n, x, n);
    s->n += n;
    s->p[s->n] = 0;
}
static void str_addz(Str *s, const char *x) {
    str_add(s, x, strlen(x));
}
static void str_cp(Str *s, uint32_t cp) {
    unsigned char b[4];
    str_add(s, (const char *)b, utf8_encode(cp, b));
}
static char *str_take(Str *s) {
    if (!s->p) str_add(s, "", 0);
    char *p = s->p;
    memset(s, 0, sizeof *s);
    return p;
}

// ---- Python str semantics ---------------------------------------------------------------------

size_t eval_py_rstrip(const char *s, size_t n) {
    size_t end = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_next_lenient(s, n, i, &cp);
        i += k;
        if (!py_isspace(cp)) end = i;
    }
    return end;
}

size_t eval_py_lstrip(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_next_lenient(s, n, i, &cp);
        if (!py_isspace(cp)) break;
        i += k;
    }
    return i;
}

int64_t eval_py_len(const char *s, size_t n) {
    int64_t len = 0;
    for (size_t i = 0; i < n; len++) {
        uint32_t cp;
        i += utf8_next_lenient(s, n, i, &cp);
    }
    return len;
}

// Simple case mapping for Latin, Latin-1, Latin Extended-A, Greek and Cyrillic (enough for
// the benchmark texts; other scripts are left unchanged).
static uint32_t cp_lower(uint32_t c) {
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
        c != 0x17F) {
        if (c == 0x178) return 0xFF;
        int odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        return odd_upper ? (c % 2 ? c + 1 : c) : (c % 2 ? c : c + 1);
    }
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

static uint32_t cp_upper(uint32_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
        c != 0x17F && c != 0x178) {
        int odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        return odd_upper ? (c % 2 ? c : c - 1) : (c % 2 ? c - 1 : c);
    }
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

char *eval_py_capitalize(const char *s) {
    Str o = {0};
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_next_lenient(s, n, i, &cp);
        if (k == 1 && cp >= 0x80)
            str_add(&o, s + i, 1); // invalid byte: keep
        else
            str_cp(&o, i == 0 ? cp_upper(cp) : cp_lower(cp));
        i += k;
    }
    return str_take(&o);
}

char *eval_hellaswag_preprocess(const char *in) {
    size_t n = strlen(in), a = eval_py_lstrip(in, n);
    size_t e = a + eval_py_rstrip(in + a, n - a);
    Str t = {0}, u = {0}, v = {0};
    for (size_t i = a; i < e; i++) { // text.replace(" [title]", ". ")
        if (e - i >= 8 && !memcmp(in + i, " [title]", 8))
            str_addz(&t, ". "), i += 7;
        else
            str_add(&t, in + i, 1);
    }
    for (size_t i = 0; i < t.n; i++) { // re.sub("\\[.*?\\]", "", text); '.' excludes '\n'
        if (t.p[i] == '[') {
            size_t j = i + 1;
            while (j < t.n && t.p[j] != ']' && t.p[j] != '\n')
                j++;
            if (j < t.n && t.p[j] == ']') {
                i = j;
                continue;
            }
        }
        str_add(&u, t.p + i, 1);
    }
    for (size_t i = 0; i < u.n; i++) { // text.replace("  ", " ")
        str_add(&v, u.p + i, 1);
        if (u.p[i] == ' ' && i + 1 < u.n && u.p[i + 1] == ' ') i++;
    }
    free(t.p), free(u.p);
    return str_take(&v);
}

// ---- document builders ------------------------------------------------------------------------

static void doc_init(EvalDoc *d, int n) {
    memset(d, 0, sizeof *d);
    d->n_choices = n;
    d->req = kda_calloc((size_t)n, sizeof *d->req);
    d->norm_len = kda_calloc((size_t)n, sizeof *d->norm_len);
}

void eval_doc_free(EvalDoc *d) {
    for (int i = 0; d->req && i < d->n_choices; i++)
        free(d->req[i].context), free(d->req[i].continuation);
    free(d->req), free(d->norm_len);
    memset(d, 0, sizeof *d);
}

// Choice i: context ctx (copied), continuation " " + choice, norm_len = len(choice).
static void doc_set(EvalDoc *d, int i, const char *ctx, const char *choice) {
    Str c = {0};
    str_addz(&c, " ");
    str_addz(&c, choice);
    d->req[i].context = kda_strdup(ctx);
    d->req[i].continuation = str_take(&c);
    d->norm_len[i] = eval_py_len(choice, strlen(choice));
}

// A value from the data as shown in a one-line message.
static const char *shown_(const char *v, char *buf, size_t cap) {
    return str_shown(v, strlen(v), 64, buf, cap);
}

static const char *get_str(const JsonValue *o, const char *key, KdaError *err) {
    const JsonValue *v = json_get(o, key);
    if (!v) return kda_fail(err, "missing field '%s'", key), NULL;
    if (v->type != JSON_STRING)
        return kda_fail(err, "field '%s' is %s, expected a string", key, json_type_name(v->type)),
               NULL;
    return v->str;
}

static const JsonValue *get_arr(const JsonValue *o, const char *key, KdaError *err) {
    const JsonValue *v = json_get(o, key);
    if (!v) return kda_fail(err, "missing field '%s'", key), NULL;
    if (v->type != JSON_ARRAY)
        return kda_fail(err, "field '%s' is %s, expected a list", key, json_type_name(v->type)),
               NULL;
    for (size_t i = 0; i < v->len; i++)
        if (v->items[i].type != JSON_STRING)
            return kda_fail(err, "field '%s'[%zu] is %s, expected a string", key, i,
                            json_type_name(v->items[i].type)),
                   NULL;
    return v;
}

// Integer field that may also be a decimal string ("2"); must lie in [lo, hi].
static int get_index(const JsonValue *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                     KdaError *err) {
    const JsonValue *v = json_get(o, key);
    if (!v) return kda_fail(err, "missing field '%s'", key);
    char *end = NULL;
    if (v->type == JSON_NUMBER && v->is_int)
        *out = v->i;
    else if (v->type == JSON_STRING && v->len && (*out = strtoll(v->str, &end, 10), !*end)) {
    } else
        return kda_fail(err, "field '%s' is not an integer", key);
    if (*out < lo || *out > hi)
        return kda_fail(err, "field '%s' is %lld, expected %lld..%lld (one per choice)", key,
                        (long long)*out, (long long)lo, (long long)hi);
    return 0;
}

static int build_arc_like(const JsonValue *row, const char *qkey, const char *fmt, int lstrip_key,
                          EvalDoc *d, KdaError *err) {
    const char *q = get_str(row, qkey, err), *key = q ? get_str(row, "answerKey", err) : NULL;
    const JsonValue *ch = json_get(row, "choices");
    if (!key) return -1;
    if (!ch || ch->type != JSON_OBJECT) return kda_fail(err, "field 'choices' is not an object");
    const JsonValue *text = get_arr(ch, "text", err),
                    *label = text ? get_arr(ch, "label", err) : NULL;
    if (!label) return kda_fail(err, "choices: %s", err->msg);
    if (text->len != label->len || text->len == 0)
        return kda_fail(err, "choices.text has %zu entries but choices.label has %zu", text->len,
                        label->len);
    if (lstrip_key) key += eval_py_lstrip(key, strlen(key));
    int gold = -1;
    for (size_t i = 0; i < label->len && gold < 0; i++)
        if (!strcmp(label->items[i].str, key)) gold = (int)i;
    char sv[300];
    if (gold < 0)
        return kda_fail(err, "answerKey '%s' is not one of choices.label",
                        shown_(key, sv, sizeof sv));
    Str ctx = {0};
    str_addz(&ctx, fmt[0] ? fmt : "");
    str_addz(&ctx, q);
    if (fmt[0]) str_addz(&ctx, "\nAnswer:");
    doc_init(d, (int)text->len);
    d->gold = gold;
    for (size_t i = 0; i < text->len; i++)
        doc_set(d, (int)i, ctx.p, text->items[i].str);
    free(ctx.p);
    return 0;
}

static int build_piqa(const JsonValue *row, EvalDoc *d, KdaError *err) {
    const char *goal = get_str(row, "goal", err), *s1 = goal ? get_str(row, "sol1", err) : NULL;
    const char *s2 = s1 ? get_str(row, "sol2", err) : NULL;
    int64_t label;
    if (!s2 || get_index(row, "label", 0, 1, &label, err)) return -1;
    Str ctx = {0};
    str_addz(&ctx, "Question: "), str_addz(&ctx, goal), str_addz(&ctx, "\nAnswer:");
    doc_init(d, 2);
    d->gold = (int)label;
    doc_set(d, 0, ctx.p, s1), doc_set(d, 1, ctx.p, s2);
    free(ctx.p);
    return 0;
}

static int build_hellaswag(const JsonValue *row, EvalDoc *d, KdaError *err) {
    const char *act = get_str(row, "activity_label", err);
    const char *ca = act ? get_str(row, "ctx_a", err) : NULL,
               *cb = ca ? get_str(row, "ctx_b", err) : NULL;
    const JsonValue *ends = cb ? get_arr(row, "endings", err) : NULL;
    int64_t label;
    if (!ends) return -1;
    if (ends->len == 0) return kda_fail(err, "field 'endings' is empty");
    if (get_index(row, "label", 0, (int64_t)ends->len - 1, &label, err)) return -1;
    char *cap = eval_py_capitalize(cb);
    Str raw = {0};
    str_addz(&raw, act), str_addz(&raw, ": "), str_addz(&raw, ca), str_addz(&raw, " ");
    str_addz(&raw, cap);
    char *query = eval_hellaswag_preprocess(raw.p);
    doc_init(d, (int)ends->len);
    d->gold = (int)label;
    for (size_t i = 0; i < ends->len; i++) {
        char *e = eval_hellaswag_preprocess(ends->items[i].str);
        doc_set(d, (int)i, query, e);
        free(e);
    }
    free(cap), free(raw.p), free(query);
    return 0;
}

static int build_winogrande(const JsonValue *row, EvalDoc *d, KdaError *err) {
    const char *s = get_str(row, "sentence", err), *o1 = s ? get_str(row, "option1", err) : NULL;
    const char *o2 = o1 ? get_str(row, "option2", err) : NULL;
    int64_t ans;
    if (!o2 || get_index(row, "answer", 1, 2, &ans, err)) return -1;
    const char *blank = strchr(s, '_');
    if (!blank) return kda_fail(err, "field 'sentence' has no '_' blank");
    size_t i = (size_t)(blank - s), rest = strlen(blank + 1), a = eval_py_lstrip(blank + 1, rest);
    Str cont = {0};
    str_addz(&cont, " ");
    str_add(&cont, blank + 1 + a, eval_py_rstrip(blank + 1 + a, rest - a));
    doc_init(d, 2);
    d->gold = (int)ans - 1;
    const char *opt[2] = {o1, o2};
    for (int k = 0; k < 2; k++) {
        Str ctx = {0};
        str_add(&ctx, s, i), str_addz(&ctx, opt[k]);
        d->req[k].context = str_take(&ctx);
        d->req[k].continuation = kda_strdup(cont.p);
        d->norm_len[k] = eval_py_len(cont.p + 1, cont.n - 1);
    }
    free(cont.p);
    return 0;
}

static int build_mmlu(const JsonValue *row, const char *subject, EvalDoc *d, KdaError *err) {
    const char *q = get_str(row, "question", err);
    const JsonValue *ch = q ? get_arr(row, "choices", err) : NULL;
    if (!ch) return -1;
    if (!subject && !(subject = get_str(row, "subject", err))) return -1;
    if (ch->len != 4) return kda_fail(err, "field 'choices' has %zu entries, expected 4", ch->len);
    int64_t ans;
    const JsonValue *av = json_get(row, "answer");
    if (av && av->type == JSON_STRING && av->len == 1 && av->str[0] >= 'A' && av->str[0] <= 'D')
        ans = av->str[0] - 'A';
    else if (get_index(row, "answer", 0, 3, &ans, err))
        return -1;
    Str ctx = {0};
    str_addz(&ctx, "The following are multiple choice questions (with answers) about ");
    for (const char *p = subject; *p; p++)
        str_add(&ctx, *p == '_' ? " " : p, 1);
    str_addz(&ctx, ".\n\n");
    size_t qn = strlen(q), qa = eval_py_lstrip(q, qn);
    str_add(&ctx, q + qa, eval_py_rstrip(q + qa, qn - qa));
    static const char *letters[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++) {
        str_addz(&ctx, "\n"), str_addz(&ctx, letters[i]), str_addz(&ctx, ". ");
        str_addz(&ctx, ch->items[i].str);
    }
    str_addz(&ctx, "\nAnswer:");
    doc_init(d, 4);
    d->gold = (int)ans;
    for (int i = 0; i < 4; i++)
        doc_set(d, i, ctx.p, letters[i]);
    free(ctx.p);
    return 0;
}

// ---- Python literal (RACE "problems" string) -> JSON text -------------------------------------

static void json_esc(Str *o, const char *s, size_t n) {
    str_addz(o, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char b[8];
        if (c == '"' || c == '\\')
            b[0] = '\\', b[1] = (char)c, str_add(o, b, 2);
        else if (c < 0x20)
            snprintf(b, sizeof b, "\\u%04x", c), str_addz(o, b);
        else
            str_add(o, s + i, 1);
    }
    str_addz(o, "\"");
}

static int hexval(const char *p, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + (uint32_t)d;
    }
    return *out = v, 0;
}

static int pylit_string(const char **pp, const char *end, Str *o) {
    const char *p = *pp;
    char q = *p++;
    Str s = {0};
    while (p < end && *p != q) {
        if (*p != '\\') {
            str_add(&s, p++, 1);
            continue;
        }
        if (++p >= end) break;
        char c = *p++;
        uint32_t cp;
        int nh = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (nh) {
            if (end - p < nh || hexval(p, nh, &cp) || cp > 0x10FFFF) break;
            p += nh;
            str_cp(&s, cp); // \xhh in a str literal is the code point hh, like \u00hh
            continue;
        }
        const char *m = strchr("nrtbfva0\\'\"\n", c);
        if (!m || !c) break;
        static const char rep[] = "\n\r\t\b\f\v\a\0\\'\"";
        if (c != '\n') str_add(&s, &rep[m - "nrtbfva0\\'\"\n"], 1); // backslash-newline: nothing
    }
    if (p >= end) return free(s.p), -1;
    json_esc(o, s.p ? s.p : "", s.n);
    free(s.p);
    *pp = p + 1;
    return 0;
}

static void skip_ws(const char **p, const char *end) {
    while (*p < end && (**p == ' ' || **p == '\n' || **p == '\t' || **p == '\r'))
        (*p)++;
}

static int pylit_value(const char **p, const char *end, Str *o, int depth) {
    skip_ws(p, end);
    if (*p >= end || depth > 16) return -1;
    char c = **p;
    if (c == '\'' || c == '"') return pylit_string(p, end, o);
    if (c == '[' || c == '{') {
        char close = c == '[' ? ']' : '}';
        str_add(o, c == '[' ? "[" : "{", 1);
        (*p)++;
        for (int first = 1;; first = 0) {
            skip_ws(p, end);
            if (*p < end && **p == close) break;
            if (!first) str_addz(o, ", ");
            if (pylit_value(p, end, o, depth + 1)) return -1;
            skip_ws(p, end);
            if (c == '{') {
                if (*p >= end || **p != ':') return -1;
                (*p)++, str_addz(o, ": ");
                if (pylit_value(p, end, o, depth + 1)) return -1;
                skip_ws(p, end);
            }
            if (*p < end && **p == ',')
                (*p)++;
            else if (*p >= end || **p != close)
                return -1;
        }
        (*p)++;
        str_add(o, &close, 1);
        return 0;
    }
    static const char *words[3][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(words[i][0]);
        if ((size_t)(end - *p) >= k && !memcmp(*p, words[i][0], k))
            return *p += k, str_addz(o, words[i][1]), 0;
    }
    const char *s = *p;
    while (*p < end && ((**p >= '0' && **p <= '9') || **p == '-' || **p == '.'))
        (*p)++;
    if (*p == s) return -1;
    str_add(o, s, (size_t)(*p - s));
    return 0;
}

// ---- RACE -------------------------------------------------------------------------------------

static int race_answer(const JsonValue *prob, size_t k, const char **text, int *idx,
                       KdaError *err) {
    const char *a = get_str(prob, "answer", err);
    const JsonValue *opts = a ? get_arr(prob, "options", err) : NULL;
    if (!opts) return kda_fail(err, "problems[%zu]: %s", k, err->msg);
    char sv[300];
    if (strlen(a) != 1 || a[0] < 'A' || a[0] > 'D' || (size_t)(a[0] - 'A') >= opts->len)
        return kda_fail(err,
                        "problems[%zu]: answer '%s' is not a letter A-D naming one of its "
                        "%zu options",
                        k, shown_(a, sv, sizeof sv), opts->len);
    *idx = a[0] - 'A';
    *text = opts->items[*idx].str;
    return 0;
}

static int build_race_from(const char *article, const JsonValue *probs, EvalDoc *d, KdaError *err) {
    if (probs->type != JSON_ARRAY || probs->len == 0)
        return kda_fail(err, "field 'problems' is not a non-empty list");
    Str ctx = {0};
    str_addz(&ctx, "Article: "), str_addz(&ctx, article), str_addz(&ctx, "\n\n");
    for (size_t k = 0; k < probs->len; k++) {
        const JsonValue *pr = &probs->items[k];
        const char *q = get_str(pr, "question", err), *ans = NULL;
        int idx = 0;
        if (!q) return free(ctx.p), kda_fail(err, "problems[%zu]: %s", k, err->msg);
        if (race_answer(pr, k, &ans, &idx, err)) return free(ctx.p), -1;
        size_t qn = strlen(q);
        if (k + 1 == probs->len) {
            const JsonValue *opts = json_get(pr, "options");
            if (opts->len != 4)
                return free(ctx.p),
                       kda_fail(err, "problems[%zu]: %zu options, expected 4", k, opts->len);
            str_addz(&ctx, q);
            doc_init(d, 4);
            d->gold = idx;
            for (int i = 0; i < 4; i++)
                doc_set(d, i, ctx.p, opts->items[i].str);
        } else if (qn >= 6 && !memcmp(q + qn - 6, "  _  .", 6)) {
            // lm-eval 0.4.13's race (v3.0): question[:-5] + answer, the question up to the
            // blank, filled in (older versions took question[-5:], just " _  ." + answer; lm-eval
            // issue #835)
            str_add(&ctx, q, qn - 5), str_addz(&ctx, ans), str_addz(&ctx, "\n");
        } else {
            str_addz(&ctx, "Question: "), str_addz(&ctx, q), str_addz(&ctx, "\n");
            str_addz(&ctx, "Answer: "), str_addz(&ctx, ans), str_addz(&ctx, "\n");
        }
    }
    free(ctx.p);
    return 0;
}

static int build_race(const JsonValue *row, EvalDoc *d, KdaError *err) {
    const char *article = get_str(row, "article", err);
    const JsonValue *pv = article ? json_get(row, "problems") : NULL;
    if (!article) return -1;
    if (!pv) return kda_fail(err, "missing field 'problems'");
    if (pv->type != JSON_STRING) return build_race_from(article, pv, d, err);
    Str js = {0};
    const char *p = pv->str, *end = pv->str + pv->len;
    int bad = pylit_value(&p, end, &js, 0);
    skip_ws(&p, end);
    JsonDoc doc;
    if (bad || p != end || json_parse(&doc, js.p, js.n, err))
        return free(js.p), kda_fail(err, "field 'problems' is not a Python list literal");
    free(js.p);
    int r = build_race_from(article, &doc.root, d, err);
    json_free(&doc);
    return r;
}

// ---- task table -------------------------------------------------------------------------------

typedef struct {
    const char *name;
    const char *hf_path[2]; // dataset/config folders under hf_datasets (alternatives)
    const char *split;      // lm-eval's split
    const char *alt_split;
    int metrics;
    double random;
} TaskDef;

static const TaskDef g_tasks[] = {
    {"arc_easy", {"ai2_arc/ARC-Easy", NULL}, "test", "validation", EVAL_ACC | EVAL_ACC_NORM, 25},
    {"arc_challenge",
     {"ai2_arc/ARC-Challenge", NULL},
     "test",
     "validation",
     EVAL_ACC | EVAL_ACC_NORM,
     25},
    {"hellaswag",
     {"hellaswag/default", "hellaswag/none"},
     "validation",
     "test",
     EVAL_ACC | EVAL_ACC_NORM,
     25},
    {"openbookqa", {"openbookqa/main", NULL}, "test", "validation", EVAL_ACC | EVAL_ACC_NORM, 25},
    {"piqa", {"piqa/plain_text", NULL}, "validation", "test", EVAL_ACC | EVAL_ACC_NORM, 50},
    {"winogrande", {"winogrande/winogrande_xl", NULL}, "validation", "test", EVAL_ACC, 50},
    {"mmlu", {"hails/mmlu_no_train", "cais/mmlu"}, "test", "validation", EVAL_ACC, 25},
    {"race", {"race/high", "EleutherAI/race/high"}, "test", "validation", EVAL_ACC, 25},
};
#define N_TASKS ((int)(sizeof g_tasks / sizeof *g_tasks))

static const TaskDef *task_def(const char *name) {
    for (int i = 0; i < N_TASKS; i++)
        if (!strcmp(g_tasks[i].name, name)) return &g_tasks[i];
    return NULL;
}

int eval_task_known(const char *name) {
    return task_def(name) != NULL;
}

int eval_build_doc(const char *task, const JsonValue *row, const char *subject, EvalDoc *doc,
                   KdaError *err) {
    memset(doc, 0, sizeof *doc);
    if (row->type != JSON_OBJECT) return kda_fail(err, "record is not a JSON object");
    if (!strcmp(task, "arc_easy") || !strcmp(task, "arc_challenge"))
        return build_arc_like(row, "question", "Question: ", 0, doc, err);
    if (!strcmp(task, "openbookqa")) return build_arc_like(row, "question_stem", "", 1, doc, err);
    if (!strcmp(task, "piqa")) return build_piqa(row, doc, err);
    if (!strcmp(task, "hellaswag")) return build_hellaswag(row, doc, err);
    if (!strcmp(task, "winogrande")) return build_winogrande(row, doc, err);
    if (!strcmp(task, "mmlu")) return build_mmlu(row, subject, doc, err);
    if (!strcmp(task, "race")) return build_race(row, doc, err);
    return kda_fail(err, "unknown task '%s'", task);
}

// ---- mmlu subjects ----------------------------------------------------------------------------

static const char *g_mmlu[57][2] = {
    {"abstract_algebra", "stem"},
    {"anatomy", "stem"},
    {"astronomy", "stem"},
    {"business_ethics", "other"},
    {"clinical_knowledge", "other"},
    {"college_biology", "stem"},
    {"college_chemistry", "stem"},
    {"college_computer_science", "stem"},
    {"college_mathematics", "stem"},
    {"college_medicine", "other"},
    {"college_physics", "stem"},
    {"computer_security", "stem"},
    {"conceptual_physics", "stem"},
    {"econometrics", "social_sciences"},
    {"electrical_engineering", "stem"},
    {"elementary_mathematics", "stem"},
    {"formal_logic", "humanities"},
    {"global_facts", "other"},
    {"high_school_biology", "stem"},
    {"high_school_chemistry", "stem"},
    {"high_school_computer_science", "stem"},
    {"high_school_european_history", "humanities"},
    {"high_school_geography", "social_sciences"},
    {"high_school_government_and_politics", "social_sciences"},
    {"high_school_macroeconomics", "social_sciences"},
    {"high_school_mathematics", "stem"},
    {"high_school_microeconomics", "social_sciences"},
    {"high_school_physics", "stem"},
    {"high_school_psychology", "social_sciences"},
    {"high_school_statistics", "stem"},
    {"high_school_us_history", "humanities"},
    {"high_school_world_history", "humanities"},
    {"human_aging", "other"},
    {"human_sexuality", "social_sciences"},
    {"international_law", "humanities"},
    {"jurisprudence", "humanities"},
    {"logical_fallacies", "humanities"},
    {"machine_learning", "stem"},
    {"management", "other"},
    {"marketing", "other"},
    {"medical_genetics", "other"},
    {"miscellaneous", "other"},
    {"moral_disputes", "humanities"},
    {"moral_scenarios", "humanities"},
    {"nutrition", "other"},
    {"philosophy", "humanities"},
    {"prehistory", "humanities"},
    {"professional_accounting", "other"},
    {"professional_law", "humanities"},
    {"professional_medicine", "other"},
    {"professional_psychology", "social_sciences"},
    {"public_relations", "social_sciences"},
    {"security_studies", "social_sciences"},
    {"sociology", "social_sciences"},
    {"us_foreign_policy", "social_sciences"},
    {"virology", "other"},
    {"world_religions", "humanities"},
};
static const char *g_categories[4] = {"stem", "humanities", "social_sciences", "other"};

int eval_mmlu_n_subjects(void) {
    return 57;
}
const char *eval_mmlu_subject(int i) {
    return i >= 0 && i < 57 ? g_mmlu[i][0] : NULL;
}
const char *eval_mmlu_category_name(int c) {
    return c >= 0 && c < 4 ? g_categories[c] : NULL;
}
int eval_mmlu_category(const char *subject) {
    for (int i = 0; i < 57; i++)
        if (!strcmp(g_mmlu[i][0], subject))
            for (int c = 0; c < 4; c++)
                if (!strcmp(g_categories[c], g_mmlu[i][1])) return c;
    return -1;
}

// ---- loading ----------------------------------------------------------------------------------

void eval_task_free(EvalTask *t) {
    for (int64_t i = 0; i < t->n_docs; i++)
        eval_doc_free(&t->docs[i]);
    free(t->docs);
    for (int i = 0; i < t->n_subtasks; i++)
        free(t->subtasks[i]);
    free(t->subtasks);
    memset(t, 0, sizeof *t);
}

static void task_init(EvalTask *t, const char *name) {
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    const TaskDef *def = task_def(name);
    t->metrics = def ? def->metrics : EVAL_ACC | EVAL_ACC_NORM;
    t->random = def ? def->random : 0;
}

static EvalDoc *task_push(EvalTask *t) {
    if ((t->n_docs & (t->n_docs - 1)) == 0)
        t->docs = kda_realloc(t->docs, (size_t)(t->n_docs ? 2 * t->n_docs : 1) * sizeof *t->docs);
    return &t->docs[t->n_docs++];
}

static int subtask_index(EvalTask *t, const char *name) {
    for (int i = 0; i < t->n_subtasks; i++)
        if (!strcmp(t->subtasks[i], name)) return i;
    t->subtasks = kda_realloc(t->subtasks, (size_t)(t->n_subtasks + 1) * sizeof *t->subtasks);
    t->subtasks[t->n_subtasks] = kda_strdup(name);
    return t->n_subtasks++;
}

typedef struct {
    EvalTask *t;
    const char *path;
    const char *subject; // fixed subject (mmlu per-subject file) or NULL
    int64_t limit;
    int64_t *counts; // documents kept per subtask (for limit)
    int n_counts;
    int row_based; // "row N" instead of "FILE:LINE" in errors
} LoadCtx;

static int add_row(void *vctx, const JsonValue *row, int64_t rec, KdaError *err) {
    LoadCtx *c = vctx;
    EvalTask *t = c->t;
    int sub = 0;
    const char *subject = c->subject;
    if (!strcmp(t->name, "mmlu")) {
        if (!subject) subject = json_get_str(row, "subject");
        if (!subject)
            return kda_fail(err, "%s: %s:%lld: missing field 'subject'", t->name, c->path,
                            (long long)rec);
        sub = subtask_index(t, subject);
    }
    if (sub >= c->n_counts) {
        c->counts = kda_realloc(c->counts, (size_t)(sub + 1) * sizeof *c->counts);
        while (c->n_counts <= sub)
            c->counts[c->n_counts++] = 0;
    }
    if (c->limit > 0 && c->counts[sub] >= c->limit) return 0;
    c->counts[sub]++;
    EvalDoc d;
    KdaError e2;
    if (eval_build_doc(t->name, row, subject, &d, &e2)) {
        if (c->row_based)
            return kda_fail(err, "%s: %s: row %lld: %s", t->name, c->path, (long long)rec - 1,
                            e2.msg);
        return kda_fail(err, "%s: %s:%lld: %s", t->name, c->path, (long long)rec, e2.msg);
    }
    d.subtask = sub;
    *task_push(t) = d;
    return 0;
}

int eval_task_load_jsonl(EvalTask *t, const char *name, const char *path, int64_t limit,
                         KdaError *err) {
    task_init(t, name);
    snprintf(t->source, sizeof t->source, "%s", path);
    LoadCtx c = {.t = t, .path = path, .limit = limit};
    int r = jsonl_for_each(name, path, add_row, &c, err);
    free(c.counts);
    if (r) return eval_task_free(t), -1;
    if (t->n_docs == 0) return eval_task_free(t), kda_fail(err, "%s: %s: no documents", name, path);
    return 0;
}

// Appends the rows of every *.arrow file in dir (sorted by name).
static int load_arrow_dir(LoadCtx *c, const char *dir, KdaError *err) {
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort), found = 0, r = 0;
    if (n < 0) return kda_fail(err, "%s: %s: cannot list folder", c->t->name, dir);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(ents[i]->d_name);
        if (r == 0 && len > 6 && !strcmp(ents[i]->d_name + len - 6, ".arrow")) {
            char path[PATH_MAX];
            path_join(path, sizeof path, dir, ents[i]->d_name);
            ArrowTable at;
            ArrowText txt = {0};
            found = 1;
            if (arrow_load_file(&at, path, err)) {
                r = kda_fail(err, "%s: %s", c->t->name, err->msg);
            } else {
                c->path = path;
                c->row_based = 1;
                for (int64_t row = 0; row < at.n_rows && r == 0; row++) {
                    arrow_row_json(&at, row, &txt);
                    JsonDoc doc;
                    if (json_parse(&doc, txt.data, txt.n, err))
                        r = kda_fail(err, "%s: %s: row %lld: %s", c->t->name, path, (long long)row,
                                     err->msg);
                    else
                        r = add_row(c, &doc.root, row + 1, err), json_free(&doc);
                }
                c->path = NULL;
                arrow_free(&at);
            }
            free(txt.data);
        }
        free(ents[i]);
    }
    free(ents);
    if (!found && r == 0) return kda_fail(err, "%s: %s: no .arrow file", c->t->name, dir);
    return r;
}

// Finds <base>/<hf_path>/<split> for the task's paths and splits; 0 and *dir set, or -1.
static int find_arrow_dir(const TaskDef *def, const char *data_dir, const char *sub, char *dir,
                          size_t cap, char *split, int *fallback) {
    const char *bases[2] = {"hf_datasets", ""};
    const char *splits[2] = {def->split, def->alt_split};
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < 2 && def->hf_path[p]; p++)
            for (int b = 0; b < 2; b++) {
                char tmp[PATH_MAX];
                snprintf(tmp, sizeof tmp, "%s%s%s/%s%s%s/%s", data_dir, "/", bases[b],
                         def->hf_path[p], sub ? "/" : "", sub ? sub : "", splits[s]);
                if (path_is_dir(tmp)) {
                    snprintf(dir, cap, "%s", tmp);
                    snprintf(split, 32, "%s", splits[s]);
                    *fallback |= s == 1;
                    return 0;
                }
            }
    return -1;
}

static int load_mmlu(EvalTask *t, const char *data_dir, int64_t limit, KdaError *err) {
    LoadCtx c = {.t = t, .limit = limit};
    int r = 0, any = 0;
    for (int i = 0; i < 57 && r == 0; i++) {
        char dir[PATH_MAX], path[PATH_MAX];
        const char *subj = g_mmlu[i][0];
        c.subject = subj;
        const char *ext[2] = {".jsonl", ".jsonl.gz"};
        int done = 0;
        for (int e = 0; e < 2 && !done; e++) {
            snprintf(path, sizeof path, "%s/mmlu/%s%s", data_dir, subj, ext[e]);
            if (path_exists(path)) {
                c.path = path;
                r = jsonl_for_each(t->name, path, add_row, &c, err);
                done = 1;
            }
        }
        if (!done && find_arrow_dir(task_def("mmlu"), data_dir, subj, dir, sizeof dir, t->split,
                                    &t->split_fallback) == 0) {
            r = load_arrow_dir(&c, dir, err);
            done = 1;
        }
        if (done && !any) snprintf(t->source, sizeof t->source, "%s", c.path ? path : dir);
        any |= done;
    }
    free(c.counts);
    if (r == 0 && !any)
        r = kda_fail(err,
                     "mmlu: no data in %s (looked for mmlu.jsonl, mmlu/<subject>.jsonl and "
                     "hf_datasets/hails/mmlu_no_train/<subject>/test)",
                     data_dir);
    return r;
}

int eval_task_load(EvalTask *t, const char *name, const char *data_dir, int64_t limit,
                   KdaError *err) {
    if (!strncmp(name, "olmo:", 5)) {
        char dir[PATH_MAX];
        if (name[5] == '/')
            snprintf(dir, sizeof dir, "%s", name + 5);
        else
            snprintf(dir, sizeof dir, "%s/oe_eval_tasks/%s", data_dir, name + 5);
        return eval_task_load_olmo(t, name, dir, limit, err);
    }
    const TaskDef *def = task_def(name);
    if (!def)
        return kda_fail(err,
                        "unknown task '%s' (known: arc_easy, arc_challenge, hellaswag, "
                        "openbookqa, piqa, winogrande, mmlu, race, olmo:<task>/<variant>)",
                        name);
    char path[PATH_MAX];
    const char *ext[2] = {".jsonl", ".jsonl.gz"};
    for (int e = 0; e < 2; e++) {
        snprintf(path, sizeof path, "%s/%s%s", data_dir, name, ext[e]);
        if (path_exists(path)) return eval_task_load_jsonl(t, name, path, limit, err);
    }
    task_init(t, name);
    int r;
    if (!strcmp(name, "mmlu")) {
        r = load_mmlu(t, data_dir, limit, err);
    } else {
        char dir[PATH_MAX];
        if (find_arrow_dir(def, data_dir, NULL, dir, sizeof dir, t->split, &t->split_fallback))
            return eval_task_free(t),
                   kda_fail(err,
                            "%s: no data: neither %s/%s.jsonl[.gz] nor "
                            "%s/hf_datasets/%s/%s exists",
                            name, data_dir, name, data_dir, def->hf_path[0], def->split);
        snprintf(t->source, sizeof t->source, "%s", dir);
        LoadCtx c = {.t = t, .limit = limit};
        r = load_arrow_dir(&c, dir, err);
        free(c.counts);
    }
    if (r) return eval_task_free(t), -1;
    if (t->n_docs == 0) return eval_task_free(t), kda_fail(err, "%s: no documents", name);
    return 0;
}

// ---- OLMo request files -----------------------------------------------------------------------

typedef struct {
    EvalTask *t;
    const char *path;
    int64_t limit, cur_doc;
    int n_req; // requests collected for the current document
} OlmoCtx;

static int olmo_line(void *vctx, const JsonValue *row, int64_t line, KdaError *err) {
    OlmoCtx *c = vctx;
    EvalTask *t = c->t;
    const char *rt = json_get_str(row, "request_type");
    const JsonValue *rq = json_get(row, "request");
    const char *ctx = json_get_str(rq, "context"), *cont = json_get_str(rq, "continuation");
    int64_t doc_id, idx, label;
#define OLMO_FAIL(...)                                                                             \
    kda_fail(err, "%s: %s:%lld: %s", t->name, c->path, (long long)line,                            \
             (snprintf(msg, sizeof msg, __VA_ARGS__), msg))
    char msg[512], sv[300];
    if (!rt || strcmp(rt, "loglikelihood"))
        return OLMO_FAIL("request_type is '%s', expected 'loglikelihood'",
                         rt ? shown_(rt, sv, sizeof sv) : "(missing)");
    if (json_get_int(row, "doc_id", &doc_id) || json_get_int(row, "idx", &idx) ||
        json_get_int(row, "label", &label))
        return OLMO_FAIL("doc_id, idx and label must be integers");
    if (!ctx || !cont) return OLMO_FAIL("request.context and request.continuation must be strings");
    if (doc_id >= 1000000) return 0; // unconditional (PMI) requests
    if (idx == 0) {
        if (c->limit > 0 && t->n_docs >= c->limit) return 1;
        EvalDoc *d = task_push(t);
        memset(d, 0, sizeof *d);
        d->gold = (int)label;
        c->cur_doc = doc_id;
    } else if (t->n_docs == 0 || doc_id != c->cur_doc || idx != t->docs[t->n_docs - 1].n_choices) {
        return OLMO_FAIL("request idx %lld of doc %lld out of order (lines of a document must be "
                         "consecutive with idx 0, 1, ...)",
                         (long long)idx, (long long)doc_id);
    }
    EvalDoc *d = &t->docs[t->n_docs - 1];
    if (label != d->gold)
        return OLMO_FAIL("label %lld differs within doc %lld", (long long)label, (long long)doc_id);
    if (idx > 1000) return OLMO_FAIL("too many choices");
    int k = d->n_choices++;
    d->req = kda_realloc(d->req, (size_t)d->n_choices * sizeof *d->req);
    d->norm_len = kda_realloc(d->norm_len, (size_t)d->n_choices * sizeof *d->norm_len);
    d->req[k].context = kda_strdup(ctx);
    d->req[k].continuation = kda_strdup(cont);
    size_t cn = strlen(cont), sp = cn && cont[0] == ' ';
    d->norm_len[k] = eval_py_len(cont + sp, cn - sp);
    return 0;
#undef OLMO_FAIL
}

int eval_task_load_olmo(EvalTask *t, const char *name, const char *dir, int64_t limit,
                        KdaError *err) {
    task_init(t, name);
    t->olmo = 1;
    t->metrics = EVAL_ACC | EVAL_ACC_NORM;
    char base[64]; // "olmo:arc_easy/rc_0shot" -> chance level of arc_easy
    snprintf(base, sizeof base, "%s", strncmp(name, "olmo:", 5) ? name : name + 5);
    base[strcspn(base, "/")] = 0;
    if (task_def(base)) t->random = task_def(base)->random;
    char path[PATH_MAX], cfg[PATH_MAX];
    path_join(path, sizeof path, dir, "requests.jsonl.gz");
    path_join(cfg, sizeof cfg, dir, "config.json");
    snprintf(t->source, sizeof t->source, "%s", path);
    JsonDoc doc;
    if (path_exists(cfg) && json_parse_file(&doc, cfg, err) == 0) {
        const char *pm = json_get_str(json_get(&doc.root, "task_config"), "primary_metric");
        snprintf(t->primary, sizeof t->primary, "%s", pm ? pm : "");
        json_free(&doc);
    }
    OlmoCtx c = {.t = t, .path = path, .limit = limit, .cur_doc = -1};
    if (!path_exists(path))
        return eval_task_free(t), kda_fail(err, "%s: %s: no such file", name, path);
    if (jsonl_for_each(name, path, olmo_line, &c, err)) return eval_task_free(t), -1;
    for (int64_t i = 0; i < t->n_docs; i++)
        if (t->docs[i].gold < 0 || t->docs[i].gold >= t->docs[i].n_choices) {
            int g = t->docs[i].gold, n = t->docs[i].n_choices;
            eval_task_free(t);
            return kda_fail(err, "%s: %s: document %lld: label %d but %d choices", name, path,
                            (long long)i, g, n);
        }
    if (t->n_docs == 0) return eval_task_free(t), kda_fail(err, "%s: %s: no documents", name, path);
    return 0;
}
