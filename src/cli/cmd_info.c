// cmd_info.c - `kda info`: config summary, derived dims, parameter counts and breakdown,
// FLOPs per token and the training memory of kda.c's own buffers on the CPU and one GPU.
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/open_model.h" // defines: cli_resolve_model
#include "core/args.h"      // defines: ArgSpec, ArgTable, args_parse_or_die
#include "core/util.h"      // defines: path_is_dir, path_join, path_exists
#include "io/safetensors.h" // defines: StModel, st_model_open
#include "model/config.h"   // defines: KdaConfig, kda_config_load
#include "model/params.h"   // defines: KdaParamTable, kda_params_build, FLOP counts
#include "model/runtime.h"  // defines: kda_runtime_memory_plan, KdaMemoryPlan

#define GIB (1024.0 * 1024.0 * 1024.0)

// 303549280 -> "303,549,280" (static ring of buffers, for printf arguments)
static const char *commas(int64_t x) {
    static char ring[8][32];
    static int k;
    char *out = ring[k++ & 7], tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)(x < 0 ? -x : x)), j = 0;
    if (x < 0) out[j++] = '-';
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) out[j++] = ',';
        out[j++] = tmp[i];
    }
    out[j] = 0;
    return out;
}

// ---------------------------------------------------------------------------------------------
// Parameter breakdown, summed from the table rows (so it checks the table against kda-model.md §4)

typedef struct {
    int64_t embed, head, final_norm, attn, mlp, block_norms;
    int64_t q, k, v, conv, f, b, a_dt, g, o_norm, o;
} Breakdown;

static int has(const char *s, const char *sub) {
    return strstr(s, sub) != NULL;
}

static void classify(Breakdown *bd, const KdaParamInfo *r) {
    const char *n = r->name;
    int64_t x = r->numel;
    if (r->layer < 0) {
        if (has(n, "embeddings"))
            bd->embed += x;
        else if (has(n, "lm_head"))
            bd->head += x;
        else
            bd->final_norm += x;
        return;
    }
    if (has(n, ".mlp."))
        bd->mlp += x;
    else if (!has(n, ".attn."))
        bd->block_norms += x;
    else {
        bd->attn += x;
        if (has(n, "q_proj"))
            bd->q += x;
        else if (has(n, "k_proj"))
            bd->k += x;
        else if (has(n, "v_proj"))
            bd->v += x;
        else if (has(n, "conv1d"))
            bd->conv += x;
        else if (has(n, "f_proj"))
            bd->f += x;
        else if (has(n, "b_proj"))
            bd->b += x;
        else if (has(n, "A_log") || has(n, "dt_bias"))
            bd->a_dt += x;
        else if (has(n, "g_proj"))
            bd->g += x;
        else if (has(n, "o_norm"))
            bd->o_norm += x;
        else if (has(n, "o_proj"))
            bd->o += x;
    }
}

static void row(const char *label, int64_t x) {
    printf("  %-30s %15s\n", label, commas(x));
}

static void row_x(const char *label, int64_t total, int64_t L) {
    printf("  %-30s %15s   x %lld = %s\n", label, commas(total / L), (long long)L, commas(total));
}

static void print_params(const KdaConfig *c, const KdaParamTable *t) {
    Breakdown bd = {0};
    for (int i = 0; i < t->n; i++)
        classify(&bd, &t->rows[i]);
    const int64_t L = c->num_hidden_layers, emb = c->vocab_size * c->hidden_size;
    const int64_t tied = t->total_numel - bd.head, untied = tied + emb;
    // The plain number too, so scripts can grep it (kda_300M.json: 303549280).
    printf("parameters: %lld\n", (long long)t->total_numel);
    row(c->tie_word_embeddings ? "total (tied, unique)" : "total (untied)", t->total_numel);
    row("total if tied", tied);
    row("total if untied", untied);
    row("non-embedding", t->total_numel - bd.embed - bd.head);
    row("matmul weights (for FLOPs)", kda_params_matmul_count(c));
    printf("  table: %d tensors, %s floats (config formula: %s)\n", t->n, commas(t->total_numel),
           commas(kda_params_count(c)));
    printf("breakdown\n");
    char label[64];
    snprintf(label, sizeof label, "embedding [%lld, %lld]", (long long)c->vocab_size,
             (long long)c->hidden_size);
    row(label, bd.embed);
    row_x("attention per layer", bd.attn, L);
    printf("    q/k/v proj %s, conv %s, f_proj %s, b_proj %s, A_log+dt_bias %s,\n",
           commas((bd.q + bd.k + bd.v) / L), commas(bd.conv / L), commas(bd.f / L),
           commas(bd.b / L), commas(bd.a_dt / L));
    printf("    g_proj %s, o_norm %s, o_proj %s\n", commas(bd.g / L), commas(bd.o_norm / L),
           commas(bd.o / L));
    row_x("MLP per layer", bd.mlp, L);
    row_x("block norms per layer", bd.block_norms, L);
    row("final norm", bd.final_norm);
    if (c->tie_word_embeddings)
        printf("  %-30s %15s   (tied to the embedding)\n", "lm_head", "0");
    else
        row("lm_head", bd.head);
}

// ---------------------------------------------------------------------------------------------
// FLOPs and memory

static void print_flops(const KdaConfig *c, int64_t T) {
    double model = kda_model_flops_per_token(c, T), mega = kda_megatron_flops_per_token(c, T);
    double gemm = 6.0 * (double)kda_params_matmul_count(c);
    printf("FLOPs per token (training = fwd + bwd, seq %lld)\n", (long long)T);
    printf("  model   %.4e  (GEMMs %.4e, KDA core + conv %.3e)\n", model, gemm, model - gemm);
    printf("  Megatron formula %.4e  (%.2fx the model count; what Primus logs)\n", mega,
           mega / model);
}

// One cell of the memory table: "12.34 GiB", "56.7 MiB" or "-".
static const char *mem_cell(char *buf, size_t cap, double bytes, int ok) {
    if (!ok)
        snprintf(buf, cap, "-");
    else if (bytes < 0.1 * GIB)
        snprintf(buf, cap, "%.1f MiB", bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, cap, "%.2f GiB", bytes / GIB);
    return buf;
}

// kda.c's own training memory (model/runtime.h kda_runtime_memory_plan: the buffers the CPU
// runtime and the GPU runtime allocate, counted by their layout code) on the CPU, the GPU and the
// GPU with per-block recompute (recompute_granularity: full), for micro-batches of B x T with
// n_micro of them per step.
static void print_memory(const KdaConfig *c, int64_t B, int64_t T, int64_t n_micro) {
    KdaMemoryPlan p[3];
    KdaError err[3];
    int ok[3];
    ok[0] = kda_runtime_memory_plan(KDA_DEVICE_CPU, c, B, T, (int)n_micro, 0, &p[0], &err[0]) == 0;
    ok[1] = kda_runtime_memory_plan(KDA_DEVICE_CUDA, c, B, T, (int)n_micro, 0, &p[1], &err[1]) == 0;
    ok[2] = kda_runtime_memory_plan(KDA_DEVICE_CUDA, c, B, T, (int)n_micro, 1, &p[2], &err[2]) == 0;
    printf("training memory of kda.c's buffers (micro-batch %lld x seq %lld = %s tokens, %lld "
           "micro-batch%s per step)\n",
           (long long)B, (long long)T, commas(B * T), (long long)n_micro, n_micro > 1 ? "es" : "");
    printf("  %-40s %12s %12s %14s\n", "", "CPU", "GPU", "GPU recompute");
    const char *labels[] = {"fp32 parameters",
                            "gradients (CPU: + a micro-batch's)",
                            "AdamW m and v",
                            "bf16 working copy",
                            "activations (+ GPU kept core states)",
                            "ids/targets; GPU scalars + cuBLASLt ws",
                            "total"};
    for (int r = 0; r < 7; r++) {
        char a[32], b[32], d[32];
        double v[3];
        for (int k = 0; k < 3; k++) {
            const KdaMemoryPlan *q = &p[k];
            double x[7] = {q->params, q->grads, q->moments, q->copy, q->acts, q->other, q->total};
            v[k] = x[r];
        }
        printf("  %-40s %12s %12s %14s\n", labels[r], mem_cell(a, sizeof a, v[0], ok[0] && r != 3),
               mem_cell(b, sizeof b, v[1], ok[1]), mem_cell(d, sizeof d, v[2], ok[2]));
    }
    if (!ok[1]) printf("  GPU: %s\n", err[1].msg);
    if (ok[1])
        printf("  GPU: the H200's shared memory per block picks the KDA core's chunk; the CUDA "
               "context (~0.5 GiB) is not counted%s\n",
               p[1].total / GIB > 139.0 ? "; more than one H200's ~139 GiB" : "");
}

// ---------------------------------------------------------------------------------------------
// Summary

static void print_config(const KdaConfig *c, const char *src) {
    printf("model %s\n", src);
    printf("config: D %lld, L %lld, H %lld, HV %lld%s, K %lld, V %lld, I %lld%s, n_vocab %lld, "
           "W %lld%s, %s\n",
           (long long)c->hidden_size, (long long)c->num_hidden_layers, (long long)c->num_heads,
           (long long)c->num_v_heads, c->num_v_heads > c->num_heads ? " (GVA)" : "",
           (long long)c->head_dim, (long long)c->head_v_dim, (long long)c->intermediate_size,
           c->intermediate_size_raw ? "" : " (derived)", (long long)c->vocab_size,
           (long long)c->conv_size, c->use_short_conv ? "" : " (short conv off)",
           c->tie_word_embeddings ? "tied head" : "untied head");
    printf("        norm_eps %g, initializer_range %g, attn_mode %s, hidden_act %s, beta %s, "
           "gate %s%s\n",
           c->norm_eps, c->initializer_range, c->attn_mode, c->hidden_act,
           c->allow_neg_eigval ? "2*sigmoid (allow_neg_eigval)" : "sigmoid",
           c->has_lower_bound ? "bounded" : "-exp(A)*softplus", c->safe_gate ? " (safe_gate)" : "");
    if (c->has_lower_bound) printf("        lower_bound %g\n", c->lower_bound);
    printf("derived: key_dim H*K %lld, value_dim HV*V %lld, gate_dim HV*K %lld, conv channels "
           "%lld, max_position_embeddings %lld\n",
           (long long)c->key_dim, (long long)c->value_dim, (long long)c->gate_dim,
           (long long)(2 * c->key_dim + c->value_dim), (long long)c->max_position_embeddings);
}

static void print_weights(const char *path) {
    if (!path_is_dir(path)) return;
    char f1[4096], f2[4096];
    path_join(f1, sizeof f1, path, "model.safetensors");
    path_join(f2, sizeof f2, path, "model.safetensors.index.json");
    if (!path_exists(f1) && !path_exists(f2)) {
        printf("weights: none in %s\n", path);
        return;
    }
    StModel m;
    KdaError err;
    if (st_model_open(&m, path, &err) < 0) {
        printf("weights: unreadable: %s\n", err.msg);
        return;
    }
    int64_t count[ST_N_DTYPES] = {0};
    for (int64_t i = 0; i < m.n_entries; i++)
        count[m.entries[i].tensor->dtype]++;
    printf("weights: %lld tensors in %d file%s:", (long long)m.n_entries, m.n_files,
           m.n_files > 1 ? "s" : "");
    for (int d = 0; d < ST_N_DTYPES; d++)
        if (count[d]) printf(" %s x %lld", st_dtype_name((StDtype)d), (long long)count[d]);
    printf("\n");
    st_model_close(&m);
}

int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    int64_t micro_batch = 32, seq_len = 2048, n_micro = 1;
    const ArgSpec specs[] = {
        {"model", ARG_STR, &model,
         "model directory (config.json), a config .json file, or a training save/iter_* directory",
         1},
        {"micro-batch", ARG_INT, &micro_batch, "sequences per GPU step, for the memory estimate",
         0},
        {"seq-length", ARG_INT, &seq_len, "tokens per sequence, for FLOPs and memory", 0},
        {"micro-batches", ARG_INT, &n_micro,
         "micro-batches per step (the CPU keeps a second gradient buffer when > 1)", 0},
    };
    const ArgTable table = {"kda info", "model config summary, parameter count, FLOPs and memory",
                            NULL, specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&table, argc, argv)) return 0;
    if (micro_batch <= 0 || seq_len <= 0 || n_micro <= 0)
        kda_die("kda info: --micro-batch, --seq-length and --micro-batches must be positive");

    char dir[PATH_MAX]; // a checkpoint or save directory: the model it holds
    if (path_is_dir(model)) cli_resolve_model(model, dir, sizeof dir), model = dir;
    KdaConfig c;
    KdaParamTable t;
    KdaError err;
    if (kda_config_load(&c, model, &err) < 0) kda_die("%s", err.msg);
    if (kda_params_build(&t, &c, &err) < 0) kda_die("%s", err.msg);
    print_config(&c, model);
    print_weights(model);
    print_params(&c, &t);
    print_flops(&c, seq_len);
    print_memory(&c, micro_batch, seq_len, n_micro);
    kda_params_free(&t);
    return 0;
}
