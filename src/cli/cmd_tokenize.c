// cmd_tokenize.c - `kda tokenize` (text corpora -> Megatron .bin/.idx) and `kda dataset-info`.
//
// tokenize: the main thread reads a batch of documents (readers.h), the workers tokenize the
// batch in parallel (OpenMP, dynamic schedule, one id buffer per batch slot), and the main
// thread appends the results in input order to the builder (indexed.h). Output bytes therefore
// do not depend on --workers. One sequence per document; empty documents are skipped and
// counted. The output pair is published only at the very end (.bin, then .idx); on an error or
// SIGINT/SIGTERM the temporary files are removed and no PREFIX.idx is left behind.
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/args.h"         // defines: ArgSpec, ArgTable, args_parse_or_die
#include "core/log.h"          // defines: Progress, kda_info, human_count
#include "core/util.h"         // defines: now_seconds
#include "data/import_arrow.h" // defines: kda_import_arrow, kda_arrow_input
#include "data/indexed.h"      // defines: IndexedBuilder, IndexedDataset
#include "data/readers.h"      // defines: DocReader, docreader_expand
#include "tok/tok.h"           // defines: KdaTokenizer, tok_encode

// ---- tokenize ---------------------------------------------------------------------------------

#define BATCH_DOCS  2048
#define BATCH_BYTES ((size_t)16 << 20)

typedef struct {
    char *text; // owned arena of the batch's documents, back to back
    size_t used, cap;
    size_t *off, *len; // owned [BATCH_DOCS]
    int n;
    TokIds *ids; // owned [BATCH_DOCS], buffers reused across batches
} Batch;

typedef struct {
    int64_t docs, empty, tokens, max_doc_tokens;
} TokCounts;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    g_stop = sig;
}

static void batch_add(Batch *b, const char *s, size_t n) {
    if (b->used + n > b->cap) {
        b->cap = (b->used + n) * 2;
        b->text = kda_realloc(b->text, b->cap);
    }
    memcpy(b->text + b->used, s, n);
    b->off[b->n] = b->used, b->len[b->n] = n;
    b->used += n, b->n++;
}

// Fills b from the reader. Returns 1 if documents were read, 0 at the end, -1 on error.
static int batch_fill(Batch *b, DocReader *rd, TokCounts *c, KdaError *err) {
    b->n = 0, b->used = 0;
    while (b->n < BATCH_DOCS && b->used < BATCH_BYTES) {
        const char *s;
        size_t n;
        int rc = docreader_next(rd, &s, &n, err);
        if (rc < 0) return -1;
        if (rc == 0) break;
        if (n == 0) {
            c->empty++;
            continue;
        }
        batch_add(b, s, n);
    }
    return b->n > 0;
}

static void batch_tokenize(Batch *b, const KdaTokenizer *tok, int flags, int workers) {
#pragma omp parallel for num_threads(workers) schedule(dynamic, 8)
    for (int i = 0; i < b->n; i++) {
        KdaError e;
        b->ids[i].n = 0;
        // Cannot fail: BOS/EOS availability is checked before the first batch.
        int rc = tok_encode(tok, b->text + b->off[i], b->len[i], flags, &b->ids[i], &e);
        KDA_ASSERT(rc == 0);
    }
}

static int batch_write(const Batch *b, IndexedBuilder *bld, TokCounts *c, KdaError *err) {
    for (int i = 0; i < b->n; i++) {
        if (indexed_builder_add(bld, b->ids[i].ids, (int64_t)b->ids[i].n, err) != 0) return -1;
        indexed_builder_end_document(bld);
        c->docs++;
        c->tokens += (int64_t)b->ids[i].n;
        if ((int64_t)b->ids[i].n > c->max_doc_tokens) c->max_doc_tokens = (int64_t)b->ids[i].n;
    }
    return 0;
}

static void batch_free(Batch *b) {
    for (int i = 0; i < BATCH_DOCS; i++)
        tok_ids_free(&b->ids[i]);
    free(b->ids), free(b->off), free(b->len), free(b->text);
}

typedef struct {
    const char *tokenizer, *prefix, *json_key, *txt_docs;
    ArgList inputs;
    int append_eod, bos, specials, skip_bad, quiet, post;
    int64_t workers;
    int64_t max_record_mb; // longest input record (line / .txt document), MiB
} TokOpts;

static void progress_extra(char *buf, size_t cap, const TokCounts *c, double el) {
    char a[32], b[32], r[32];
    snprintf(buf, cap, "%s docs, %s tok, %s tok/s", human_count(a, 32, (double)c->docs),
             human_count(b, 32, (double)c->tokens),
             human_count(r, 32, el > 0 ? (double)c->tokens / el : 0));
}

// The whole run; returns 0 or -1 with err set (outputs removed).
static int tokenize_run(const TokOpts *o, KdaError *err) {
    double t_load = now_seconds();
    KdaTokenizer *tok;
    if (tok_load(&tok, o->tokenizer, err) != 0) return -1;
    double t0 = now_seconds(); // throughput excludes loading the tokenizer
    t_load = t0 - t_load;
    int flags = (o->bos ? TOK_ADD_BOS : 0) | (o->append_eod ? TOK_ADD_EOS : 0) |
                (o->specials ? TOK_SPECIALS : 0) | (o->post ? TOK_POST : 0);
    if (o->append_eod && tok_eos_id(tok) < 0) {
        tok_free(tok);
        return kda_fail(err, "%s: tokenizer has no EOS id, needed for --append-eod", o->tokenizer);
    }
    if (o->bos && tok_bos_id(tok) < 0) {
        tok_free(tok);
        return kda_fail(err, "%s: tokenizer has no BOS id, needed for --bos", o->tokenizer);
    }
    char **paths;
    int n_paths;
    if (docreader_expand(o->inputs.items, o->inputs.n, &paths, &n_paths, err) != 0) {
        tok_free(tok);
        return -1;
    }
    DocReaderOptions ro = {o->json_key, !strcmp(o->txt_docs, "lines"), o->skip_bad,
                           (size_t)o->max_record_mb << 20};
    DocReader *rd = NULL;
    IndexedBuilder bld;
    memset(&bld, 0, sizeof bld);
    int dtype = indexed_dtype_for_vocab(tok_vocab_size(tok));
    int rc = docreader_open(&rd, paths, n_paths, &ro, err);
    if (rc == 0) rc = indexed_builder_open(&bld, o->prefix, dtype, err);
    docreader_free_paths(paths, n_paths);
    DocReaderStats st;
    memset(&st, 0, sizeof st);
    if (rd) docreader_stats(rd, &st);
    if (!o->quiet && rc == 0)
        kda_info("tokenize: %d input file(s), %.1f MB, vocab %d -> dtype %s, %lld worker(s), "
                 "tokenizer loaded in %.2f s",
                 st.n_files, (double)st.total_bytes / 1e6, tok_vocab_size(tok),
                 indexed_dtype_name(dtype), (long long)o->workers, t_load);
    Batch b = {0};
    b.off = kda_malloc(sizeof(size_t) * BATCH_DOCS);
    b.len = kda_malloc(sizeof(size_t) * BATCH_DOCS);
    b.ids = kda_calloc(BATCH_DOCS, sizeof(TokIds));
    TokCounts c = {0};
    Progress pr;
    progress_init(&pr, "tokenize", (double)st.total_bytes / 1e6, "MB");
    char extra[128];
    while (rc == 0) {
        int got = batch_fill(&b, rd, &c, err);
        if (got < 0) {
            rc = -1;
            break;
        }
        if (got == 0) break;
        batch_tokenize(&b, tok, flags, (int)o->workers);
        rc = batch_write(&b, &bld, &c, err);
        if (rc == 0 && g_stop) rc = kda_fail(err, "interrupted by signal %d", (int)g_stop);
        if (rc == 0 && !o->quiet) {
            docreader_stats(rd, &st);
            progress_extra(extra, sizeof extra, &c, now_seconds() - t0);
            progress_update(&pr, (double)st.bytes_read / 1e6, extra);
        }
    }
    if (rd) docreader_stats(rd, &st);
    if (rc == 0) {
        rc = indexed_builder_finish(&bld, err);
    } else if (bld.bin) {
        indexed_builder_abort(&bld);
    }
    double el = now_seconds() - t0;
    if (rc == 0 && !o->quiet) {
        progress_extra(extra, sizeof extra, &c, el);
        progress_finish(&pr, (double)st.bytes_read / 1e6, extra);
        kda_info("tokenize: wrote %s.bin/.idx: %lld documents, %lld tokens (max %lld per doc), "
                 "%lld empty skipped, %lld bad records skipped, %lld Parquet nulls; %.1f s, "
                 "%.2f MB/s, %.0f tokens/s",
                 o->prefix, (long long)c.docs, (long long)c.tokens, (long long)c.max_doc_tokens,
                 (long long)c.empty, (long long)st.bad_records, (long long)st.nulls, el,
                 (double)st.bytes_read / 1e6 / (el > 0 ? el : 1),
                 (double)c.tokens / (el > 0 ? el : 1));
        if (st.bad_records) kda_warn("first skipped record: %s", st.first_bad);
    }
    batch_free(&b);
    docreader_close(rd);
    tok_free(tok);
    return rc;
}

// Megatron's preprocess_data.py habits: --tokenizer-type HuggingFaceTokenizer --tokenizer-model
// DIR, a tokenizer directory, --json-keys, PREFIX_<key>_document names. Fills o->tokenizer and
// o->prefix (path/prefix buffers of PATH_MAX); usage errors exit 2.
static void megatron_habits_(TokOpts *o, const char *tok_type, const char *tok_model,
                             const ArgList *json_keys, int megatron_names, int arrow, char *path,
                             char *prefix) {
    if (tok_type && strcmp(tok_type, "HuggingFaceTokenizer"))
        kda_usage_die("kda tokenize",
                      "--tokenizer-type %s: kda reads HF tokenizer.json and tiktoken files; use "
                      "HuggingFaceTokenizer with --tokenizer-model DIR",
                      tok_type);
    if (o->tokenizer && tok_model && strcmp(o->tokenizer, tok_model))
        kda_usage_die("kda tokenize", "--tokenizer and --tokenizer-model name different files");
    const char *t = o->tokenizer ? o->tokenizer : tok_model;
    if (!t && !arrow)
        kda_usage_die("kda tokenize", "missing --tokenizer (or --tokenizer-model DIR)");
    snprintf(path, PATH_MAX, "%s", t ? t : "");
    if (t && path_is_dir(t)) { // an HF tokenizer directory, as Megatron's --tokenizer-model takes
        path_join(path, PATH_MAX, t, "tokenizer.json");
        if (!path_exists(path)) path_join(path, PATH_MAX, t, "tokenizer.model");
    }
    o->tokenizer = t ? path : NULL;
    if (json_keys->n > 1)
        kda_usage_die("kda tokenize", "--json-keys: one key per run (got %d)", json_keys->n);
    if (json_keys->n == 1) o->json_key = json_keys->items[0];
    if (megatron_names) { // preprocess_data.py: {output_prefix}_{key}_document.bin/.idx
        snprintf(prefix, PATH_MAX, "%s_%s_document", o->prefix, o->json_key);
        o->prefix = prefix;
    }
}

// HF datasets Arrow inputs (save_to_disk dirs, .arrow shards): --json-key input_ids copies the
// ids, a string column is tokenized (import_arrow.h).
static int import_arrow_(const TokOpts *o, int64_t vocab_size) {
    KdaError err;
    KdaTokenizer *tok = NULL;
    if (o->tokenizer && tok_load(&tok, o->tokenizer, &err)) {
        fprintf(stderr, "kda: error: %s\n", err.msg);
        return 1;
    }
    KdaArrowImport opt = {.column = o->json_key,
                          .tok = tok,
                          .tok_flags = (o->bos ? TOK_ADD_BOS : 0) |
                                       (o->append_eod ? TOK_ADD_EOS : 0) |
                                       (o->specials ? TOK_SPECIALS : 0) | (o->post ? TOK_POST : 0),
                          .vocab_size = vocab_size > 0 ? vocab_size
                                        : tok          ? tok_vocab_size(tok)
                                                       : 0};
    int64_t docs, tokens;
    int rc = kda_import_arrow(o->inputs.items, o->inputs.n, &opt, o->prefix, &docs, &tokens, &err);
    tok_free(tok);
    if (rc) {
        fprintf(stderr, "kda: error: %s\nkda: no output written (%s.idx not created)\n", err.msg,
                o->prefix);
        return 1;
    }
    if (!o->quiet)
        kda_info("%s.bin/.idx: %lld documents, %lld tokens from column '%s'%s", o->prefix,
                 (long long)docs, (long long)tokens, o->json_key,
                 tok ? " (tokenized)" : " (ids copied)");
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *tok_type = NULL, *tok_model = NULL;
    int64_t vocab_size = 0;
    ArgList json_keys = {0};
    int megatron_names = 0;
    char tok_path[PATH_MAX], prefix[PATH_MAX];
    TokOpts o = {.json_key = "text",
                 .txt_docs = "file",
                 .specials = 1,
                 .post = 1,
                 .workers = omp_get_num_procs(),
                 .max_record_mb = (int64_t)(DOCREADER_MAX_RECORD >> 20)};
    const ArgSpec specs[] = {
        {"tokenizer", ARG_STR, &o.tokenizer,
         "tokenizer.json, tiktoken tokenizer.model, or a directory holding one", 0},
        {"tokenizer-model", ARG_STR, &tok_model, "Megatron's name for --tokenizer (an HF dir)", 0},
        {"tokenizer-type", ARG_STR, &tok_type, "Megatron's; HuggingFaceTokenizer (the only one)",
         0},
        {"input", ARG_STRS, &o.inputs,
         "files, directories (recursive) or globs: .jsonl/.json/"
         ".ndjson/.txt (+.gz/.zst), .parquet; or HF datasets .arrow shards / save_to_disk "
         "dirs (--json-key input_ids: ids copied, no tokenizer)",
         1},
        {"output-prefix", ARG_STR, &o.prefix, "writes PREFIX.bin and PREFIX.idx", 1},
        {"json-key", ARG_STR, &o.json_key, "JSONL key / Parquet column holding the text", 0},
        {"json-keys", ARG_STRS, &json_keys, "Megatron's name for --json-key (one key)", 0},
        {"vocab-size", ARG_INT, &vocab_size,
         "Arrow input_ids: ids must be below it (default: the tokenizer's, else the largest id "
         "+ 1); it sets the dtype",
         0},
        {"megatron-names", ARG_BOOL, &megatron_names,
         "write PREFIX_<key>_document.bin/.idx as Megatron's preprocess_data.py does "
         "(PREFIX_text_document)",
         0},
        {"append-eod", ARG_BOOL, &o.append_eod, "append the tokenizer's EOS id to each document",
         0},
        {"add-special-tokens", ARG_BOOL, &o.post,
         "apply tokenizer.json's post_processor to each document, as HF tokenizer(text) and "
         "Megatron's HuggingFaceTokenizer do (Llama 3.2: BOS before every document)",
         0},
        {"bos", ARG_BOOL, &o.bos,
         "prepend the BOS id to each document (unless the "
         "post_processor did)",
         0},
        {"specials", ARG_BOOL, &o.specials,
         "recognise special tokens written in the text (HF "
         "default); --no-specials encodes them as text",
         0},
        {"workers", ARG_INT, &o.workers, "tokenizer threads (output is identical for any N)", 0},
        {"skip-bad-records", ARG_BOOL, &o.skip_bad,
         "count and skip malformed JSON lines and "
         "records without the key",
         0},
        {"txt-docs", ARG_STR, &o.txt_docs, "file: one document per .txt file; lines: per line", 0},
        {"max-record-mb", ARG_INT, &o.max_record_mb,
         "longest input record (a JSONL line, a .txt document) in MiB; longer ones are an error",
         0},
        {"quiet", ARG_BOOL, &o.quiet, "no progress or summary", 0},
    };
    const ArgTable t = {"kda tokenize", "tokenize text corpora into a Megatron indexed dataset",
                        "Output dtype: uint16 when the vocabulary is below 65500, else int32. "
                        "One sequence per document; empty documents are skipped.",
                        specs, (int)(sizeof specs / sizeof *specs)};
    int h = args_parse_or_die(&t, argc, argv);
    if (h) return 0;
    int arrow = o.inputs.n > 0;
    for (int i = 0; i < o.inputs.n; i++)
        arrow &= kda_arrow_input(o.inputs.items[i]);
    megatron_habits_(&o, tok_type, tok_model, &json_keys, megatron_names, arrow, tok_path, prefix);
    if (arrow) {
        int rc = import_arrow_(&o, vocab_size);
        arglist_free(&o.inputs), arglist_free(&json_keys);
        return rc;
    }
    if (o.workers < 1 || o.workers > 1024) {
        fprintf(stderr, "kda: error: --workers %lld: expected 1..1024\n", (long long)o.workers);
        arglist_free(&o.inputs);
        return 2;
    }
    if (o.max_record_mb < 1 || o.max_record_mb > 65536) {
        fprintf(stderr, "kda: error: --max-record-mb %lld: expected 1..65536\n",
                (long long)o.max_record_mb);
        arglist_free(&o.inputs);
        return 2;
    }
    if (strcmp(o.txt_docs, "file") && strcmp(o.txt_docs, "lines")) {
        fprintf(stderr, "kda: error: --txt-docs %s: expected 'file' or 'lines'\n", o.txt_docs);
        arglist_free(&o.inputs);
        return 2;
    }
    g_stop = 0;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    KdaError err;
    int rc = tokenize_run(&o, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    arglist_free(&o.inputs);
    arglist_free(&json_keys);
    if (rc != 0) {
        fprintf(stderr, "kda: error: %s\n", err.msg);
        fprintf(stderr, "kda: no output written (%s.idx not created)\n", o.prefix);
        return 1;
    }
    return 0;
}

// ---- dataset-info -------------------------------------------------------------------------------

// Scans every token for ids outside [0, vocab). Returns the number of bad ids; *first_seq and
// *first_pos locate the first.
static int64_t scan_vocab(const IndexedDataset *ds, int64_t vocab, int64_t *first_seq,
                          int64_t *first_pos, int64_t *first_val) {
    int64_t bad = 0, buf[4096];
    for (int64_t s = 0; s < ds->idx.n_seq; s++) {
        int64_t len = indexed_index_length(&ds->idx, s);
        for (int64_t at = 0; at < len; at += 4096) {
            int64_t n = indexed_read_tokens(ds, s, at, buf, 4096);
            for (int64_t i = 0; i < n; i++)
                if (buf[i] < 0 || buf[i] >= vocab) {
                    if (bad++ == 0) *first_seq = s, *first_pos = at + i, *first_val = buf[i];
                }
        }
    }
    return bad;
}

int cmd_dataset_info(int argc, char **argv) {
    const char *prefix = NULL;
    int64_t vocab = 0;
    if (argc > 0 && strncmp(argv[0], "--", 2) != 0 && strcmp(argv[0], "-h") != 0)
        prefix = argv[0], argc--, argv++;
    const ArgSpec specs[] = {
        {"prefix", ARG_STR, &prefix, "dataset prefix (also accepted as the first argument)", 0},
        {"vocab-size", ARG_INT, &vocab, "also check every token id is below this (0: skip)", 0},
    };
    const ArgTable t = {"kda dataset-info", "summary and integrity check of a Megatron dataset",
                        "usage: kda dataset-info PREFIX [--vocab-size N]. Exit status 0 when "
                        "the dataset is valid, 1 when not.",
                        specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&t, argc, argv)) return 0;
    if (!prefix) {
        fprintf(stderr, "kda: error: kda dataset-info: missing PREFIX (see --help)\n");
        return 2;
    }
    IndexedDataset ds;
    KdaError err;
    printf("dataset: %s\n", prefix);
    if (indexed_open(&ds, prefix, &err) != 0) {
        printf("verdict: INVALID: %s\n", err.msg);
        return 1;
    }
    const IndexedIndex *x = &ds.idx;
    int64_t dmin = INT64_MAX, dmax = 0, smin = INT64_MAX, smax = 0;
    for (int64_t d = 0; d < x->n_docs; d++) {
        int64_t first, end, len = 0;
        indexed_index_doc_range(x, d, &first, &end);
        for (int64_t s = first; s < end; s++)
            len += indexed_index_length(x, s);
        if (len < dmin) dmin = len;
        if (len > dmax) dmax = len;
    }
    for (int64_t s = 0; s < x->n_seq; s++) {
        int64_t len = indexed_index_length(x, s);
        if (len < smin) smin = len;
        if (len > smax) smax = len;
    }
    printf("dtype:          %s (code %d, %d bytes/token)\n", indexed_dtype_name(x->dtype), x->dtype,
           x->itemsize);
    printf("documents:      %lld\n", (long long)x->n_docs);
    printf("sequences:      %lld\n", (long long)x->n_seq);
    printf("tokens:         %lld\n", (long long)x->n_tokens);
    printf("document index: %lld entries, %s\n", (long long)x->n_doc_idx,
           x->doc_base == 0 ? "standard (starts at 0)"
                            : "Primus variant (starts at 1, no leading 0)");
    if (x->n_docs > 0)
        printf("doc length:     min %lld, mean %.1f, max %lld tokens\n", (long long)dmin,
               (double)x->n_tokens / (double)x->n_docs, (long long)dmax);
    if (x->n_seq > 0)
        printf("seq length:     min %lld, max %lld tokens\n", (long long)smin, (long long)smax);
    printf("files:          .idx %zu bytes, .bin %zu bytes%s\n", ds.idx_map_size, ds.bin_map_size,
           x->has_modes ? ", with sequence modes (multimodal)" : "");
    printf("checks:         magic, version, dtype, .idx size, lengths, pointers, document index, "
           ".bin size: ok\n");
    int ok = 1;
    if (vocab > 0) {
        int64_t fs = 0, fp = 0, fv = 0;
        int64_t bad = scan_vocab(&ds, vocab, &fs, &fp, &fv);
        if (bad) {
            printf("verdict: INVALID: %lld token id(s) outside [0, %lld); first: sequence %lld, "
                   "position %lld, id %lld\n",
                   (long long)bad, (long long)vocab, (long long)fs, (long long)fp, (long long)fv);
            ok = 0;
        } else {
            printf("token ids:      all < %lld: ok\n", (long long)vocab);
        }
    }
    if (ok) printf("verdict: OK\n");
    indexed_close(&ds);
    return ok ? 0 : 1;
}
