// gpt_dataset.h - Megatron GPTDataset-compatible sample indices, split ranges, blending and
// the FLA-order mapping (data-formats.md §2 and §3.3-3.4). Backend-agnostic: works on the
// per-sequence lengths of an indexed dataset (int32, §1.2) and says which token ranges form a
// sample; reading the tokens is the data loader's job.
//
// Megatron objective (§2): a split's sequences are tiled over E epochs and shuffled (document
// index), cut into windows of seq_length + 1 tokens that overlap by one token (sample index),
// and the windows are shuffled (shuffle index). One MT19937 RandomState(seed) drives the
// shuffles in that order, so the indices equal Megatron's .npy caches bit for bit.
//
// Conventions: "sequence id" is a row of the .idx (an index into lengths); the unit of
// shuffling is the sequence, as in Megatron. add_extra_token is always 1 and the last partial
// sample is always dropped (Megatron's defaults for training).
#ifndef KDA_GPT_DATASET_H
#define KDA_GPT_DATASET_H

#include <stdint.h>

#include "core/error.h"

typedef struct {
    int64_t seq_length;       // tokens per sample (the sample holds seq_length + 1)
    int64_t num_samples;      // samples requested (train_iters * global_batch), 0 = 1 epoch
    int64_t num_epochs;       // E
    int separate_last_epoch;  // last epoch shuffled on its own (§2.1)
    int64_t tokens_per_epoch; // sum of the split's lengths
    int64_t n_samples;        // samples in the sample index (>= num_samples)
    int64_t n_samples_first;  // samples before the separately shuffled tail (= n_samples
                              // when not separate)
    int32_t *document_index;  // [E * n_seq] sequence ids, owned
    int64_t n_document_index;
    int64_t *sample_index;  // [n_samples + 1, 2] (document-index position, offset of the
                            // sample's last token), owned
    int64_t *shuffle_index; // [n_samples] sample ids, owned
} KdaGptIndex;

// Builds the three indices for the sequences [first, first + count) of lengths (a split of
// the dataset; lengths is the whole dataset's length array, n_lengths entries). seed is the
// RandomState seed (0..2^32-1). Fails (-1, message in err) on an empty split, seq_length < 2,
// a negative length, or a split with fewer than seq_length + 1 tokens. On failure ix is zeroed.
int kda_gpt_index_build(KdaGptIndex *ix, const int32_t *lengths, int64_t n_lengths, int64_t first,
                        int64_t count, int64_t seq_length, int64_t num_samples, uint32_t seed,
                        KdaError *err);
void kda_gpt_index_free(KdaGptIndex *ix); // accepts a zeroed index

// One contiguous token range of a sample: tokens [offset, offset + length) of sequence seq.
typedef struct {
    int64_t seq;
    int64_t offset;
    int64_t length;
} KdaSpan;

// The spans of sample i (0 <= i < ix->n_samples; the shuffle index is applied here, as
// GPTDataset.__getitem__ does). Writes at most cap spans, returns the number the sample has
// (may exceed cap: call again with a larger buffer). Their lengths sum to seq_length + 1.
int64_t kda_gpt_sample_spans(const KdaGptIndex *ix, const int32_t *lengths, int64_t i,
                             KdaSpan *spans, int64_t cap);

// ---- splits (Megatron's "969,30,1" string) ----

// Parses every run of [.0-9] in s as a number (Megatron's re.findall), pads with zeros to 3
// (train, valid, test) and normalizes to sum 1. Errors: more than 3 numbers, all zero.
int kda_split_parse(const char *s, double split[3], KdaError *err);
// Megatron's _get_split_indices: bounds[0] = 0, bounds[k+1] = bounds[k] + round(split[k] * n)
// (Python round: half to even), then every bound shifted so that bounds[3] == n.
// Split k is [bounds[k], bounds[k+1]). n counts .idx documents in Megatron (D - 1); for
// one-sequence-per-document data that is the number of sequences.
void kda_split_bounds(const double split[3], int64_t n, int64_t bounds[4]);

// ---- blends ("w1 p1 w2 p2" weighted data paths) ----

// Normalizes w[0..n) to sum 1 in place. Errors: n < 1, a negative or non-finite weight, sum 0.
int kda_blend_normalize(double *w, int n, KdaError *err);
// Samples each dataset must provide for a blended split of target samples:
// ceil(ceil(target * weight) * (1 + surplus)); Megatron's default surplus is 0.005.
int64_t kda_blend_dataset_size(int64_t target, double weight, double surplus);
// Megatron's build_blending_indices: for sample s the dataset with the largest error
// weight[d] * max(s, 1) - taken[d] (first on ties) is chosen. dataset_index: [size],
// dataset_sample_index: [size] (the count taken from that dataset before s).
void kda_blend_build(const double *weights, int n, int64_t size, int16_t *dataset_index,
                     int64_t *dataset_sample_index);

// ---- FLA-order mode (data-formats.md §3.3) ----
//
// Reproduces the *structure* of Primus's FLAOrderGPTDataset: a permutation of the chunk ids
// padded by repeating its head to a multiple of dp, read with DistributedSampler's stride
// (rank r takes perm[r], perm[r + dp], ...) under Megatron's contiguous `single` sampler.
// The permutation itself is OURS: torch.randperm (and HF datasets' shuffle before it) cannot
// be reproduced here, so perm = MT19937 RandomState(seed).shuffle(arange(n_chunks)). FLA's
// batches are therefore matched in structure, not in content.
typedef struct {
    int64_t n_chunks; // N
    int64_t dp;       // data-parallel ranks the order was built for
    int64_t total;    // ceil(N / dp) * dp: global samples before the order wraps
    int64_t n_perm;   // N + min(total - N, N) (Python's perm + perm[:padding])
    int64_t *perm;    // [n_perm], owned; entries past N repeat the head
} KdaFlaOrder;

int kda_fla_order_build(KdaFlaOrder *o, int64_t n_chunks, int64_t dp, uint32_t seed, KdaError *err);
void kda_fla_order_free(KdaFlaOrder *o);
// Chunk id for Megatron global sample g with micro batch mbs: g wraps modulo total; then
// t = g / (mbs*dp), r = (g % (mbs*dp)) / mbs, j = g % mbs, k = r + (t*mbs + j)*dp and the
// chunk is perm[k], or chunk 0 when k >= total (Primus's behaviour when total is not a
// multiple of mbs*dp).
int64_t kda_fla_order_chunk(const KdaFlaOrder *o, int64_t g, int64_t mbs);

#endif
