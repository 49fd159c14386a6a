// import_arrow.h - Hugging Face datasets' Arrow shards (save_to_disk directories, or .arrow
// files) straight into a Megatron .bin/.idx, as Primus's FLA converter does: a list-of-ints
// column (FLA's preprocessed `input_ids`) is copied without re-tokenization; a string column
// (`text`) is tokenized. One row = one document = one sequence; null rows are skipped.
#ifndef KDA_IMPORT_ARROW_H
#define KDA_IMPORT_ARROW_H

#include <stdint.h>

#include "core/error.h"
#include "tok/tok.h"

typedef struct {
    const char *column;      // "input_ids" (list of ints) or a string column
    const KdaTokenizer *tok; // for a string column (NULL: a string column is an error)
    int tok_flags;           // tok_encode flags for a string column (TOK_POST, ...)
    int64_t vocab_size;      // > 0: ids must be below it and set the dtype; 0: from the ids
} KdaArrowImport;

// 1 if path is an .arrow file or a directory holding .arrow files (a save_to_disk dir).
int kda_arrow_input(const char *path);

// Reads inputs[0..n) (.arrow files, or directories: their *.arrow in name order, as
// save_to_disk numbers its shards) and writes PREFIX.bin/.idx (temp + rename; nothing on error).
// dtype: uint16 when the vocabulary (vocab_size, else 1 + the largest id) is below 65500, else
// int32. *n_docs, *n_tokens get the counts. Errors name the file, row and column.
int kda_import_arrow(const char *const *inputs, int n, const KdaArrowImport *opt,
                     const char *prefix, int64_t *n_docs, int64_t *n_tokens, KdaError *err);

#endif
