// tfevents.h - TensorBoard event files (scalars only), written and read without TensorFlow.
//
// File format (TensorFlow's TFRecord framing around `Event` protocol buffers):
//   record = uint64 length LE | uint32 masked_crc32c(length bytes) | data[length] |
//            uint32 masked_crc32c(data); masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8,
//   crc32c = CRC-32C (Castagnoli, reflected polynomial 0x82f63b78).
//   Event {double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5}
//   Summary {repeated Value value = 1}; Value {string tag = 1; float simple_value = 2}.
// The first record is {wall_time, file_version: "brain.Event:2"}; each scalar is one Event.
// The file is DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid> (TensorBoard reads every
// file whose name contains "tfevents").
//
// Threads: one writer per thread. Errors: every write is checked; a failed write leaves the
// writer failed (later calls return -1).
#ifndef KDA_TFEVENTS_H
#define KDA_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct KdaTfEvents KdaTfEvents;

// Creates DIR (and parents) and a new event file in it; *out owns it. path (may be NULL, cap
// bytes) gets the file's path.
int kda_tfevents_open(KdaTfEvents **out, const char *dir, char *path, size_t cap, KdaError *err);
// Appends one scalar event (tag: UTF-8, e.g. "lm loss"; wall_time: Unix seconds).
int kda_tfevents_scalar(KdaTfEvents *w, const char *tag, int64_t step, double wall_time,
                        float value, KdaError *err);
// fflush + the file's error state; call after each batch of scalars so TensorBoard sees them.
int kda_tfevents_flush(KdaTfEvents *w, KdaError *err);
void kda_tfevents_close(KdaTfEvents *w); // NULL is fine

// CRC-32C of data[0..n) (exposed for tests: crc32c("123456789") = 0xe3069283).
uint32_t kda_crc32c(const void *data, size_t n);

typedef struct {
    char tag[128];
    int64_t step;
    double wall_time;
    float value;
} KdaTfScalar;

// Reads every scalar event of an event file, checking both CRCs of every record and the
// protobuf framing; events without a simple_value (file_version) are skipped. *out [*n] is the
// caller's to free. Errors name the file and the record's offset.
int kda_tfevents_read(const char *path, KdaTfScalar **out, int64_t *n, KdaError *err);

#endif
