// cmd_export.c - `kda export --checkpoint DIR --output HF_DIR [--dtype bf16|fp32]
// [--tokenizer tokenizer.json]`: a training checkpoint -> an HF model directory for FLA's
// KDAForCausalLM (data-formats.md §5.1): config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json, special_tokens_map.json (§7.7), generation_config.json.
//
// Safety (docs/reliability.md): everything is written into OUTPUT.tmp.PID and published as a
// whole at the end. OUTPUT must be new or an empty directory; a non-empty one is replaced only
// with --overwrite (the old directory is swapped out and removed, so no stale files remain);
// a training checkpoint or save directory is never an output, --overwrite or not.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/open_model.h" // defines: cli_checkpoint_tokenizer
#include "core/args.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "core/util.h"
#include "io/model_io.h"
#include "tok/tok.h"
#include "train/checkpoint.h"

static void copy_file(const char *src, const char *dst) {
    KdaError err;
    size_t n;
    char *s = read_file(src, &n, &err);
    if (!s) kda_die("%s", err.msg);
    if (write_file_atomic(dst, s, n, &err)) kda_die("%s", err.msg);
    free(s);
}

// Writes JSON text atomically or dies.
static void write_text(const char *dir, const char *name, char *text, size_t n) {
    char p[PATH_MAX];
    KdaError err;
    if (write_file_atomic(path_join(p, sizeof p, dir, name), text, n, &err)) kda_die("%s", err.msg);
    free(text);
}

static void put_token(FILE *f, const KdaTokenizer *t, int32_t id) {
    size_t len = 0;
    const char *s = id >= 0 ? tok_token_bytes(t, id, &len) : NULL;
    if (s)
        json_write_string(f, s, len);
    else
        fputs("null", f);
}

// tokenizer_config.json from the tokenizer itself (when none lies next to tokenizer.json).
static void gen_tokenizer_config(const char *out, const KdaTokenizer *t) {
    char *buf;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    fputs("{\n  \"added_tokens_decoder\": {", f);
    int first = 1;
    for (int32_t id = 0; id < tok_vocab_size(t); id++) {
        if (!tok_is_special(t, id)) continue;
        fprintf(f, "%s\n    \"%d\": {\"content\": ", first ? "" : ",", id);
        put_token(f, t, id);
        fputs(", \"lstrip\": false, \"normalized\": false, \"rstrip\": false, "
              "\"single_word\": false, \"special\": true}",
              f);
        first = 0;
    }
    fputs("\n  },\n  \"bos_token\": ", f);
    put_token(f, t, tok_bos_id(t));
    fputs(",\n  \"eos_token\": ", f);
    put_token(f, t, tok_eos_id(t));
    fputs(",\n  \"clean_up_tokenization_spaces\": true,\n"
          "  \"model_input_names\": [\"input_ids\", \"attention_mask\"],\n"
          "  \"model_max_length\": 131072,\n"
          "  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n",
          f);
    fclose(f);
    write_text(out, "tokenizer_config.json", buf, n);
}

static void export_tokenizer(const char *out, const char *tok_path) {
    KdaTokenizer *t;
    KdaError err;
    char p[PATH_MAX], dir[PATH_MAX], q[PATH_MAX];
    if (tok_load(&t, tok_path, &err)) kda_die("%s", err.msg);
    copy_file(tok_path, path_join(p, sizeof p, out, "tokenizer.json"));
    snprintf(dir, sizeof dir, "%s", tok_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    path_join(q, sizeof q, dir, "tokenizer_config.json");
    if (path_exists(q))
        copy_file(q, path_join(p, sizeof p, out, "tokenizer_config.json"));
    else
        gen_tokenizer_config(out, t);
    // license files travel with the tokenizer (e.g. the Llama 3 license)
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, "LICENSE"))
            copy_file(path_join(q, sizeof q, dir, e->d_name),
                      path_join(p, sizeof p, out, e->d_name));
    if (d) closedir(d);
    char *buf;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    fputs("{\n  \"bos_token\": ", f);
    put_token(f, t, tok_bos_id(t));
    fputs(",\n  \"eos_token\": ", f);
    put_token(f, t, tok_eos_id(t));
    fputs("\n}\n", f);
    fclose(f);
    write_text(out, "special_tokens_map.json", buf, n);
    tok_free(t);
}

// generation_config.json: the special ids generate() needs, taken from the tokenizer that is
// exported with the model (its BOS/EOS), else from config.json; greedy by default as HF's own
// default is. No transformers_version: kda.c is not transformers, and HF fills it in on load.
static void export_generation_config(const char *out, const KdaConfig *c, const char *tok_path) {
    int64_t bos = c->has_bos_token_id ? c->bos_token_id : -1;
    int64_t eos = c->has_eos_token_id ? c->eos_token_id : -1;
    KdaTokenizer *t = NULL;
    KdaError err;
    if (tok_path && tok_load(&t, tok_path, &err) == 0) {
        if (tok_bos_id(t) >= 0) bos = tok_bos_id(t);
        if (tok_eos_id(t) >= 0) eos = tok_eos_id(t);
        tok_free(t);
    }
    char *buf;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    fputs("{\n  \"_from_model_config\": true,\n", f);
    if (bos >= 0) fprintf(f, "  \"bos_token_id\": %lld,\n", (long long)bos);
    if (eos >= 0) fprintf(f, "  \"eos_token_id\": %lld,\n", (long long)eos);
    if (c->has_pad_token_id) fprintf(f, "  \"pad_token_id\": %lld,\n", (long long)c->pad_token_id);
    fputs("  \"do_sample\": false\n}\n", f);
    fclose(f);
    write_text(out, "generation_config.json", buf, n);
}

// Is dir a training checkpoint or a save directory (never an export target)?
static int is_training_dir(const char *dir) {
    const char *marks[] = {"trainer_state.json", "optimizer.safetensors", "latest"};
    char p[PATH_MAX];
    for (int i = 0; i < 3; i++)
        if (path_exists(path_join(p, sizeof p, dir, marks[i]))) return 1;
    return 0;
}

// Dies unless output may be written (see the file head); runs before any work.
static void check_output(const char *output, int overwrite) {
    if (!path_exists(output)) return;
    if (!path_is_dir(output)) kda_die("--output %s: exists and is not a directory", output);
    if (is_training_dir(output))
        kda_die("--output %s is a training checkpoint or save directory; export to a new "
                "directory (its fp32 weights and optimizer state would be replaced)",
                output);
    if (dir_count_entries(output) > 0 && !overwrite)
        kda_die("--output %s is not empty; give a new directory, or --overwrite to replace it "
                "as a whole",
                output);
}

// Publishes the finished temp dir as output: a rename when output is new or empty, else an
// exchange with the old directory (which is then removed); dies on failure.
static void publish(const char *tmp, const char *output) {
    if (path_is_dir(output) && dir_count_entries(output) == 0) rmdir(output);
    if (!path_exists(output)) {
        if (rename(tmp, output))
            kda_die("%s: cannot rename from %s: %s", output, tmp, strerror(errno));
    } else if (rename_exchange(tmp, output) == 0) {
        rmdir_flat(tmp); // now the old directory
    } else {
        char old[PATH_MAX];
        snprintf(old, sizeof old, "%s.old.%ld", output, (long)getpid());
        if (rename(output, old) || rename(tmp, output))
            kda_die("%s: cannot replace with %s: %s", output, tmp, strerror(errno));
        rmdir_flat(old);
    }
    fsync_dir_of(output);
}

int cmd_export(int argc, char **argv) {
    const char *ckpt = NULL, *output = NULL, *dtype = "bf16", *tokenizer = NULL;
    int overwrite = 0;
    ArgSpec specs[] = {
        {"checkpoint", ARG_STR, &ckpt, "checkpoint iter_* dir, or a save dir (follows `latest`)",
         1},
        {"output", ARG_STR, &output, "HF model directory to write", 1},
        {"dtype", ARG_STR, &dtype, "weights dtype: bf16 or fp32", 0},
        {"tokenizer", ARG_STR, &tokenizer,
         "tokenizer.json to include (default: the run config's `tokenizer`, if any)", 0},
        {"overwrite", ARG_BOOL, &overwrite,
         "replace a non-empty --output directory as a whole (never a checkpoint)", 0},
    };
    ArgTable t = {"kda export", "export a training checkpoint as an HF model directory (FLA names)",
                  "Writes config.json, model.safetensors, generation_config.json and, with a "
                  "tokenizer, tokenizer.json, tokenizer_config.json (copied from next to "
                  "tokenizer.json when present), special_tokens_map.json and license files.",
                  specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&t, argc, argv)) return 0;
    KdaSaveDtype dt;
    if (!strcmp(dtype, "bf16") || !strcmp(dtype, "bfloat16"))
        dt = KDA_DTYPE_BF16;
    else if (!strcmp(dtype, "fp32") || !strcmp(dtype, "float32"))
        dt = KDA_DTYPE_F32;
    else
        kda_die("--dtype: expected bf16 or fp32, got \"%s\"", dtype);
    check_output(output, overwrite);
    KdaError err;
    char dir[PATH_MAX], p[PATH_MAX], tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", output, (long)getpid());
    rmdir_flat(tmp); // a leftover of an earlier process with our pid
    int r = kda_checkpoint_resolve(ckpt, dir, sizeof dir, &err);
    if (r < 0) kda_die("%s", err.msg);
    if (r == 1) kda_die("%s: no `latest` checkpoint and no trainer_state.json", ckpt);
    KdaConfig cfg;
    KdaParamTable tab;
    float *flat;
    if (kda_model_load_dir(dir, &cfg, &tab, &flat, &err)) kda_die("%s", err.msg);
    if (!tokenizer) tokenizer = cli_checkpoint_tokenizer(dir, p, sizeof p);
    if (kda_model_save_dir(tmp, &cfg, &tab, flat, dt, &err)) kda_die("%s", err.msg);
    export_generation_config(tmp, &cfg, tokenizer);
    if (tokenizer)
        export_tokenizer(tmp, tokenizer);
    else
        kda_warn("no tokenizer given: %s has no tokenizer files", output);
    publish(tmp, output);
    kda_info("exported %s -> %s (%s, %lld parameters)", dir, output,
             dt == KDA_DTYPE_BF16 ? "bf16" : "fp32", (long long)tab.total_numel);
    kda_params_free(&tab);
    free(flat);
    return 0;
}
