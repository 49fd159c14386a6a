// safetensors.h - read (mmap, fully validated) and write (atomic) safetensors files, and open
// a model directory (one file or shards + index). Spec: data-formats.md §4, §5.3.
//
// File layout: u64 LE header length N | N bytes of UTF-8 JSON (space padded) | byte buffer.
// Header: {"__metadata__": {str: str}, "<name>": {"dtype", "shape", "data_offsets": [b, e]}}.
//
// Reader contract: st_open/st_parse accept a file only if every rule of §4.2 holds (N bounds,
// JSON object starting with '{', known dtype, shape >= 0 with shape product x itemsize ==
// end - begin computed without overflow, names unique and NUL-free, offsets tiling the byte
// buffer exactly, __metadata__ string->string). Any violation returns -1 with one line in err
// naming the file and the tensor or field. On failure the SafeTensors is left zeroed (safe to
// st_close). Tensor data is little-endian, row-major, densely packed, and NOT necessarily
// aligned (a foreign writer may not pad the header): read it with memcpy or st_to_f32.
//
// Writer contract: tensors are written in order of decreasing dtype size, then name (the
// reference writer's order, so every tensor is aligned to its element size); the header is
// space padded so 8 + N is a multiple of 8; "__metadata__" always holds {"format": "pt"}
// (plus st_writer_meta entries); the file appears atomically (temp + fsync + rename).
// For a header with only "format" the bytes equal those of Python's safetensors.
#ifndef KDA_SAFETENSORS_H
#define KDA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h" // defines: KdaError
#include "core/json.h"  // defines: JsonDoc

#define ST_MAX_DIMS   8
#define ST_MAX_HEADER 100000000ull // §4.2: N <= 100 MB

// Order matters: it is the reference's alignment order (ascending), used by the writer.
typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_N_DTYPES
} StDtype;

typedef struct {
    const char *name; // NUL-terminated, owned by the SafeTensors
    StDtype dtype;
    int ndim;                   // 0 for a scalar
    int64_t shape[ST_MAX_DIMS]; // shape[0..ndim)
    int64_t numel;              // product of shape (1 for a scalar)
    const void *data;           // [shape...] dtype, little-endian; borrowed, maybe unaligned
    size_t nbytes;              // numel * itemsize
    size_t offset;              // data_offsets begin, relative to the byte buffer
} StTensor;

// One parsed file. All fields read-only for callers.
typedef struct {
    char *path; // owned; the name used in error messages
    void *map;  // owned mmap of the whole file (st_open), NULL for st_parse
    size_t map_bytes;
    StTensor *tensors; // owned, n_tensors entries sorted by name (strcmp)
    int64_t n_tensors;
    const char **meta_keys; // owned array; __metadata__ keys sorted by name, strings in doc
    const char **meta_vals;
    int64_t n_meta;
    JsonDoc doc; // owned parse of the header; names and metadata point into it
} SafeTensors;

const char *st_dtype_name(StDtype dt);           // "BF16"; "?" if out of range
size_t st_dtype_size(StDtype dt);                // bytes per element (BOOL: 1)
int st_dtype_parse(const char *s, StDtype *out); // 0, or -1 for unknown/unsupported (F8_*)

// Maps path read-only and validates it. On error returns -1, *st zeroed, err names the path.
int st_open(SafeTensors *st, const char *path, KdaError *err);
// Validates buf[0..n) exactly like st_open (the fuzzer's entry point). buf is borrowed: it
// must outlive *st. name_for_errors may be NULL ("<buffer>").
int st_parse(SafeTensors *st, const void *buf, size_t n, const char *name_for_errors,
             KdaError *err);
// Unmaps and frees; accepts a zeroed or already closed SafeTensors; leaves it zeroed.
void st_close(SafeTensors *st);

const StTensor *st_find(const SafeTensors *st, const char *name); // NULL if absent
const char *st_meta(const SafeTensors *st, const char *key);      // NULL if absent

// Converts any dtype to fp32. out: [numel] fp32. BOOL -> 0/1; 64-bit ints round to nearest.
// Returns 0 (-1 with err only for a corrupt StTensor, e.g. an unknown dtype).
int st_to_f32(const StTensor *t, float *out, KdaError *err);
// 1 if a and b have the same dtype, shape and bytes (the tied-head check of §5.3), else 0.
int st_tensor_equal(const StTensor *a, const StTensor *b);

// ---- A model's weights: DIR/model.safetensors or DIR/model.safetensors.index.json + shards.

typedef struct {
    const StTensor *tensor; // borrowed from files[file]
    int file;               // index into StModel.files
} StModelEntry;

typedef struct {
    char *dir;          // owned
    SafeTensors *files; // owned, n_files entries (1 when unsharded)
    int n_files;
    StModelEntry *entries; // owned, every tensor of every file, sorted by name
    int64_t n_entries;     // iterate entries[0..n_entries) to list all names
} StModel;

// Opens dir (or a single .safetensors file path). With an index, weight_map values must be
// plain file names in dir, every listed tensor must be in its shard and every shard tensor
// listed; a name in two files is an error. On error returns -1 and *m is zeroed.
int st_model_open(StModel *m, const char *dir, KdaError *err);
// Tensor by name or NULL; *file_out (if non-NULL) gets the path of the file holding it.
const StTensor *st_model_find(const StModel *m, const char *name, const char **file_out);
void st_model_close(StModel *m);

// ---- Writer. Data pointers are borrowed until st_writer_save returns.

typedef struct StWriter StWriter;

StWriter *st_writer_new(void);
// data: [shape...] already in dtype, little-endian, densely packed. shape may be NULL if ndim 0.
void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data);
// data: [shape...] fp32, converted at save time to out_dtype (F32, BF16 or F16, round to
// nearest even).
void st_writer_add_f32(StWriter *w, const char *name, StDtype out_dtype, int ndim,
                       const int64_t *shape, const float *data);
// Adds (or replaces) a __metadata__ entry; key and value are copied.
void st_writer_meta(StWriter *w, const char *key, const char *value);
// Writes path atomically. Duplicate or invalid names are reported here (-1, err).
int st_writer_save(StWriter *w, const char *path, KdaError *err);
void st_writer_free(StWriter *w); // accepts NULL

#endif
