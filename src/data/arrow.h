// arrow.h - a reader for Apache Arrow IPC files as written by Hugging Face `datasets`
// (save_to_disk: the IPC *stream* format; the IPC *file* format "ARROW1" is accepted too).
//
// Supported column types: null, bool, int8..int64 (signed/unsigned), float16/32/64, utf8,
// binary (and their 64-bit-offset "large" variants), list, large_list, fixed_size_list and
// struct, nested to any depth up to ARROW_MAX_DEPTH. Not supported (clear error): dictionary
// encoding, compressed record batches, big-endian data, other types (dates, decimals, unions,
// maps, views). Several record batches are concatenated into one table.
//
// Every offset, length and buffer is validated in arrow_open (flatbuffer tables and vectors
// inside the metadata, buffers inside the message body, offsets monotone and inside their
// data or child array), so the row accessors cannot read out of bounds. Null-typed arrays have
// no buffers; their length is capped at 65536 + 64 x body bytes so that a tiny file cannot
// describe billions of values. Errors are one line
// naming the message and field.
//
// Rows are exposed as JSON text (arrow_row_json) so that callers can use one code path for
// Arrow and JSON-lines data: struct -> object, list -> array, utf8 -> string, ints -> integer,
// floats -> number (NaN/Inf -> null), null slots -> null, binary -> string (invalid UTF-8
// replaced by U+FFFD).
#ifndef KDA_DATA_ARROW_H
#define KDA_DATA_ARROW_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h" // defines: KdaError

#define ARROW_MAX_DEPTH 32

typedef enum {
    ARROW_NULL,
    ARROW_BOOL,
    ARROW_INT,
    ARROW_FLOAT,
    ARROW_UTF8,
    ARROW_BINARY,
    ARROW_LIST,
    ARROW_FIXED_LIST,
    ARROW_STRUCT,
} ArrowType;

typedef struct ArrowField {
    char *name; // owned, NUL-terminated
    ArrowType type;
    int bit_width;               // ARROW_INT: 8/16/32/64; ARROW_FLOAT: 16/32/64
    int is_signed;               // ARROW_INT
    int large;                   // UTF8/BINARY/LIST with int64 offsets
    int32_t list_size;           // ARROW_FIXED_LIST
    int n_children;              // LIST/FIXED_LIST: 1; STRUCT: any
    struct ArrowField *children; // owned [n_children]
} ArrowField;

// One array of one record batch (mirrors the field tree). Buffers point into the table's bytes.
typedef struct ArrowArray {
    int64_t length, null_count;
    const uint8_t *validity;     // NULL when null_count == 0
    const uint8_t *offsets;      // UTF8/BINARY/LIST: [length+1] int32 or int64 (little-endian)
    const uint8_t *values;       // BOOL bits, INT/FLOAT values, UTF8/BINARY bytes
    int64_t values_len;          // bytes
    struct ArrowArray *children; // owned [field.n_children]
} ArrowArray;

typedef struct {
    int64_t n_rows;
    ArrowArray *cols; // owned [schema.n_children]
} ArrowBatch;

typedef struct {
    ArrowField schema;   // ARROW_STRUCT; its children are the columns
    ArrowBatch *batches; // owned [n_batches]
    int n_batches;
    int64_t n_rows; // sum over batches
    uint8_t *owned; // file bytes when loaded by arrow_load_file (else NULL: borrowed)
} ArrowTable;

// Growable text buffer for arrow_row_json (zero-initialise; free with free(b.data)).
typedef struct {
    char *data;
    size_t n, cap;
} ArrowText;

// Parses buf[0..n) (borrowed: must outlive t). name prefixes error messages (may be NULL).
int arrow_open(ArrowTable *t, const void *buf, size_t n, const char *name, KdaError *err);
// Reads a whole file and parses it; t owns the bytes.
int arrow_load_file(ArrowTable *t, const char *path, KdaError *err);
void arrow_free(ArrowTable *t); // accepts a zeroed table

// Index of the column named name, or -1.
int arrow_column_index(const ArrowTable *t, const char *name);
// Replaces out's contents with row `row` (0 <= row < n_rows) as one JSON object, keys in
// column order; out->data is NUL-terminated. Cannot fail on a table arrow_open accepted.
void arrow_row_json(const ArrowTable *t, int64_t row, ArrowText *out);

#endif
