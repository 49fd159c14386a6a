// parquet.h - a minimal Apache Parquet reader for one flat text (BYTE_ARRAY) column.
//
// Enough for corpora like FineWeb-Edu: the footer and page headers are decoded from the
// Thrift compact protocol; pages may be data page v1 or v2 and dictionary pages; values PLAIN
// or dictionary encoded (PLAIN_DICTIONARY / RLE_DICTIONARY); codecs UNCOMPRESSED, SNAPPY, GZIP
// and ZSTD; any number of row groups; the column REQUIRED or OPTIONAL (nulls through
// definition levels). Not supported (clear error): nested or repeated columns, other codecs,
// DELTA_* encodings, encrypted files. Every offset and length read from the file is checked
// against the file size and the page size: a malformed file gives an error, never a crash.
//
// Values are returned in row order, one per row; their bytes are not checked for UTF-8.
#ifndef KDA_DATA_PARQUET_H
#define KDA_DATA_PARQUET_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct ParquetReader ParquetReader;

// Opens path (mapped read-only) and selects the top-level column named `column`. On error
// returns -1 with "<path>: what" in err.
int parquet_open(ParquetReader **out, const char *path, const char *column, KdaError *err);
// Same over a caller buffer data[0..n) that must outlive the reader (tests, fuzzing); name is
// used in messages.
int parquet_open_buffer(ParquetReader **out, const void *data, size_t n, const char *name,
                        const char *column, KdaError *err);
// Next row's value: returns 1 with *s/*len (borrowed, valid until the next call) and *is_null;
// 0 after the last row; -1 on a malformed file ("<path>: row group G, column C: what").
int parquet_next(ParquetReader *r, const char **s, size_t *len, int *is_null, KdaError *err);
int64_t parquet_num_rows(const ParquetReader *r); // from the footer
int64_t parquet_rows_read(const ParquetReader *r);
// Bytes of the file the reader has consumed so far (for progress).
int64_t parquet_bytes_read(const ParquetReader *r);
void parquet_close(ParquetReader *r); // NULL is fine

#endif
