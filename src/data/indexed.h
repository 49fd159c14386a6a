// indexed.h - Megatron indexed dataset (.bin token ids + .idx index): reader and builder.
//
// Layout (data-formats.md §1.2, little-endian, packed): 9-byte magic "MMIDIDX\0\0", uint64
// version 1, uint8 dtype code, uint64 sequence count N, uint64 document-index count D, then
// int32 lengths [N], int64 byte pointers [N], int64 document indices [D], and optionally
// int8 sequence modes [N] (multimodal datasets). The .bin holds the token ids of every
// sequence back to back in the dtype of the index.
//
// Reader: maps both files read-only and validates everything up front (magic, version, dtype,
// exact .idx size, lengths >= 0, pointers = prefix sums of length*itemsize, document indices
// non-decreasing and ending at N, .bin size = end of the last sequence). Accessors then cannot
// fail. Both the standard document index [0, ..., N] and Primus's [1, ..., N] (no leading 0,
// §1.4) are accepted; documents are numbered from 0 either way. All offsets are 64-bit.
//
// Builder: writes PREFIX.bin and PREFIX.idx under temporary names and publishes them only in
// indexed_builder_finish, which removes any old PREFIX.idx first, renames .bin, then .idx last:
// an interrupted or failed run never leaves a PREFIX.idx that describes the wrong .bin.
#ifndef KDA_DATA_INDEXED_H
#define KDA_DATA_INDEXED_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

enum {
    IDX_DTYPE_UINT8 = 1,
    IDX_DTYPE_INT8 = 2,
    IDX_DTYPE_INT16 = 3,
    IDX_DTYPE_INT32 = 4,
    IDX_DTYPE_INT64 = 5,
    IDX_DTYPE_FLOAT64 = 6,
    IDX_DTYPE_FLOAT32 = 7,
    IDX_DTYPE_UINT16 = 8,
};

#define IDX_HEADER_SIZE 34
#define IDX_MAGIC       "MMIDIDX\0\0"

// Bytes per element of a dtype code, 0 for an unknown code.
int indexed_itemsize(int dtype);
const char *indexed_dtype_name(int dtype); // "uint16", ..., "unknown"
// Megatron's builder rule: uint16 (8) when vocab_size < 65500, else int32 (4).
int indexed_dtype_for_vocab(int64_t vocab_size);

// ---- Index (parsed .idx, borrowed from a caller's buffer) -------------------------------------

typedef struct {
    const unsigned char *base; // borrowed: the whole .idx bytes
    size_t size;
    int dtype;         // integer dtype code (1..5, 8); float codes are rejected
    int itemsize;      // bytes per token
    int64_t n_seq;     // N
    int64_t n_doc_idx; // D (entries of the document index)
    int64_t n_docs;    // D - 1 (standard) or D (Primus)
    int doc_base;      // 0: index starts with 0 (standard); 1: Primus variant
    int has_modes;     // sequence_modes array present
    int64_t n_tokens;  // sum of lengths
    int64_t bin_size;  // bytes the .bin must have
} IndexedIndex;

// Parses and validates an .idx held in buf[0..n) (not copied; must outlive idx). On error
// returns -1 with one line naming the failed check (e.g. "bad magic", "pointer 3 is 12,
// expected 8") in err, prefixed by name when name is non-NULL.
int indexed_index_parse(IndexedIndex *idx, const void *buf, size_t n, const char *name,
                        KdaError *err);
int32_t indexed_index_length(const IndexedIndex *idx, int64_t seq);  // tokens of sequence seq
int64_t indexed_index_pointer(const IndexedIndex *idx, int64_t seq); // byte offset in .bin
int64_t indexed_index_doc_entry(const IndexedIndex *idx, int64_t i); // raw document_indices[i]
// Sequences of document doc (0 <= doc < n_docs) are [*first, *end).
void indexed_index_doc_range(const IndexedIndex *idx, int64_t doc, int64_t *first, int64_t *end);

// ---- Dataset (mapped .bin + .idx) -------------------------------------------------------------

typedef struct {
    IndexedIndex idx;
    void *idx_map; // owned mapping (NULL for an empty file)
    size_t idx_map_size;
    void *bin_map; // owned mapping (NULL when the .bin is empty)
    size_t bin_map_size;
} IndexedDataset;

// Maps PREFIX.idx and PREFIX.bin and validates them. On error returns -1 (ds zeroed) with a
// message naming the file.
int indexed_open(IndexedDataset *ds, const char *prefix, KdaError *err);
void indexed_close(IndexedDataset *ds); // accepts a zeroed dataset
// Token ids of sequence seq, widened to int64: copies min(n, length) tokens starting at token
// offset `start` of the sequence into out; returns the number copied.
int64_t indexed_read_tokens(const IndexedDataset *ds, int64_t seq, int64_t start, int64_t *out,
                            int64_t n);
// Raw pointer to the tokens of sequence seq (dtype ds->idx.dtype, may be unaligned).
const void *indexed_seq_data(const IndexedDataset *ds, int64_t seq);

// ---- Builder ----------------------------------------------------------------------------------

typedef struct {
    char bin_path[PATH_MAX], idx_path[PATH_MAX];
    char bin_tmp[PATH_MAX], idx_tmp[PATH_MAX];
    FILE *bin; // owned, open between open and finish/abort
    int dtype, itemsize;
    int32_t *lengths; // owned [n_seq]
    int64_t n_seq, cap_seq;
    int64_t *doc_idx; // owned [n_doc_idx], starts with 0
    int64_t n_doc_idx, cap_doc;
    int64_t n_tokens;
    unsigned char *scratch; // owned conversion buffer
    size_t scratch_cap;
} IndexedBuilder;

// Creates PREFIX.bin.tmp.<pid>; dtype must be an integer code. On error returns -1.
int indexed_builder_open(IndexedBuilder *b, const char *prefix, int dtype, KdaError *err);
// Appends one sequence of n token ids ([n] int32). Fails (builder still usable for abort) if a
// token does not fit the dtype or n > INT32_MAX.
int indexed_builder_add(IndexedBuilder *b, const int32_t *tokens, int64_t n, KdaError *err);
// Closes the current document (appends the sequence count to the document index).
void indexed_builder_end_document(IndexedBuilder *b);
// Writes the .idx, then publishes .bin and .idx (see above). The builder is freed either way.
int indexed_builder_finish(IndexedBuilder *b, KdaError *err);
// Removes the temporary files and frees the builder. Safe on a finished/zeroed builder.
void indexed_builder_abort(IndexedBuilder *b);

// Serialises an index (header + arrays, standard layout) into a malloc'd buffer; *n = size.
// lengths [n_seq] int32, doc_idx [n_doc_idx] int64. Used by the builder and the tests.
unsigned char *indexed_index_serialize(int dtype, const int32_t *lengths, int64_t n_seq,
                                       const int64_t *doc_idx, int64_t n_doc_idx, size_t *n);

#endif
