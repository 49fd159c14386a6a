// open_model.c - model directory or checkpoint, CPU model, device and tokenizer for the
// inference commands (contract in open_model.h).
#include "cli/open_model.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"         // defines: kda_die, kda_info, kda_warn
#include "core/util.h"        // defines: path_is_dir, path_exists, path_join
#include "io/model_io.h"      // defines: kda_model_load_dir
#include "train/checkpoint.h" // defines: kda_checkpoint_resolve
#include "train/run_config.h" // defines: kda_run_config_load (a checkpoint's tokenizer)

int cli_resolve_model(const char *path, char *out, size_t cap) {
    KdaError err;
    if (!path_is_dir(path)) kda_die("%s: no such model directory", path);
    int rc = kda_checkpoint_resolve(path, out, cap, &err);
    if (rc < 0) kda_die("%s", err.msg);
    if (rc == 1) snprintf(out, cap, "%s", path);
    return rc == 0;
}

const char *cli_checkpoint_tokenizer(const char *dir, char *out, size_t cap) {
    char p[PATH_MAX];
    KdaError err;
    KdaRunConfig rc;
    kda_run_config_defaults(&rc);
    const char *found = NULL;
    if (path_exists(path_join(p, sizeof p, dir, "run_config.yaml")) &&
        !kda_run_config_load(&rc, p, &err) && rc.tokenizer)
        found = (snprintf(out, cap, "%s", rc.tokenizer), out);
    kda_run_config_free(&rc);
    return found;
}

KdaTokenizer *cli_find_tokenizer(const char *flag, const char *dir, const char *fallback,
                                 char *path_out, size_t cap) {
    char p[PATH_MAX], ck[PATH_MAX];
    const char *path = flag;
    if (!path) {
        if (path_exists(path_join(p, sizeof p, dir, "tokenizer.json")))
            path = p;
        else if (path_exists(path_join(p, sizeof p, dir, "tokenizer.model")))
            path = p;
        else if (cli_checkpoint_tokenizer(dir, ck, sizeof ck) && path_exists(ck))
            path = ck;
        else
            path = fallback;
    }
    path_out[0] = 0;
    if (!path) return NULL;
    KdaTokenizer *t;
    KdaError err;
    if (tok_load(&t, path, &err)) kda_die("%s", err.msg);
    snprintf(path_out, cap, "%s", path);
    return t;
}

void cli_open_model(CliModel *cm, const CliModelSpec *s) {
    memset(cm, 0, sizeof *cm);
    KdaError err;
    if (strcmp(s->core, "chunk") && strcmp(s->core, "recurrent"))
        kda_die("--core must be chunk or recurrent, got '%s'", s->core);
    KdaDeviceKind kind;
    if (kda_runtime_pick(s->device, &kind, &err)) kda_die("%s", err.msg);
    if (s->precision && strcmp(s->precision, "bf16") && strcmp(s->precision, "fp32"))
        kda_die("--precision must be bf16 or fp32, got '%s'", s->precision);
    cli_resolve_model(s->model, cm->dir, sizeof cm->dir);
    KdaConfig cfg;
    KdaParamTable pt;
    float *flat;
    if (kda_model_load_dir(cm->dir, &cfg, &pt, &flat, &err)) kda_die("%s", err.msg);
    cm->core = strcmp(s->core, "recurrent") ? KDA_CORE_CHUNK : KDA_CORE_RECURRENT;
    KdaRuntimeOpts o = {.device = s->device, .precision = s->precision, .core = cm->core};
    if (kda_runtime_open(&cm->rt, &cfg, &pt, flat, &o, &err)) kda_die("%s: %s", cm->dir, err.msg);
    cm->cfg = kda_runtime_config(cm->rt);
    if (kda_runtime_note(cm->rt)[0])
        kda_warn("--device auto: %s; using the CPU", kda_runtime_note(cm->rt));
    kda_info("device: %s%s%s", kda_runtime_name(cm->rt), s->log_precision ? ", precision " : "",
             s->log_precision ? kda_runtime_precision(cm->rt) : "");
    if (s->tok_source == CLI_TOK_FLAG && s->tokenizer) {
        KdaError e;
        if (tok_load(&cm->tok, s->tokenizer, &e)) kda_die("%s", e.msg);
        snprintf(cm->tok_path, sizeof cm->tok_path, "%s", s->tokenizer);
    } else if (s->tok_source == CLI_TOK_FIND) {
        cm->tok =
            cli_find_tokenizer(s->tokenizer, cm->dir, NULL, cm->tok_path, sizeof cm->tok_path);
    }
}

void cli_close_model(CliModel *cm) {
    tok_free(cm->tok);
    kda_runtime_close(cm->rt);
    memset(cm, 0, sizeof *cm);
}
