// cmd_generate.c - `kda generate`: sample a continuation of a prompt from a model.
//
// The prompt (text through the tokenizer, or ids) is run through the chunked forward once
// (prefill), then every new token costs one recurrent decode step (O(1) in the position), on the
// CPU (fp32) or the GPU (--device cuda, or auto with a GPU: bf16, the state on the device).
// --decode refeed instead re-runs the forward on the whole sequence for every new token (O(T^2);
// the GPU's path before its decode step, kept to measure against).
// Tokens are written to stdout as they are produced (decoded with the tokenizer; the bytes of
// a character split across tokens are held back until complete) or, without a tokenizer, as
// ids separated by spaces. Timing goes to stderr at the end.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <limits.h>

#include "cli/commands.h"
#include "cli/open_model.h" // defines: CliModel, cli_open_model
#include "core/args.h"      // defines: ArgSpec, ArgTable, args_parse_or_die
#include "core/log.h"       // defines: kda_die
#include "eval/generate.h"  // defines: kda_generate, kda_generate_refeed, KdaGenOpts
#include "tok/tok.h"        // defines: KdaTokenizer, tok_*

typedef struct {
    const KdaTokenizer *tok; // NULL: print ids
    KdaUtf8Stream utf8;
    const KdaGenOpts *opts;
    int64_t n_printed, n_undecodable;
} Printer;

static int print_token_(int32_t id, void *user) {
    Printer *p = user;
    for (int i = 0; i < p->opts->n_eos && !p->opts->ignore_eos; i++)
        if (p->opts->eos_ids[i] == id) return 0; // the stopping EOS is not printed
    if (!p->tok) {
        printf("%s%d", p->n_printed ? " " : "", (int)id);
    } else {
        size_t len;
        const char *b = tok_token_bytes(p->tok, id, &len);
        if (b)
            kda_utf8_stream_write(&p->utf8, b, len, stdout);
        else
            p->n_undecodable++;
    }
    p->n_printed++;
    fflush(stdout);
    return 0;
}

// "[1, 2, 3]", "1,2,3" or "1 2 3" -> ids (kda_malloc'ed); dies with a message on bad input.
static int32_t *parse_ids_(const char *s, int64_t *n) {
    int64_t cap = 16;
    int32_t *ids = kda_malloc((size_t)cap * sizeof(int32_t));
    *n = 0;
    const char *p = s;
    int commas = 0; // separators since the last id: one comma at most, none before the first
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',' || *p == '[' ||
               *p == ']') {
            commas += *p == ',';
            if (commas > 1 || (*p == ',' && *n == 0))
                kda_die("--prompt-ids: an empty id between commas in \"%.40s\"", s);
            p++;
        }
        if (!*p) {
            if (commas) kda_die("--prompt-ids: an empty id after the last comma in \"%.40s\"", s);
            break;
        }
        commas = 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX)
            kda_die("--prompt-ids: expected non-negative integers, found \"%.20s\"", p);
        if (*n == cap) ids = kda_realloc(ids, (size_t)(cap *= 2) * sizeof(int32_t));
        ids[(*n)++] = (int32_t)v;
        p = end;
    }
    return ids;
}

static char *read_stdin_(size_t *n) {
    size_t cap = 4096;
    char *buf = kda_malloc(cap);
    *n = 0;
    size_t k;
    while ((k = fread(buf + *n, 1, cap - *n - 1, stdin)) > 0) {
        *n += k;
        if (cap - *n - 1 == 0) buf = kda_realloc(buf, cap *= 2);
    }
    if (ferror(stdin)) kda_die("reading the prompt from stdin failed");
    buf[*n] = 0;
    return buf;
}

// The flags of `kda generate`.
typedef struct {
    const char *model, *prompt, *prompt_ids, *tokenizer, *core, *device, *decode;
    int64_t max_new, top_k, seed;
    double temperature, top_p;
    int bos, post, ignore_eos, echo;
} GenArgs;

// Parses and validates the flags (dies on a bad one, before anything is loaded). Returns 1 when
// --help was printed.
static int parse_(GenArgs *a, int argc, char **argv) {
    *a = (GenArgs){.core = "chunk",
                   .device = "auto",
                   .decode = "recurrent",
                   .max_new = 64,
                   .temperature = 1.0,
                   .top_p = 1.0,
                   .post = 1,
                   .echo = 1};
    ArgSpec specs[] = {
        {"model", ARG_STR, &a->model, "HF model directory, or a training save/iter_* directory", 1},
        {"prompt", ARG_STR, &a->prompt, "prompt text ('-' = read stdin); needs a tokenizer", 0},
        {"prompt-ids", ARG_STR, &a->prompt_ids, "prompt as token ids: \"[1, 2, 3]\" or \"1,2,3\"",
         0},
        {"tokenizer", ARG_STR, &a->tokenizer,
         "tokenizer.json / tokenizer.model (default: the "
         "model directory's, if any; none: print ids)",
         0},
        {"add-special-tokens", ARG_BOOL, &a->post,
         "encode a text prompt as HF tokenizer(prompt) does (post_processor: Llama 3.2's BOS)", 0},
        {"bos", ARG_BOOL, &a->bos,
         "prepend BOS to a text prompt unless already there (tokenizer's, else config's)", 0},
        {"max-new-tokens", ARG_INT, &a->max_new, "tokens to generate at most", 0},
        {"temperature", ARG_FLOAT, &a->temperature, "softmax temperature; 0 = greedy (argmax)", 0},
        {"top-k", ARG_INT, &a->top_k, "keep the k most likely tokens (0 = off)", 0},
        {"top-p", ARG_FLOAT, &a->top_p, "nucleus: keep the most likely tokens of mass p (1 = off)",
         0},
        {"seed", ARG_INT, &a->seed, "sampling RNG seed", 0},
        {"ignore-eos", ARG_BOOL, &a->ignore_eos, "do not stop at the EOS token", 0},
        {"echo", ARG_BOOL, &a->echo, "print the prompt before the continuation", 0},
        {"core", ARG_STR, &a->core, "KDA core of the prefill: chunk | recurrent (CPU)", 0},
        {"device", ARG_STR, &a->device,
         "auto | cpu | cuda (GPU: bf16; auto: the GPU when the build has CUDA and one is visible)",
         0},
        {"decode", ARG_STR, &a->decode,
         "recurrent (one O(1) step per token) | refeed (the whole-sequence forward per token, "
         "O(T^2): to measure against)",
         0},
    };
    ArgTable table = {"kda generate", "sample a continuation of a prompt (CPU fp32 or GPU bf16)",
                      "The prompt is prefilled with the chunked forward; each new token is one "
                      "recurrent step (constant cost per token), on the CPU or the GPU. Sampling: "
                      "temperature, then "
                      "top-k, then top-p. Output streams to stdout; timing to stderr. "
                      "Without --prompt/--prompt-ids the prompt text is read from stdin.",
                      specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&table, argc, argv)) return 1;
    if (strcmp(a->core, "chunk") && strcmp(a->core, "recurrent"))
        kda_die("--core must be chunk or recurrent, got '%s'", a->core);
    if (a->max_new < 0) kda_die("--max-new-tokens must be >= 0, got %lld", (long long)a->max_new);
    if (a->top_p <= 0.0 || a->top_p > 1.0) kda_die("--top-p must be in (0, 1], got %g", a->top_p);
    if (a->temperature < 0.0) kda_die("--temperature must be >= 0, got %g", a->temperature);
    if (a->prompt && a->prompt_ids) kda_die("give --prompt or --prompt-ids, not both");
    if (a->top_k < 0) kda_die("--top-k must be >= 0 (0 = off), got %lld", (long long)a->top_k);
    if (strcmp(a->decode, "recurrent") && strcmp(a->decode, "refeed"))
        kda_die("--decode must be recurrent or refeed, got '%s'", a->decode);
    if (a->prompt_ids) free(parse_ids_(a->prompt_ids, &(int64_t){0})); // bad ids fail here
    return 0;
}

// The prompt as token ids (*ids, caller frees) and, for a text prompt, its text (*text, caller
// frees; NULL for --prompt-ids). Dies on an empty prompt or an id outside the vocabulary.
static void prompt_(const GenArgs *a, const CliModel *cm, TokIds *ids, char **text,
                    size_t *text_n) {
    const KdaConfig *cfg = cm->cfg;
    KdaError err;
    *ids = (TokIds){0};
    *text = NULL, *text_n = 0;
    if (a->prompt_ids) {
        int64_t n;
        ids->ids = parse_ids_(a->prompt_ids, &n);
        ids->n = ids->cap = (size_t)n;
    } else {
        if (a->prompt && strcmp(a->prompt, "-"))
            *text = strdup(a->prompt), *text_n = strlen(a->prompt);
        else if (!a->prompt && isatty(0))
            kda_die("no prompt: give --prompt, --prompt-ids or stdin");
        else
            *text = read_stdin_(text_n);
        if (!cm->tok)
            kda_die("a text prompt needs --tokenizer (%s has no tokenizer file)", cm->dir);
        if (tok_encode(cm->tok, *text, *text_n, a->post ? TOK_POST : 0, ids, &err))
            kda_die("%s", err.msg);
        int32_t b = tok_bos_id(cm->tok);
        if (a->bos && b < 0 && cfg->has_bos_token_id) b = (int32_t)cfg->bos_token_id;
        if (a->bos && b >= 0 && !(ids->n && ids->ids[0] == b)) {
            ids->ids = kda_realloc(ids->ids, (ids->n + 1) * sizeof(int32_t));
            memmove(ids->ids + 1, ids->ids, ids->n * sizeof(int32_t));
            ids->ids[0] = b, ids->n++, ids->cap = ids->n;
        }
    }
    if (ids->n == 0) kda_die("the prompt is empty (no token ids; try --bos)");
    for (size_t i = 0; i < ids->n; i++)
        if (ids->ids[i] >= cfg->vocab_size)
            kda_die("prompt token %zu: id %d is outside the model's vocabulary [0, %lld)", i,
                    (int)ids->ids[i], (long long)cfg->vocab_size);
}

// --echo: the prompt as given (text), or its ids, or its tokens' bytes (specials skipped).
static void echo_(const TokIds *ids, const char *text, size_t text_n, Printer *pr) {
    const KdaTokenizer *tok = pr->tok;
    if (text)
        fwrite(text, 1, text_n, stdout);
    else if (!tok)
        for (size_t i = 0; i < ids->n; i++)
            printf("%s%d", i ? " " : "", ids->ids[i]);
    else
        for (size_t i = 0; i < ids->n; i++) {
            size_t len;
            const char *b = tok_token_bytes(tok, ids->ids[i], &len);
            if (b && !tok_is_special(tok, ids->ids[i]))
                kda_utf8_stream_write(&pr->utf8, b, len, stdout);
        }
    if (!tok && ids->n) pr->n_printed = 1; // separate the first new id by a space
    fflush(stdout);
}

// Generates and streams the continuation: prefill + recurrent decode, or --decode refeed.
static void run_(CliModel *cm, const char *decode, const TokIds *ids, const KdaGenOpts *go,
                 Printer *pr, KdaGenStats *st) {
    KdaError err;
    int (*gen)(KdaRuntime *, const int32_t *, int64_t, const KdaGenOpts *, int32_t *, KdaGenTokenFn,
               void *, KdaGenStats *, KdaError *) =
        strcmp(decode, "refeed") ? kda_generate : kda_generate_refeed;
    if (gen(cm->rt, ids->ids, (int64_t)ids->n, go, NULL, print_token_, pr, st, &err))
        kda_die("%s: %s", cm->dir, err.msg);
    if (pr->tok) kda_utf8_stream_flush(&pr->utf8, stdout);
    printf("\n");
    if (fflush(stdout)) kda_die("writing stdout failed");
}

// Timing (and undecodable ids) to stderr.
static void report_(const KdaGenStats *st, const Printer *pr) {
    fprintf(stderr,
            "kda generate: prompt %lld tokens, prefill %.3f s (%.1f tok/s); %lld new tokens%s, "
            "decode %.3f s (%.1f tok/s)\n",
            (long long)st->n_prompt, st->prefill_s,
            st->prefill_s > 0 ? (double)st->n_prompt / st->prefill_s : 0.0, (long long)st->n_new,
            st->stopped_eos ? " (stopped at EOS)" : "", st->decode_s,
            st->decode_s > 0 ? (double)st->n_steps / st->decode_s : 0.0);
    if (pr->n_undecodable)
        fprintf(stderr,
                "kda generate: warning: %lld generated ids have no token in the "
                "tokenizer (printed nothing)\n",
                (long long)pr->n_undecodable);
}

int cmd_generate(int argc, char **argv) {
    GenArgs a;
    if (parse_(&a, argc, argv)) return 0;
    CliModel cm;
    CliModelSpec spec = {.model = a.model,
                         .core = a.core,
                         .device = a.device,
                         .tokenizer = a.tokenizer,
                         .tok_source = CLI_TOK_FIND};
    cli_open_model(&cm, &spec);
    TokIds ids;
    char *text;
    size_t text_n;
    prompt_(&a, &cm, &ids, &text, &text_n);

    const KdaConfig *cfg = cm.cfg;
    int32_t eos[2];
    int n_eos = 0;
    if (cm.tok && tok_eos_id(cm.tok) >= 0) eos[n_eos++] = tok_eos_id(cm.tok);
    if (cfg->has_eos_token_id && (n_eos == 0 || eos[0] != cfg->eos_token_id))
        eos[n_eos++] = (int32_t)cfg->eos_token_id;
    KdaGenOpts go = {
        {a.temperature, a.top_k, a.top_p}, a.max_new, (uint64_t)a.seed, eos, n_eos, a.ignore_eos};
    Printer pr = {cm.tok, {{0}, 0}, &go, 0, 0};
    if (a.echo) echo_(&ids, text, text_n, &pr);
    KdaGenStats st;
    run_(&cm, a.decode, &ids, &go, &pr, &st);
    report_(&st, &pr);
    free(text);
    tok_ids_free(&ids);
    cli_close_model(&cm);
    return 0;
}
