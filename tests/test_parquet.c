// test_parquet.c - the Parquet text-column reader against files written by pyarrow
// (tools/reference/make_parquet_fixtures.py): every value, in order, equals the expected
// JSONL written next to each file; bad columns and damaged files give errors, not crashes.
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "data/parquet.h"
#include "test.h"

static const char *k_files[] = {"snappy_dict_groups", "zstd_plain_v2", "none_dict_v2",
                                "gzip_required", "snappy_many_pages"};

// Reads every value of column "text" and compares it with NAME.expected.jsonl.
static void check_file(const char *name) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "parquet/%s.expected.jsonl", name);
    KdaError e;
    size_t n;
    char *exp = read_file(test_data(rel), &n, &e);
    CHECK_MSG(exp != NULL, "%s", e.msg);
    if (!exp) return;
    snprintf(rel, sizeof rel, "parquet/%s.parquet", name);
    snprintf(path, sizeof path, "%s", test_data(rel));
    ParquetReader *r;
    CHECK_MSG(parquet_open(&r, path, "text", &e) == 0, "%s", e.msg);
    if (!r) {
        free(exp);
        return;
    }
    int64_t rows = 0, nulls = 0;
    for (char *line = exp, *nl; *line && (nl = strchr(line, '\n')); line = nl + 1, rows++) {
        JsonDoc d;
        KDA_ASSERT(json_parse(&d, line, (size_t)(nl - line), &e) == 0);
        const char *s;
        size_t len;
        int is_null;
        int rc = parquet_next(r, &s, &len, &is_null, &e);
        CHECK_MSG(rc == 1, "%s row %lld: rc %d %s", name, (long long)rows, rc, e.msg);
        if (rc != 1) {
            json_free(&d);
            break;
        }
        if (d.root.type == JSON_NULL) {
            CHECK_MSG(is_null, "%s row %lld: expected null", name, (long long)rows);
            nulls++;
        } else {
            CHECK_MSG(!is_null && len == d.root.len && memcmp(s, d.root.str, len) == 0,
                      "%s row %lld: got '%.*s' expected '%s'", name, (long long)rows, (int)len, s,
                      d.root.str);
        }
        json_free(&d);
    }
    const char *s;
    size_t len;
    int is_null;
    CHECK_MSG(parquet_next(r, &s, &len, &is_null, &e) == 0, "%s: extra rows", name);
    CHECK_EQ_INT(parquet_num_rows(r), rows);
    CHECK_EQ_INT(parquet_rows_read(r), rows);
    if (strcmp(name, "gzip_required") != 0) CHECK_MSG(nulls > 0, "%s: fixture has no nulls", name);
    parquet_close(r);
    free(exp);
}

KDA_TEST(parquet_reads_pyarrow_files) {
    for (size_t i = 0; i < sizeof k_files / sizeof *k_files; i++)
        check_file(k_files[i]);
}

KDA_TEST(parquet_column_errors) {
    ParquetReader *r;
    KdaError e;
    char path[1024];
    snprintf(path, sizeof path, "%s", test_data("parquet/snappy_dict_groups.parquet"));
    CHECK(parquet_open(&r, path, "body", &e) != 0);
    CHECK_MSG(strstr(e.msg, "no top-level column \"body\"") != NULL, "%s", e.msg);
    CHECK(parquet_open(&r, path, "id", &e) != 0); // int64 column
    CHECK_MSG(strstr(e.msg, "expected BYTE_ARRAY") != NULL, "%s", e.msg);
    snprintf(path, sizeof path, "%s", test_data("parquet/snappy_dict_groups.expected.jsonl"));
    CHECK(parquet_open(&r, path, "text", &e) != 0);
    CHECK_MSG(strstr(e.msg, "not a Parquet file") != NULL, "%s", e.msg);
}

// Found by fuzz_parquet: a footer whose row count (-10) disagrees with the row groups' value
// counts (9) used to be read anyway, returning more rows than the footer declared. Both counts
// are now checked at open, and a data page holding more values than its chunk has left fails.
KDA_TEST(parquet_inconsistent_footers) {
    ParquetReader *r;
    KdaError e;
    char path[1024];
    snprintf(path, sizeof path, "%s", test_data("parquet/fuzz_row_count.parquet"));
    CHECK(parquet_open(&r, path, "text", &e) != 0);
    CHECK_MSG(strstr(e.msg, "the footer says -10 rows") != NULL, "%s", e.msg);
    // also found by fuzz_parquet: a second row-group list in the footer leaked the first
    snprintf(path, sizeof path, "%s", test_data("parquet/fuzz_two_row_group_lists.parquet"));
    CHECK(parquet_open(&r, path, "text", &e) != 0);
    CHECK_MSG(strstr(e.msg, "two row group lists") != NULL, "%s", e.msg);
}

// Damaged copies: truncations and single-byte changes all over the file must give either an
// error or a normal read, never a crash or an endless loop (ASan/UBSan builds catch more).
KDA_TEST(parquet_damaged_files_fail_cleanly) {
    for (size_t f = 0; f < sizeof k_files / sizeof *k_files; f++) {
        char rel[256];
        snprintf(rel, sizeof rel, "parquet/%s.parquet", k_files[f]);
        KdaError e;
        size_t n;
        unsigned char *orig = (unsigned char *)read_file(test_data(rel), &n, &e);
        KDA_ASSERT(orig);
        unsigned char *buf = kda_malloc(n);
        int errors = 0;
        for (size_t pos = 0; pos < n; pos += 1 + pos / 64) {
            for (int mode = 0; mode < 3; mode++) {
                memcpy(buf, orig, n);
                size_t len = n;
                if (mode == 0)
                    len = pos; // truncated
                else if (mode == 1)
                    buf[pos] ^= 0xff;
                else
                    buf[pos] = (unsigned char)(buf[pos] + 1);
                ParquetReader *r;
                if (parquet_open_buffer(&r, buf, len, "damaged", "text", &e) != 0) {
                    errors++;
                    continue;
                }
                const char *s;
                size_t sl;
                int is_null, rc;
                int64_t rows = 0;
                while ((rc = parquet_next(r, &s, &sl, &is_null, &e)) == 1)
                    rows++;
                errors += rc < 0;
                CHECK(rows <= 100000);
                parquet_close(r);
            }
        }
        CHECK_MSG(errors > 0, "%s: no damaged copy was rejected", k_files[f]);
        free(buf);
        free(orig);
    }
}
