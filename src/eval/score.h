// score.h - input side of `kda score`: JSON-lines sequences ({"ids": [...]} or {"text": ...})
// read and validated into token-id arrays. Library code: errors return -1 with one line
// "FILE:LINE: what" in err; nothing is printed.
#ifndef KDA_EVAL_SCORE_H
#define KDA_EVAL_SCORE_H

#include <stdint.h>

#include "core/error.h" // defines: KdaError
#include "tok/tok.h"    // defines: KdaTokenizer

typedef struct {
    int32_t *ids; // [n] int32, owned (NULL for a blank line)
    int64_t n;    // 0 for a blank line
} ScoreSeq;

// Reads every line of file; a blank line gives an entry with n = 0 and ids NULL (so entry i is
// line i + 1). ids must be integers in [0, vocab); every sequence needs >= 2 tokens. "text"
// lines are encoded with tok (error if tok is NULL), with tok_encode flags tok_flags
// (cmd_score: TOK_POST, HF's default). On success *seqs (malloc'ed, *n entries) is owned by the
// caller (score_seqs_free).
int score_read_input(const char *file, const KdaTokenizer *tok, int tok_flags, int64_t vocab,
                     ScoreSeq **seqs, int64_t *n, KdaError *err);
void score_seqs_free(ScoreSeq *seqs, int64_t n);

#endif
