// mt19937.h - numpy's legacy RandomState generator (MT19937) and its `shuffle`, bit for bit.
//
// Megatron's GPTDataset shuffles its document and shuffle indices with
// numpy.random.RandomState(seed).shuffle (data-formats.md §2.2). This module reproduces:
//   * RandomState(int seed): MT19937 init_genrand(seed) (numpy's legacy seeding of a Python
//     int in [0, 2^32) fills the key with init_genrand, not init_by_array; verified against
//     numpy 2.4: RandomState(42).get_state()[1][0] == 42);
//   * next32: the tempered 32-bit output; next64: (first << 32) | second, as numpy's
//     mt19937_next64;
//   * interval(max): numpy's random_interval, a uniform draw in [0, max] by masked rejection
//     (mask = smallest 2^k - 1 >= max; 32-bit draws when max fits 32 bits, else 64-bit);
//   * shuffle: Fisher-Yates from the last element down: for i = n-1 .. 1, j = interval(i),
//     swap x[i], x[j] (numpy's legacy RandomState.shuffle on a 1-D array). The draws do not
//     depend on the element type.
// Goldens: tests/data/gpt_dataset/ (tools/reference/gpt_dataset_reference.py).
#ifndef KDA_MT19937_H
#define KDA_MT19937_H

#include <stdint.h>

#define KDA_MT_N 624

typedef struct {
    uint32_t key[KDA_MT_N];
    int pos; // next word of key to temper; KDA_MT_N means "regenerate first"
} KdaMt19937;

void mt19937_seed(KdaMt19937 *r, uint32_t seed); // RandomState(seed)
uint32_t mt19937_next32(KdaMt19937 *r);
uint64_t mt19937_next64(KdaMt19937 *r);
uint64_t mt19937_interval(KdaMt19937 *r, uint64_t max);         // uniform in [0, max]
void mt19937_shuffle_i32(KdaMt19937 *r, int32_t *x, int64_t n); // x: [n]
void mt19937_shuffle_i64(KdaMt19937 *r, int64_t *x, int64_t n); // x: [n]

#endif
