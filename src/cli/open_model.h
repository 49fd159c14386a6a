// open_model.h - how every command opens a model for inference: a model directory or a training
// checkpoint (--model), the model runtime (model/runtime.h) on the device --device picks, with
// the CPU's KDA core (--core) and the GPU's precision (--precision), and the tokenizer
// (--tokenizer, else the model's own, else the checkpoint's run config).
//
// Used by kda score, eval and generate (cli_open_model), export (cli_resolve_model,
// cli_checkpoint_tokenizer) and info (cli_resolve_model). CLI floor: every function prints one
// line and exits on error (kda_die), so callers check nothing. Single-threaded.
#ifndef KDA_CLI_OPEN_MODEL_H
#define KDA_CLI_OPEN_MODEL_H

#include <limits.h>
#include <stddef.h>

#include "model/model.h"   // defines: KdaCoreMode
#include "model/runtime.h" // defines: KdaRuntime
#include "tok/tok.h"       // defines: KdaTokenizer

// Where the tokenizer comes from.
typedef enum {
    CLI_TOK_NONE, // none is loaded (the command needs none, or finds it later: cli_find_tokenizer)
    CLI_TOK_FLAG, // only the --tokenizer flag (NULL flag: no tokenizer)
    CLI_TOK_FIND, // the flag, else cli_find_tokenizer's search (no tokenizer when nothing found)
} CliTokSource;

typedef struct {
    const char *model;     // --model: an HF model directory, or a training save dir / iter_* dir
    const char *core;      // --core: "chunk" | "recurrent"
    const char *device;    // --device: "auto" | "cpu" | "cuda"
    const char *precision; // --precision: "bf16" | "fp32" | NULL (model/runtime.h; generate: NULL)
    int log_precision;     // 1: the device log line names the precision (score, eval)
    const char *tokenizer; // --tokenizer, or NULL
    CliTokSource tok_source;
} CliModelSpec;

typedef struct {
    char dir[PATH_MAX];      // the model directory read (a checkpoint: its iter_* directory)
    KdaRuntime *rt;          // the model on --device's choice (owned)
    const KdaConfig *cfg;    // kda_runtime_config(rt)
    KdaCoreMode core;        // --core (the CPU runtime's KDA core)
    KdaTokenizer *tok;       // NULL when none was asked for or found
    char tok_path[PATH_MAX]; // where tok was loaded from ("" when tok is NULL)
} CliModel;

// Validates core, device and precision first (a bad flag fails before any loading), resolves the
// model directory, loads config + weights, opens the runtime on the device (logging "device:
// NAME" and, when auto fell back to the CPU, why) and loads the tokenizer per tok_source.
// *cm is overwritten; release with cli_close_model.
void cli_open_model(CliModel *cm, const CliModelSpec *spec);
void cli_close_model(CliModel *cm); // accepts a zeroed struct

// path -> the model directory to read, into out (cap bytes): an iter_* checkpoint as is, a save
// directory through its `latest`, any other directory as is. Returns 1 when out is a training
// checkpoint, 0 for a plain model directory. Dies when path is not a directory or `latest` is
// broken.
int cli_resolve_model(const char *path, char *out, size_t cap);

// The `tokenizer` a checkpoint's run_config.yaml names, copied into out (cap bytes); NULL when
// dir has no run_config.yaml, it does not parse, or it names none. The path is not checked.
const char *cli_checkpoint_tokenizer(const char *dir, char *out, size_t cap);

// The tokenizer of model directory dir: flag when given, else dir/tokenizer.json, else
// dir/tokenizer.model, else cli_checkpoint_tokenizer(dir) when that file exists, else fallback
// (NULL: none). Returns the loaded tokenizer (or NULL when nothing was found) and the path used
// in path_out (cap bytes; "" when none). Dies when a chosen file does not load.
KdaTokenizer *cli_find_tokenizer(const char *flag, const char *dir, const char *fallback,
                                 char *path_out, size_t cap);

#endif
