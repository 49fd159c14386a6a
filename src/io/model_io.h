// model_io.h - load and save an HF model directory for FLA's KDAForCausalLM (data-formats.md §5):
// config.json + model.safetensors (or a sharded index), tensor names and shapes of
// kda-model.md §3.
//
// Load rules: every parameter of the config's table must be present with exactly its shape;
// any other tensor is an error; storage dtype F32, BF16 or F16 (mixed dtypes allowed, e.g.
// F32 A_log/dt_bias next to BF16 matrices), converted to fp32. Tied models may omit
// lm_head.weight or carry a copy that must equal the embedding bit for bit after conversion
// to fp32. Every error is one line naming the tensor and the file.
//
// Save writes config.json (torch_dtype = the stored dtype) and one model.safetensors (no
// lm_head.weight when tied, what HF save_pretrained does). A new directory appears atomically
// (written as DIR.tmp.<pid>, then renamed); into an existing directory each file is replaced
// atomically, weights first (other files there, e.g. the tokenizer, are kept).
#ifndef KDA_MODEL_IO_H
#define KDA_MODEL_IO_H

#include "core/error.h"   // defines: KdaError
#include "model/config.h" // defines: KdaConfig
#include "model/params.h" // defines: KdaParamTable

typedef enum { KDA_DTYPE_F32, KDA_DTYPE_BF16 } KdaSaveDtype;

// Reads dir/config.json, builds *t and allocates *flat ([t->total_numel] fp32, caller frees
// with free()) holding the weights. On error returns -1 and leaves *cfg, *t, *flat untouched.
int kda_model_load_dir(const char *dir, KdaConfig *cfg, KdaParamTable *t, float **flat,
                       KdaError *err);
// Reads the weights of dir (model.safetensors or a sharded index) into flat
// ([t->total_numel] fp32, laid out by t) under the rules above. On error flat may be partly
// written.
int kda_model_read_weights(const char *dir, const KdaConfig *cfg, const KdaParamTable *t,
                           float *flat, KdaError *err);
// Writes dir/config.json and dir/model.safetensors from flat ([t->total_numel] fp32).
int kda_model_save_dir(const char *dir, const KdaConfig *cfg, const KdaParamTable *t,
                       const float *flat, KdaSaveDtype dtype, KdaError *err);

#endif
