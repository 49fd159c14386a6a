// json.h - a strict JSON (RFC 8259) DOM parser and small writing helpers.
//
// One JsonDoc owns every node and string of a parse (arena allocation; json_free releases all).
// Strings are decoded to UTF-8 and NUL-terminated; `len` holds the byte length (a string may
// contain "\u0000"). Numbers keep a double and, when the literal is an integer that fits,
// an exact int64. Nesting deeper than JSON_MAX_DEPTH is rejected (fuzz safety). A key that
// appears twice in one object is an error (parsers disagree on which one wins).
#ifndef KDA_JSON_H
#define KDA_JSON_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#include "core/error.h"

#define JSON_MAX_DEPTH 256

typedef enum {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} JsonType;

typedef struct JsonValue {
    JsonType type;
    int is_int;              // JSON_NUMBER: literal was an integer that fits int64
    int64_t i;               // JSON_NUMBER: exact value when is_int
    double num;              // JSON_NUMBER
    size_t len;              // JSON_STRING: bytes; JSON_ARRAY/OBJECT: number of children
    const char *str;         // JSON_STRING: decoded UTF-8, NUL-terminated
    const char **keys;       // JSON_OBJECT: len keys, NUL-terminated, in file order
    size_t *key_lens;        // JSON_OBJECT: byte length of each key
    struct JsonValue *items; // JSON_ARRAY items / JSON_OBJECT values, len entries
} JsonValue;

typedef struct JsonArenaBlock JsonArenaBlock;

typedef struct {
    JsonValue root;
    JsonArenaBlock *arena; // owned
} JsonDoc;

// Parses text[0..len). On error returns -1 with "line L, column C: what" in err.
int json_parse(JsonDoc *doc, const char *text, size_t len, KdaError *err);
// Reads and parses a whole file; errors name the file.
int json_parse_file(JsonDoc *doc, const char *path, KdaError *err);
void json_free(JsonDoc *doc);

// Object member by key (first match), or NULL when obj is not an object or has no such key.
const JsonValue *json_get(const JsonValue *obj, const char *key);
// Typed accessors: return 0 on success, -1 if the member is absent or of another type.
int json_get_int(const JsonValue *obj, const char *key, int64_t *out);
int json_get_num(const JsonValue *obj, const char *key, double *out);
int json_get_bool(const JsonValue *obj, const char *key, int *out);
const char *json_get_str(const JsonValue *obj, const char *key); // NULL if absent/not string
const char *json_type_name(JsonType t);

// Formats v as a JSON number with `digits` significant digits (%.*g), or "null" when v is
// NaN or inf (JSON has no literal for them). Returns buf (cap >= 32 advised).
const char *json_fmt_num(char *buf, size_t cap, double v, int digits);
// Writes s[0..n) as a JSON string literal (quotes included), escaping as needed.
void json_write_string(FILE *f, const char *s, size_t n);

#endif
