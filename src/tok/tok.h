// tok.h - byte-level BPE tokenizer (Llama-3, GPT-2), id-for-id exact to HF `tokenizers`.
//
// Formats (data-formats.md §7):
//   * HF tokenizer.json, model type "BPE" over the GPT-2 byte-to-unicode alphabet, with either
//     the Llama-3 pre-tokenizer (Sequence[Split(Llama-3 regex, Isolated), ByteLevel(use_regex
//     false)]) or the GPT-2 one (ByteLevel, use_regex true, add_prefix_space false);
//     `ignore_merges`, `added_tokens` (special or not) honoured.
//   * tiktoken text file (`tokenizer.model`: "base64(bytes) rank" per line, rank == id), merged
//     by token rank, pre-tokenized with the Llama-3 regex. Special tokens are not in that file:
//     if a `tokenizer_config.json` lies in the same directory, its `added_tokens_decoder` and
//     `bos_token`/`eos_token` are used; otherwise the tokenizer has no added tokens.
//
// Threading: a loaded KdaTokenizer is read-only. tok_encode/tok_decode and the queries may be
// called from any number of threads at once on one tokenizer; each thread keeps its own
// scratch and piece cache (thread-local, about 300 KB, freed at thread exit; a cache left from a
// freed tokenizer is recognised by a per-load serial number and reset).
#ifndef KDA_TOK_H
#define KDA_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct KdaTokenizer KdaTokenizer;

// Encode flags.
enum {
    TOK_ADD_BOS = 1,  // prepend the BOS id (error if the tokenizer has none)
    TOK_ADD_EOS = 2,  // append the EOS id (error if the tokenizer has none)
    TOK_SPECIALS = 4, // recognise *special* added tokens written literally in the text (HF's
                      // default behaviour); without it they are encoded as ordinary text.
                      // Non-special added tokens are always recognised (as in HF).
    TOK_POST = 8,     // apply tokenizer.json's post_processor (HF add_special_tokens=True): the
                      // ids its single-sequence template puts around the text (Llama 3.2: BOS
                      // before). TOK_ADD_BOS / TOK_ADD_EOS then add an id only where the
                      // template did not already put it (no duplicate BOS).
};

// Input format for tok_load_buffer.
typedef enum {
    TOK_FORMAT_AUTO = 0,     // tokenizer.json if the first non-space byte is '{', else tiktoken
    TOK_FORMAT_HF_JSON = 1,  // HF tokenizer.json
    TOK_FORMAT_TIKTOKEN = 2, // tiktoken "base64 rank" lines
} TokFormat;

// Caller-owned growable id buffer. Zero-initialise ({0}); tok_encode appends and grows it
// (kda_realloc). Release with tok_ids_free. ids: [n] int32, cap >= n.
typedef struct {
    int32_t *ids;
    size_t n, cap;
} TokIds;

// Caller-owned growable byte buffer, same rules as TokIds. data is NUL-terminated after every
// tok_decode (data[n] == 0) for convenience, but may contain NUL bytes inside.
typedef struct {
    char *data;
    size_t n, cap;
} TokBytes;

// Loads a tokenizer from a file (format detected from content: tokenizer.json vs tiktoken).
// On success *out owns everything; on error returns -1, *out = NULL, err names file and field.
int tok_load(KdaTokenizer **out, const char *path, KdaError *err);

// Loads from a memory buffer data[0..n) (fuzzing, embedded assets). `dir` is the directory used
// to look for a sibling tokenizer_config.json for tiktoken input (NULL: none). The buffer is not
// retained. Never reads past n; any malformed input returns -1 with a message.
int tok_load_buffer(KdaTokenizer **out, const char *data, size_t n, TokFormat fmt, const char *dir,
                    KdaError *err);

// Releases t (NULL is fine). No other thread may use t during or after the call.
void tok_free(KdaTokenizer *t);

// Encodes text[0..n) (any bytes; invalid UTF-8 bytes are treated as single non-letter,
// non-digit, non-space characters, so decode(encode(x)) == x for every byte string) and APPENDS
// the ids to *out. flags: TOK_ADD_BOS | TOK_ADD_EOS | TOK_SPECIALS. Thread-safe.
// Returns 0, or -1 only when BOS/EOS is requested but undefined (out unchanged then).
int tok_encode(const KdaTokenizer *t, const char *text, size_t n, int flags, TokIds *out,
               KdaError *err);

// Decodes ids[0..n) to raw bytes and APPENDS them to *out (no UTF-8 repair: the bytes are
// exactly the concatenated token bytes; special/added tokens give their content string).
// Returns -1 (out unchanged) if an id is outside [0, tok_vocab_size) or has no token.
int tok_decode(const KdaTokenizer *t, const int32_t *ids, size_t n, TokBytes *out, KdaError *err);

void tok_ids_free(TokIds *ids);   // frees ids->ids and zeroes the struct
void tok_bytes_free(TokBytes *b); // frees b->data and zeroes the struct

// Vocabulary queries.
int32_t tok_vocab_size(const KdaTokenizer *t); // 1 + largest id, added tokens included
int32_t tok_bos_id(const KdaTokenizer *t);     // -1 if none
int32_t tok_eos_id(const KdaTokenizer *t);     // -1 if none (Llama-3: 128001; GPT-2: 50256)
// Token string -> id, or -1. `s` is the token as written in tokenizer.json: byte-level alphabet
// for BPE tokens (e.g. "Ġthe"), literal content for added tokens ("<|end_of_text|>").
int32_t tok_token_to_id(const KdaTokenizer *t, const char *s, size_t len);
// id -> token string in the same spelling as tok_token_to_id (NUL-terminated, owned by t),
// or NULL if id is out of range or unused. *len (if non-NULL) gets the byte length.
const char *tok_id_to_token(const KdaTokenizer *t, int32_t id, size_t *len);
// id -> the raw bytes the token decodes to (owned by t), or NULL. *len gets the length.
const char *tok_token_bytes(const KdaTokenizer *t, int32_t id, size_t *len);
// 1 if id is an added token marked special (BOS, EOS, <|eot_id|>, ...), else 0.
int tok_is_special(const KdaTokenizer *t, int32_t id);

// The post_processor of a tokenizer.json (tiktoken files have none): *prefix / *suffix point to
// the ids TOK_POST adds before / after the text (owned by t; counts in *n_prefix, *n_suffix).
// Supported: null, ByteLevel (adds nothing), TemplateProcessing (its "single" template),
// BertProcessing / RobertaProcessing (cls ... sep), and Sequence of these. Returns a short
// description for logs and results ("TemplateProcessing [128000] $A", "none").
const char *tok_post_processor(const KdaTokenizer *t, const int32_t **prefix, int *n_prefix,
                               const int32_t **suffix, int *n_suffix);
// 1 when TOK_POST starts the ids with BOS (what lm-eval's HF backend then feeds the model).
int tok_post_adds_bos(const KdaTokenizer *t);

#endif
