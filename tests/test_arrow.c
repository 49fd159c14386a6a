// test_arrow.c - the Arrow IPC reader: synthetic pyarrow files of every supported type (stream
// and file format) against their expected rows, real HF `datasets` files (ARC-Challenge,
// MMLU dev), and corrupted/truncated input rejected with a message instead of a crash.
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "data/arrow.h"
#include "test.h"

// Structural JSON equality (numbers compared exactly as doubles; object keys in order).
static int json_equal_(const JsonValue *a, const JsonValue *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case JSON_NUMBER:
        return a->num == b->num;
    case JSON_STRING:
        return a->len == b->len && !memcmp(a->str, b->str, a->len);
    case JSON_ARRAY:
    case JSON_OBJECT:
        if (a->len != b->len) return 0;
        for (size_t i = 0; i < a->len; i++) {
            if (a->type == JSON_OBJECT && strcmp(a->keys[i], b->keys[i])) return 0;
            if (!json_equal_(&a->items[i], &b->items[i])) return 0;
        }
        return 1;
    default:
        return 1;
    }
}

static void check_against_expected_(const char *arrow_rel) {
    ArrowTable t;
    KdaError err;
    CHECK_MSG(arrow_load_file(&t, test_data(arrow_rel), &err) == 0, "%s", err.msg);
    size_t n;
    char *exp = read_file(test_data("eval/synthetic.expected.jsonl"), &n, &err);
    CHECK(exp != NULL);
    if (!exp || !t.schema.n_children) return;
    CHECK_EQ_INT(t.n_rows, 3);
    CHECK_EQ_INT(t.n_batches, 2);
    CHECK_EQ_INT(t.schema.n_children, 16);
    CHECK_EQ_INT(arrow_column_index(&t, "st"), 15);
    CHECK_EQ_INT(arrow_column_index(&t, "nope"), -1);
    ArrowText txt = {0};
    char *line = exp;
    for (int64_t r = 0; r < t.n_rows; r++) {
        char *nl = strchr(line, '\n');
        if (!nl) break;
        arrow_row_json(&t, r, &txt);
        JsonDoc a, b;
        CHECK_MSG(json_parse(&a, txt.data, txt.n, &err) == 0, "row %lld: %s", (long long)r,
                  err.msg);
        CHECK(json_parse(&b, line, (size_t)(nl - line), &err) == 0);
        CHECK_MSG(json_equal_(&a.root, &b.root), "%s row %lld: %s", arrow_rel, (long long)r,
                  txt.data);
        json_free(&a), json_free(&b);
        line = nl + 1;
    }
    free(txt.data), free(exp);
    arrow_free(&t);
}

KDA_TEST(arrow_synthetic_stream) {
    check_against_expected_("eval/synthetic.stream.arrow");
}
KDA_TEST(arrow_synthetic_file_format) {
    check_against_expected_("eval/synthetic.file.arrow");
}

KDA_TEST(arrow_real_hf_files) {
    ArrowTable t;
    KdaError err;
    const char *arc = "eval/hf_datasets/ai2_arc/ARC-Challenge/validation/data-00000-of-00001.arrow";
    CHECK_MSG(arrow_load_file(&t, test_data(arc), &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(t.n_rows, 299); // dataset_info.json: validation num_examples
    ArrowText txt = {0};
    arrow_row_json(&t, 0, &txt);
    JsonDoc d;
    CHECK(json_parse(&d, txt.data, txt.n, &err) == 0);
    CHECK(!strcmp(json_get_str(&d.root, "id"), "Mercury_SC_407695")); // = OLMo doc 0
    CHECK(!strcmp(json_get_str(&d.root, "answerKey"), "D"));
    const JsonValue *text = json_get(json_get(&d.root, "choices"), "text");
    CHECK(text && text->len == 4 &&
          !strcmp(text->items[3].str, "Record the details of the investigation."));
    json_free(&d);
    arrow_free(&t);

    const char *mm =
        "eval/hf_datasets/hails/mmlu_no_train/abstract_algebra/dev/data-00000-of-00001.arrow";
    CHECK_MSG(arrow_load_file(&t, test_data(mm), &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(t.n_rows, 5);
    for (int64_t r = 0; r < t.n_rows; r++) {
        arrow_row_json(&t, r, &txt);
        CHECK(json_parse(&d, txt.data, txt.n, &err) == 0);
        int64_t ans;
        CHECK(json_get_int(&d.root, "answer", &ans) == 0 && ans >= 0 && ans <= 3);
        CHECK(!strcmp(json_get_str(&d.root, "subject"), "abstract_algebra"));
        CHECK(json_get(&d.root, "choices")->len == 4);
        json_free(&d);
    }
    free(txt.data);
    arrow_free(&t);
}

// Every truncation and a sweep of single-byte corruptions either parse or fail with a
// one-line message; rows of accepted tables render to valid JSON.
KDA_TEST(arrow_corrupt_input) {
    size_t n;
    KdaError err;
    char *buf = read_file(test_data("eval/synthetic.stream.arrow"), &n, &err);
    CHECK(buf != NULL);
    if (!buf) return;
    char *copy = kda_malloc(n);
    ArrowText txt = {0};
    int accepted = 0, rejected = 0;
    for (size_t cut = 0; cut < n; cut += 7) {
        ArrowTable t;
        memcpy(copy, buf, n);
        int rc = arrow_open(&t, copy, cut, "cut", &err);
        if (rc) {
            rejected++;
            CHECK(strlen(err.msg) > 0 && !strchr(err.msg, '\n'));
        } else {
            arrow_free(&t), accepted++;
        }
    }
    for (size_t i = 0; i < n; i += 3) {
        ArrowTable t;
        memcpy(copy, buf, n);
        copy[i] = (char)(copy[i] ^ 0x5A);
        if (arrow_open(&t, copy, n, "flip", &err)) {
            rejected++;
            continue;
        }
        for (int64_t r = 0; r < t.n_rows; r++) {
            arrow_row_json(&t, r, &txt);
            JsonDoc d;
            CHECK_MSG(json_parse(&d, txt.data, txt.n, &err) == 0, "flip %zu: %s", i, err.msg);
            json_free(&d);
        }
        arrow_free(&t), accepted++;
    }
    CHECK(rejected > 0 && accepted > 0);
    ArrowTable t;
    CHECK(arrow_open(&t, "ARROW1\0\0", 8, "empty", &err) == -1 && strstr(err.msg, "no schema"));
    free(txt.data), free(copy), free(buf);
}
