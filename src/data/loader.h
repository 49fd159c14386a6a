// loader.h - training data: one or more Megatron .bin/.idx prefixes (optionally a weighted
// blend), Megatron's train/valid/test split, GPTDataset sample indices (gpt_dataset.h), and
// micro-batches of token ids + labels with an optional prefetch thread.
//
// A sample is fully determined by (data description, seed, split, global sample index): the
// data cursor of a run is the single integer `consumed samples`, so resume is exact.
//
// Datasets and split: every prefix is split by documents with `split` ("969,30,1"); split k
// uses the documents [bounds[k], bounds[k+1]) (kda_split_bounds over the .idx document count)
// and their sequences. With a separate valid list (valid_data_path) the whole of each valid
// dataset is used. Blends: "w1 p1 w2 p2" weights; a plain list of several prefixes is weighted
// by the token counts of their splits. Each dataset gets a GPTDataset index for
// kda_blend_dataset_size(num_samples, w, 0.005) samples; samples are interleaved by
// kda_blend_build (Megatron's BlendedDataset). One dataset: no blending, sample i = index i.
//
// Objectives (what one row of a micro-batch holds, T = kda_loader_row_tokens):
//   KDA_OBJ_MEGATRON: T = seq_length + 1 ids = the sample window; the model's shifted labels
//       give seq_length targets (the last position predicts nothing).
//   KDA_OBJ_FLA:      T = seq_length ids = the window's first seq_length tokens (consecutive
//       windows overlap by one token, so these rows tile the stream); seq_length - 1 targets,
//       the last position ignored (FLA's 2047-of-2048).
// Sample indices past the index's size wrap around (only the valid set may need it).
//
// Data orders (which rows, in what order; independent of the objective's target count):
//   KDA_ORDER_MEGATRON: the GPTDataset windows above (multi-epoch, shuffled), any objective.
//   KDA_ORDER_FLA: FLA's chunk dataset in Primus's FLAOrderGPTDataset order (data-formats.md
//       §3.3); requires KDA_OBJ_FLA (a row = one seq_length-token chunk, seq_length - 1
//       targets, the last position ignored) and exactly one dataset prefix. The split (by
//       documents) still applies. Chunks: the split's sequences concatenated in .idx order
//       and cut into seq_length-token chunks, the remainder of the split dropped. For FLA-style
//       data (e.g. Primus's convert_fla_to_megatron output: every sequence exactly seq_length
//       tokens) chunk c is simply the split's sequence c. FLA drops the remainder per map batch
//       of 2048 documents (§3.1 step 3); an .idx has no batch boundaries, so here it is
//       dropped once per split: on raw documents the chunks are FLA's only up to that.
//       Order: sample g is chunk kda_fla_order_chunk(order, g, micro_batch) with
//       order = kda_fla_order_build(n_chunks, dp, seed) (our seeded permutation, not
//       torch.randperm); past order.total samples the same permutation repeats (no reshuffle,
//       as in Primus). kda_loader_n_samples = order.total. The cursor is still the global
//       sample index, so resume is exact. The description (and fingerprint) gains
//       "order=fla chunks=N dropped=R dp=D" (and "mbs=M" when dp > 1); Megatron-order
//       descriptions are unchanged.
#ifndef KDA_LOADER_H
#define KDA_LOADER_H

#include <stdint.h>

#include "core/error.h"

typedef enum { KDA_OBJ_MEGATRON = 0, KDA_OBJ_FLA = 1 } KdaObjective;
typedef enum { KDA_ORDER_MEGATRON = 0, KDA_ORDER_FLA = 1 } KdaDataOrder;

typedef struct KdaLoader KdaLoader;

typedef struct {
    const char *const *paths; // [n_paths] dataset prefixes (borrowed during open)
    const double *weights;    // [n_paths] normalized blend weights, or NULL (token counts)
    int n_paths;
    const char *split;   // "969,30,1" (ignored when whole_split is set)
    int split_part;      // 0 train, 1 valid, 2 test
    int whole;           // 1: use every document (a separate valid list)
    int64_t seq_length;  // tokens per sample (the window holds seq_length + 1)
    int64_t num_samples; // samples the run needs (>= 1)
    uint32_t seed;       // RandomState seed of the shuffles
    KdaObjective objective;
    int64_t n_vocab;     // every token id must be below it (checked per batch)
    KdaDataOrder order;  // zero = KDA_ORDER_MEGATRON
    int64_t dp;          // KDA_ORDER_FLA: data-parallel ranks of the mapping (0 = 1)
    int64_t micro_batch; // KDA_ORDER_FLA: micro batch of the mapping (0 = 1; no effect at dp 1)
} KdaLoaderSpec;

// Opens and validates the datasets and builds the indices. On error returns -1 (*out NULL)
// with a message naming the prefix (e.g. an empty split).
int kda_loader_open(KdaLoader **out, const KdaLoaderSpec *spec, KdaError *err);
void kda_loader_free(KdaLoader *l); // stops the prefetch thread; accepts NULL

int64_t kda_loader_row_tokens(const KdaLoader *l); // T of a row (see Objectives)
int64_t kda_loader_n_samples(const KdaLoader *l);  // samples before wrap-around
// KDA_ORDER_FLA: the chunk id of global sample g (0 <= id < kda_loader_n_chunks); -1 in
// Megatron order. Chunk c is tokens [c * seq_length, (c + 1) * seq_length) of the split.
int64_t kda_loader_fla_chunk(const KdaLoader *l, int64_t g);
int64_t kda_loader_n_chunks(const KdaLoader *l); // KDA_ORDER_FLA: N; 0 in Megatron order
// A one-line description of the data (paths, weights, split, part, seq_length, seed,
// objective, tokens per dataset) and its 64-bit FNV-1a fingerprint, for checkpoints.
const char *kda_loader_describe(const KdaLoader *l);
uint64_t kda_loader_fingerprint(const KdaLoader *l);

// Fills the micro-batch of samples [first, first + B): ids [B, T] int32 (labels are the ids:
// the model shifts them). Synchronous. Fails (-1) on a token id >= n_vocab (names the dataset
// and sequence).
int kda_loader_read(KdaLoader *l, int64_t first, int64_t B, int32_t *ids, KdaError *err);

// Prefetch: a background thread reads micro-batches of B samples starting at `first`,
// `first + B`, ... ahead into a ring of `depth` buffers. kda_loader_next returns them in order
// (ids [B, T] int32, borrowed until the next call); calling kda_loader_start again restarts
// from a new position. Errors of the reader thread are returned by kda_loader_next.
int kda_loader_start(KdaLoader *l, int64_t first, int64_t B, int depth, KdaError *err);
const int32_t *kda_loader_next(KdaLoader *l, KdaError *err);
// The same with batches `stride` samples apart: batch k = samples [first + k * stride,
// first + k * stride + B). Data parallelism: rank r of D reads first = cursor + r * B,
// stride = D * B, its slice of the one global order.
int kda_loader_start_strided(KdaLoader *l, int64_t first, int64_t B, int64_t stride, int depth,
                             KdaError *err);

#endif
