// readers.h - a stream of text documents over many input files, for `kda tokenize`.
//
// Inputs: .jsonl/.json/.ndjson (one JSON object per line, the text under opts.json_key),
// .txt (the whole file is one document, or one document per line with txt_lines), each
// optionally compressed (.gz, .zst), and .parquet (column opts.json_key). Directories are
// walked recursively (files with those extensions only, hidden entries skipped, sorted by
// path); arguments that do not exist and contain * ? [ are expanded as globs (sorted).
//
// Errors name the file and line (or Parquet row): malformed JSON, a record without the key, or
// with a non-string value. With skip_bad those records are counted and skipped instead.
// Whitespace-only lines of JSONL files are ignored. Empty documents are returned (len 0) so
// the caller can count them; a Parquet null is returned as an empty document. Bytes that are
// not valid UTF-8 are passed through unchanged.
#ifndef KDA_DATA_READERS_H
#define KDA_DATA_READERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct {
    const char *json_key; // JSONL member / Parquet column holding the text ("text")
    int txt_lines;        // .txt: 1 = one document per line (newline and a trailing \r
                          // removed), 0 = one document per file
    int skip_bad;         // count and skip malformed / keyless records instead of failing
    size_t max_record;    // longest record (JSONL/txt line, whole .txt document) in bytes;
                          // 0 = DOCREADER_MAX_RECORD. Longer: an error naming FILE:LINE
} DocReaderOptions;

#define DOCREADER_MAX_RECORD ((size_t)256 << 20) // 256 MiB: far above any real document

typedef struct {
    int64_t docs;        // documents returned
    int64_t bad_records; // records skipped (skip_bad)
    int64_t nulls;       // Parquet nulls (returned as empty documents)
    int64_t bytes_read;  // input bytes consumed so far (compressed size for .gz/.zst)
    int64_t total_bytes; // sum of the input file sizes
    int files_done, n_files;
    char first_bad[1024]; // message of the first skipped record ("" if none)
} DocReaderStats;

typedef struct DocReader DocReader;

// Expands files, directories and globs into a sorted list of files (malloc'd array of
// malloc'd paths; free with docreader_free_paths). Errors: a path that does not exist, a glob
// with no match, a file with an unsupported extension, or no input files at all.
int docreader_expand(const char *const *inputs, int n_inputs, char ***paths, int *n_paths,
                     KdaError *err);
void docreader_free_paths(char **paths, int n_paths);
// 1 if the path's extension is one the reader handles.
int docreader_supported(const char *path);

// Opens a stream over paths[0..n) (copied). opts is copied (json_key must outlive r).
int docreader_open(DocReader **out, char *const *paths, int n_paths, const DocReaderOptions *opts,
                   KdaError *err);
// Next document: 1 with *text/*len (borrowed, valid until the next call), 0 at the end, -1 on
// error (message with file:line). After an error the reader can only be closed.
int docreader_next(DocReader *r, const char **text, size_t *len, KdaError *err);
// "file:line" (or "file: row N") of the document last returned.
const char *docreader_where(DocReader *r);
void docreader_stats(const DocReader *r, DocReaderStats *out);
void docreader_close(DocReader *r); // NULL is fine

#endif
