// trainer.c - the training loop over a model runtime (contract in trainer.h).
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/json.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/util.h"
#include "io/model_io.h"
#include "dist/dist.h"     // defines: KdaDist, kda_dist_* (data parallelism)
#include "dist/dp.h"       // defines: KdaDp, kda_dp_* (the runtime's data-parallel wrapper)
#include "model/runtime.h" // defines: KdaRuntime, kda_runtime_* (where the math runs)
#include "model/zero1.h"   // defines: KdaShard, kda_zero1_plan (ZeRO-1 shards)
#include "train/checkpoint.h"
#include "data/loader.h"
#include "train/run_plan.h" // defines: KdaRunPlan, kda_run_plan (the typed run config)
#include "train/schedule.h"
#include "train/tfevents.h" // defines: KdaTfEvents, kda_tfevents_*

// ---------------------------------------------------------------------------------------------
// Signals

static volatile sig_atomic_t g_stop = 0;

static void on_signal(int sig) {
    (void)sig;
    if (g_stop) _exit(130);
    g_stop = 1;
}

void kda_train_install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); // a closed terminal or ssh session: save like SIGTERM
}
void kda_train_request_stop(void) {
    g_stop = 1;
}
void kda_train_clear_stop(void) {
    g_stop = 0;
}

// ---------------------------------------------------------------------------------------------
// The run: everything the loop needs in one place.

typedef struct {
    const KdaTrainOptions *o;
    const KdaRunConfig *rc;
    KdaConfig cfg;
    KdaParamTable table; // the run's table (a copy owned here, for checkpoints)
    KdaRuntime *rt;      // the model, its gradients and optimizer on the run's device
    KdaDp *dp;           // data parallelism over rt (NULL: one process)
    KdaRunPlan plan;     // rc's choices as types, checked once (run_plan.h)
    KdaLrSchedule sched;
    KdaLoader *train, *valid;
    int32_t *eval_buf;
    int64_t n_micro, T, tokens_per_iter;
    double flops_tok, mflops_tok;
    KdaTrainState st;
    int64_t start_iteration;
    char resumed_from[PATH_MAX]; // checkpoint dir resumed from ("" for a fresh run)
    char last_good[PATH_MAX];    // newest finite checkpoint written or resumed from ("": none)
    FILE *metrics;
    char metrics_path[PATH_MAX];
    KdaSaveLock lock; // on rc->save for the whole run: one writer per save dir
    Progress prog;
    int use_prog;
    double last_valid;
    // log window
    double win_t0, win_loss;
    double last_step_ms; // wall time of the latest iteration (the log's instantaneous value)
    double avg_ms_sum;   // Primus's average: ms of the iterations after the first 2 ...
    int64_t avg_n;       // ... and their count
    double dev_peak_mib; // highest device memory in use seen at a log line (GPU)
    int64_t win_iters, win_good, win_skipped, win_nan, last_log_iter;
    double last_norm, last_lr;
    float last_loss;
    // starting weights: o->init_from, or `load` with finetune (NULL: own init)
    const char *init;
    char init_dir[PATH_MAX];
    KdaTfEvents *tb; // tensorboard_dir's event file (NULL: none, or disabled after a failure)
    // data parallelism
    KdaDist *dist; // NULL: one process
    int rank, world, zero1;
    int quiet;            // o->quiet, or a rank other than 0
    int stop_all;         // some rank asked to stop (reduced with the step's loss)
    int time_up;          // exit_duration_in_mins passed here (joins the next stop reduction)
    float *loaded_params; // the host view a resume loaded into (runtime-owned)
} Run;

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static void timestamp(char *buf, size_t cap) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%06ld", ts.tv_nsec / 1000);
}

static void clear_bar(Run *r) {
    if (r->use_prog && r->prog.tty && r->prog.drawn) fprintf(stderr, "\r\033[K");
}

// The model config: `model`, else the directory the starting weights come from (finetune's
// load, which is how the seed's YAML names its model). layernorm_epsilon is Megatron's name for
// the eps the model's config.json already fixes; a different value is a config mistake (the
// one that cost Primus its parity, training-recipe.md §5), not an override.
static int load_model_config(Run *r, KdaError *err) {
    const char *model = r->rc->model ? r->rc->model : r->init;
    if (kda_config_load(&r->cfg, model, err)) return -1;
    double eps = r->rc->layernorm_epsilon;
    if (eps > 0 && (float)eps != (float)r->cfg.norm_eps)
        return kda_fail(err,
                        "layernorm_epsilon %g (run config) differs from norm_eps %g of the model "
                        "%s; kda.c uses the model's eps for every RMSNorm: make them equal",
                        eps, r->cfg.norm_eps, model);
    return kda_config_derive(&r->cfg, model, err);
}

// The runtime on the run's device over the starting parameters m (taken on success).
static int open_runtime(Run *r, KdaModel *m, KdaError *err) {
    KdaRuntimeOpts o = {.device = r->plan.device == KDA_DEVICE_CUDA ? "cuda" : "cpu",
                        .core = KDA_CORE_CHUNK,
                        .gpu = r->o->device,
                        .train = 1};
    if (kda_runtime_open(&r->rt, &r->cfg, &m->table, m->params, &o, err)) return -1;
    m->params = NULL; // the runtime owns the table and the parameters now
    kda_model_free(m);
    return 0;
}

// Model, parameters and runtime: fresh init, or weights from o->init_from.
static int setup_runtime(Run *r, KdaError *err) {
    KdaModel m;
    if (kda_model_init(&m, &r->cfg, err)) return -1;
    if (r->init) {
        KdaConfig ic;
        char diff[512];
        if (kda_config_load(&ic, r->init, err)) goto fail;
        if (kda_config_diff(&ic, &r->cfg, diff, sizeof diff)) {
            kda_fail(err, "%s: model config differs from the run's model %s (init vs run): %s",
                     r->init, r->rc->model ? r->rc->model : r->init, diff);
            goto fail;
        }
        if (kda_model_read_weights(r->init, &r->cfg, &m.table, m.params, err)) goto fail;
    } else {
        kda_params_init(&m.table, &r->cfg, m.params, (uint64_t)r->rc->seed);
    }
    if (kda_params_build(&r->table, &r->cfg, err) || open_runtime(r, &m, err)) goto fail;
    KdaAdamWConfig oc = {r->rc->adam_beta1, r->rc->adam_beta2, r->rc->adam_eps,
                         r->rc->weight_decay};
    if (kda_runtime_train_init(r->rt, &oc, err)) return -1;
    if (r->plan.recompute && r->plan.device == KDA_DEVICE_CUDA &&
        kda_runtime_set_recompute(r->rt, 1, err))
        return -1;
    if (r->plan.recompute && r->plan.device == KDA_DEVICE_CPU)
        kda_warn("recompute_granularity: full has no effect with device: cpu (the CPU "
                 "runtime keeps every activation)");
    return r->dist ? kda_dp_open(&r->dp, r->rt, r->dist, r->zero1, err) : 0;
fail:
    kda_model_free(&m);
    return -1;
}

static int open_loader(KdaLoader **out, const Run *r, const KdaBlend *b, int part, int whole,
                       int64_t num_samples, KdaError *err) {
    const KdaRunConfig *rc = r->rc;
    KdaLoaderSpec s = {.paths = b->paths,
                       .weights = b->weights,
                       .n_paths = b->n,
                       .split = rc->split,
                       .split_part = part,
                       .whole = whole,
                       .seq_length = rc->seq_length,
                       .num_samples = num_samples,
                       .seed = (uint32_t)rc->seed,
                       .objective = r->plan.objective,
                       .n_vocab = r->cfg.vocab_size,
                       .order = r->plan.order,
                       .dp = 1, // the one global order; data-parallel ranks read their slices of it
                       .micro_batch = rc->micro_batch_size};
    return kda_loader_open(out, &s, err);
}

static int setup_data(Run *r, KdaError *err) {
    const KdaRunConfig *rc = r->rc;
    int64_t gbs = rc->global_batch_size;
    if (open_loader(&r->train, r, &r->plan.train, 0, 0, rc->train_iters * gbs, err)) return -1;
    int64_t n_chunks = kda_loader_n_chunks(r->train);
    if (n_chunks > 0 && !r->quiet)
        kda_info("FLA data order: %lld chunks; %lld samples needed%s", (long long)n_chunks,
                 (long long)(rc->train_iters * gbs),
                 rc->train_iters * gbs > kda_loader_n_samples(r->train)
                     ? ", the same chunk order repeats (no reshuffle)"
                     : "");
    if (rc->eval_interval > 0 && rc->eval_iters > 0) {
        int64_t n_evals = rc->train_iters / rc->eval_interval + 1;
        int64_t want = rc->eval_iters * gbs * n_evals;
        int sep = r->plan.valid.n > 0;
        if (open_loader(&r->valid, r, sep ? &r->plan.valid : &r->plan.train, 1, sep, want, err))
            return -1;
        r->eval_buf = kda_malloc((size_t)(rc->micro_batch_size * r->T) * sizeof(int32_t));
    }
    return 0;
}

// Keeps only metrics lines with iteration <= it (resume), atomically.
static int trim_metrics(const char *path, int64_t it, KdaError *err) {
    struct stat sb;
    if (stat(path, &sb) || !S_ISREG(sb.st_mode)) return 0; // none yet, or a pipe: append only
    size_t n;
    KdaError e;
    char *s = read_file(path, &n, err);
    if (!s) return -1;
    char *out = kda_malloc(n + 1);
    size_t k = 0;
    for (char *line = s; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        JsonDoc d;
        int64_t li;
        if (!json_parse(&d, line, nl ? len - 1 : len, &e)) {
            if (!json_get_int(&d.root, "iteration", &li) && li <= it) {
                memcpy(out + k, line, len);
                k += len;
            }
            json_free(&d);
        }
        line += len;
    }
    int rc = write_file_atomic(path, out, k, err);
    free(out);
    free(s);
    return rc;
}

// A checkpoint that fails to load: the message names the newest older one in the same save dir
// to resume from instead (docs/reliability.md).
static int older_hint(const char *dir, KdaError *err) {
    char older[PATH_MAX], msg[sizeof err->msg];
    if (!kda_checkpoint_older(dir, older, sizeof older)) return -1;
    snprintf(msg, sizeof msg, "%s", err->msg);
    return kda_fail(err, "%s; the previous checkpoint is %s (resume from it with --load %s)", msg,
                    older, older);
}

static int resume_local(Run *r, KdaError *err) {
    const KdaRunConfig *rc = r->rc;
    const char *load = rc->finetune ? NULL : rc->load; // finetune's load is the init, not a resume
    const char *from = load ? load : rc->save;
    char dir[PATH_MAX];
    if (!from) return 0;
    int got = kda_checkpoint_resolve(from, dir, sizeof dir, err);
    if (got < 0) {
        if (!load && !path_exists(from)) return 0; // a new save dir: fresh start
        return -1;
    }
    if (got == 1) {
        if (load) return kda_fail(err, "%s: no `latest` checkpoint to resume from", from);
        return 0;
    }
    if (r->init) kda_warn("resuming from %s: the starting weights of %s are ignored", dir, r->init);
    KdaTrainState st;
    float *p = kda_runtime_host_params(r->rt, err);
    if (!p) return -1;
    if (kda_checkpoint_load(dir, &r->cfg, &r->table, p, kda_runtime_host_optim(r->rt), &st,
                            !r->o->no_verify_checksums, err))
        return older_hint(dir, err);
    r->loaded_params = p;
    // else setup_resume, after the broadcast
    if (!r->dist && kda_runtime_state_changed(r->rt, err)) return -1;
    if (st.train_fingerprint != r->st.train_fingerprint)
        kda_warn("%s: the training data differs from the checkpoint's:\n  was: %s\n  now: %s", dir,
                 st.train_desc, r->st.train_desc);
    st.train_fingerprint = r->st.train_fingerprint;
    st.valid_fingerprint = r->st.valid_fingerprint;
    memcpy(st.train_desc, r->st.train_desc, sizeof st.train_desc);
    memcpy(st.valid_desc, r->st.valid_desc, sizeof st.valid_desc);
    r->st = st;
    r->start_iteration = st.iteration;
    snprintf(r->resumed_from, sizeof r->resumed_from, "%s", dir);
    snprintf(r->last_good, sizeof r->last_good, "%s", dir);
    if (!r->quiet)
        kda_info("resumed from %s: iteration %lld, %lld samples consumed, optimizer step %lld", dir,
                 (long long)st.iteration, (long long)st.consumed_train,
                 (long long)kda_runtime_step(r->rt));
    return 0;
}

// Resume on rank 0, then the same state everywhere: rank 0's outcome, parameters (identical
// replicas even for a fresh start), and after a resume the moments, step and trainer state.
static int setup_resume(Run *r, KdaError *err) {
    if (!r->dist) return resume_local(r, err);
    if (kda_dp_gather_optim(r->dp, err)) return -1;
    int64_t hdr[2] = {0, 0}; // rank 0's status, start iteration
    KdaError e0 = {{0}};
    if (r->rank == 0) {
        hdr[0] = resume_local(r, &e0) ? 1 : 0;
        hdr[1] = r->start_iteration;
    }
    if (kda_dist_broadcast(r->dist, hdr, sizeof hdr, 0, err)) return -1;
    if (hdr[0]) {
        if (r->rank == 0) *err = e0;
        return r->rank == 0 ? -1 : kda_fail(err, "rank 0 could not resume (its log says why)");
    }
    // Rank 0 after a resume holds the checkpoint in the host views already: asking host_params
    // again would fetch a GPU runtime's stale device copy over it.
    KdaAdamW *opt = kda_runtime_host_optim(r->rt);
    float *p = r->rank == 0 && hdr[1] > 0 ? r->loaded_params : kda_runtime_host_params(r->rt, err);
    if (!p) return -1;
    size_t n = (size_t)r->table.total_numel * sizeof(float);
    if (kda_dist_broadcast(r->dist, p, n, 0, err)) return -1;
    if (hdr[1] > 0 && (kda_dist_broadcast(r->dist, opt->m, n, 0, err) ||
                       kda_dist_broadcast(r->dist, opt->v, n, 0, err) ||
                       kda_dist_broadcast(r->dist, &opt->step, sizeof opt->step, 0, err) ||
                       kda_dist_broadcast(r->dist, &r->st, sizeof r->st, 0, err)))
        return -1;
    r->start_iteration = hdr[1];
    return kda_runtime_state_changed(r->rt, err);
}

static int setup(Run *r, KdaError *err) {
    const KdaRunConfig *rc = r->rc;
    if (rc->save && r->rank == 0 && kda_save_lock(&r->lock, rc->save, err)) return -1;
    if (kda_run_plan(rc, r->world, &r->plan, err)) return -1;
    r->n_micro = r->plan.n_micro; // per rank
    r->T = r->plan.T;
    r->sched = r->plan.sched;
    r->init = r->o->init_from;
    int got = r->init ? 0 : kda_run_config_init_dir(rc, r->init_dir, sizeof r->init_dir, err);
    if (got < 0) return -1;
    if (got == 1) r->init = r->init_dir;
    if (load_model_config(r, err) || setup_runtime(r, err) || setup_data(r, err)) return -1;
    r->tokens_per_iter = rc->global_batch_size * rc->seq_length;
    r->flops_tok = kda_model_flops_per_token(&r->cfg, rc->seq_length);
    r->mflops_tok = kda_megatron_flops_per_token(&r->cfg, rc->seq_length);
    rng_seed(&r->st.rng, (uint64_t)rc->seed);
    snprintf(r->st.train_desc, sizeof r->st.train_desc, "%s", kda_loader_describe(r->train));
    r->st.train_fingerprint = kda_loader_fingerprint(r->train);
    if (r->valid) {
        snprintf(r->st.valid_desc, sizeof r->st.valid_desc, "%s", kda_loader_describe(r->valid));
        r->st.valid_fingerprint = kda_loader_fingerprint(r->valid);
    }
    if (setup_resume(r, err)) return -1;
    if (rc->save && r->rank == 0) { // rank 0 alone logs
        if (mkdir_p(rc->save, err)) return -1;
        path_join(r->metrics_path, sizeof r->metrics_path, rc->save, "metrics.jsonl");
        if (trim_metrics(r->metrics_path, r->start_iteration, err)) return -1;
        r->metrics = fopen(r->metrics_path, "a");
        if (!r->metrics)
            return kda_fail(err, "%s: cannot open for appending: %s", r->metrics_path,
                            strerror(errno));
    }
    if (rc->tensorboard_dir && r->rank == 0) {
        char p[PATH_MAX];
        if (kda_tfevents_open(&r->tb, rc->tensorboard_dir, p, sizeof p, err)) return -1;
        if (!r->quiet) kda_info("TensorBoard: %s", p);
    }
    int64_t mbs = rc->micro_batch_size;
    return kda_loader_start_strided(r->train, r->st.consumed_train + r->rank * mbs, mbs,
                                    mbs * r->world, 4, err);
}

// ---------------------------------------------------------------------------------------------
// Evaluation, logging, saving

static int evaluate(Run *r, double *out, KdaError *err) {
    const KdaRunConfig *rc = r->rc;
    int64_t mbs = rc->micro_batch_size, n = rc->eval_iters * r->n_micro;
    double sum = 0;
    for (int64_t k = 0; k < n; k++) { // this rank's slice, as in training
        if (kda_loader_read(r->valid, r->st.consumed_valid + r->rank * mbs, mbs, r->eval_buf, err))
            return -1;
        float l;
        if (kda_runtime_train_step(r->rt, r->eval_buf, mbs, r->T, 0, &l, err)) return -1;
        sum += l;
        r->st.consumed_valid += mbs * r->world;
    }
    if (r->dist && kda_dist_allreduce(r->dist, &sum, 1, KDA_DIST_F64, KDA_DIST_SUM, err)) return -1;
    *out = sum / (double)(n * r->world);
    return 0;
}

// Wall-clock Unix seconds (metrics.jsonl "time", TensorBoard wall_time).
static double wall_seconds_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// One TensorBoard event per finite value, Megatron's tag names; a write failure warns once and
// turns TensorBoard off (training goes on; metrics.jsonl is the record).
static void tb_log_(Run *r, int64_t it, const char *const *tags, const double *v, int n) {
    if (!r->tb) return;
    KdaError e;
    double t = wall_seconds_();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (isfinite(v[i])) rc = kda_tfevents_scalar(r->tb, tags[i], it, t, (float)v[i], &e);
    if (rc == 0) rc = kda_tfevents_flush(r->tb, &e);
    if (rc) {
        kda_warn("tensorboard_dir: %s; TensorBoard logging stops here", e.msg);
        kda_tfevents_close(r->tb);
        r->tb = NULL;
    }
}

// A JSON number, or null for NaN/inf (JSON has no non-finite numbers).
static void json_num_(FILE *f, double x) {
    char b[32];
    fputs(json_fmt_num(b, sizeof b, x, 9), f);
}

static void log_eval(Run *r, double vl) {
    r->last_valid = vl;
    const char *tags[2] = {"lm loss validation", "lm loss validation ppl"};
    double v[2] = {vl, exp(vl < 700 ? vl : 700)};
    tb_log_(r, r->st.iteration, tags, v, 2);
    if (!r->quiet) {
        clear_bar(r);
        printf(" validation loss at iteration %lld on validation set | lm loss value: %E | "
               "lm loss PPL: %E |\n",
               (long long)r->st.iteration, vl, exp(vl < 700 ? vl : 700));
        fflush(stdout);
    }
}

// The log line (training-recipe.md §3): Megatron's fields and order, then ours. On the GPU:
// MFU against the device's dense bf16 peak and device memory; on the CPU the TFLOP/s field says
// CPU (Megatron's "per GPU" would read 0.0). log_style primus: Primus's short line instead.
static void print_log_line_(Run *r, int64_t it, double ms, double tok_s, double lr, double loss) {
    const KdaRunConfig *rc = r->rc;
    char ts[64], mem[160], mfu[32], tflops[96];
    timestamp(ts, sizeof ts);
    clear_bar(r);
    double model_tf = tok_s * r->flops_tok / 1e12, avg = r->avg_n ? r->avg_ms_sum / r->avg_n : ms;
    double used, total;
    if (kda_runtime_device_memory(r->rt, &used, &total) == 0) {
        if (used > r->dev_peak_mib) r->dev_peak_mib = used;
        snprintf(mem, sizeof mem,
                 "device memory (MiB): %.0f used, %.0f peak, %.0f total | peak host memory (MiB): "
                 "%.0f",
                 used, r->dev_peak_mib, total, peak_rss_mib());
    } else {
        snprintf(mem, sizeof mem, "peak host memory (MiB): %.0f", peak_rss_mib());
    }
    double peak = kda_runtime_peak_flops(r->rt);
    if (peak > 0)
        snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * model_tf * 1e12 / peak);
    else
        snprintf(mfu, sizeof mfu, "n/a");
    char ranks[96] = ""; // data parallel: the rank count and the total rate
    if (r->world > 1)
        snprintf(ranks, sizeof ranks, " ranks: %d | tokens/s total: %.1f |", r->world,
                 tok_s * r->world);
    int cpu = kda_runtime_device(r->rt) == KDA_DEVICE_CPU;
    if (cpu)
        snprintf(tflops, sizeof tflops, "throughput (TFLOP/s, CPU): %.3g",
                 tok_s * r->mflops_tok / 1e12);
    else
        snprintf(tflops, sizeof tflops, "throughput per GPU (TFLOP/s/GPU): %.1f",
                 tok_s * r->mflops_tok / 1e12);
    if (r->plan.log_style == KDA_LOG_PRIMUS) {
        printf("[%s] iteration %5lld/%5lld | elapsed time per iteration (ms): %.1f/%.1f | "
               "TFLOP/s/GPU: %.1f | tokens per GPU (tokens/s/GPU): %.1f | lm loss: %E |\n",
               ts, (long long)it, (long long)rc->train_iters, ms, avg, tok_s * r->mflops_tok / 1e12,
               tok_s, loss);
    } else {
        printf(
            "[%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per "
            "iteration (ms): %.1f | %s | learning rate: %E | global batch size: %5lld | lm loss: "
            "%E | loss scale: 1.0 | grad norm: %.3f | number of skipped iterations: %3lld | "
            "number of nan iterations: %3lld | tokens/s/GPU: %.1f | model TFLOP/s/GPU: %.3f | "
            "MFU: %s | %s | ms/iter last/avg: %.1f/%.1f |%s\n",
            ts, (long long)it, (long long)rc->train_iters, (long long)r->st.consumed_train, ms,
            tflops, lr, (long long)rc->global_batch_size, loss, r->last_norm,
            (long long)r->win_skipped, (long long)r->win_nan, tok_s, model_tf, mfu, mem,
            r->last_step_ms, ms, ranks);
    }
    fflush(stdout);
}

// Every metrics record and log line is flushed and checked: a failed write (a full disk) stops
// the run with an error instead of losing lines silently (docs/reliability.md).
static int check_flush(FILE *f, const char *what, KdaError *err) {
    if (fflush(f) == 0 && !ferror(f)) return 0;
    return kda_fail(err, "%s: write failed: %s", what, strerror(errno));
}

// The training window a log line reports (log_train).
typedef struct {
    double ms, lr, loss;     // ms per iteration, the learning rate, mean loss of the good steps
    double tok_s_all, tok_s; // tokens/s of all ranks and per rank
} TrainWindow;

// The one writer of metrics.jsonl lines (README.md, "Training"): iteration, then with a training
// window w its time, consumed_samples and the window's fields, valid_loss when evaluated, and
// the rank fields when world > 1; an evaluation between log lines is w = NULL. No-op without a
// metrics file; -1 (err set) when the line cannot be flushed.
static int write_metrics_(Run *r, const TrainWindow *w, int evaluated, KdaError *err) {
    FILE *f = r->metrics;
    if (!f) return 0;
    fprintf(f, "{\"iteration\": %lld", (long long)r->st.iteration);
    if (w) fprintf(f, ", \"time\": %.3f", wall_seconds_());
    fprintf(f, ", \"consumed_samples\": %lld", (long long)r->st.consumed_train);
    if (w) {
        fprintf(f, ", \"lr\": %.9g, \"loss\": ", w->lr);
        json_num_(f, w->loss);
        fputs(", \"grad_norm\": ", f);
        json_num_(f, r->last_norm);
        fprintf(f,
                ", \"ms_per_iter\": %.3f, \"tokens_per_s\": %.1f, \"skipped\": %lld, \"nan\": %lld",
                w->ms, w->tok_s_all, (long long)r->win_skipped, (long long)r->win_nan);
    }
    if (evaluated) fputs(", \"valid_loss\": ", f), json_num_(f, r->last_valid);
    if (w && r->world > 1)
        fprintf(f, ", \"ranks\": %d, \"tokens_per_s_per_gpu\": %.1f", r->world, w->tok_s);
    fputs("}\n", f);
    return check_flush(f, r->metrics_path, err);
}

static int log_train(Run *r, int evaluated, KdaError *err) {

    const KdaRunConfig *rc = r->rc;
    double dt = now_seconds() - r->win_t0;
    int64_t it = r->st.iteration;
    double ms = 1000.0 * dt / (double)(r->win_iters ? r->win_iters : 1);
    double tok_s_all = (double)r->tokens_per_iter / (ms / 1000.0);
    double tok_s = tok_s_all / r->world; // per GPU (rank)
    double loss = r->win_good ? r->win_loss / (double)r->win_good : NAN;
    double lr = kda_lr_at(&r->sched, kda_runtime_step(r->rt));
    if (r->win_iters && it - r->win_iters >= 2) // Primus skips the first 2 iterations
        r->avg_ms_sum += ms * (double)r->win_iters, r->avg_n += r->win_iters;
    if (!r->quiet) {
        print_log_line_(r, it, ms, tok_s, lr, loss);
        if (check_flush(stdout, "stdout (the training log)", err)) return -1;
    }
    TrainWindow w = {.ms = ms, .lr = lr, .loss = loss, .tok_s_all = tok_s_all, .tok_s = tok_s};
    if (write_metrics_(r, &w, evaluated, err)) return -1;
    const char *tags[6] = {"lm loss",    "learning-rate",  "grad-norm",
                           "batch-size", "iteration-time", "throughput"};
    double v[6] = {
        loss,         lr,
        r->last_norm, (double)rc->global_batch_size,
        ms / 1000.0,  tok_s * r->mflops_tok / 1e12}; // Megatron's throughput: its FLOPs formula
    tb_log_(r, it, tags, v, 6);
    r->win_t0 = now_seconds();
    r->win_loss = 0;
    r->win_iters = r->win_good = r->win_skipped = r->win_nan = 0;
    r->last_log_iter = it;
    return 0;
}

// Rank 0 writes the checkpoint (ZeRO-1 moments gathered first); no rank returns before it is
// complete and `latest` names it, and a failure on rank 0 fails every rank.
static int save(Run *r, KdaTrainResult *res, KdaError *err) {
    if (!r->rc->save || r->st.iteration == r->start_iteration) return 0;
    char dir[PATH_MAX];
    if (r->dist && kda_dp_gather_optim(r->dp, err)) return -1;
    int64_t bad = 0;
    if (r->rank == 0) {
        float *p = kda_runtime_host_params(r->rt, err);
        const KdaAdamW *opt = kda_runtime_host_optim(r->rt);
        bad = !p || kda_checkpoint_save(r->rc->save, &r->st, &r->cfg, &r->table, p, opt, r->rc,
                                        r->rc->keep_last, r->resumed_from, dir, err) != 0;
    } else {
        char name[32];
        snprintf(name, sizeof name, "iter_%07lld", (long long)r->st.iteration);
        path_join(dir, sizeof dir, r->rc->save, name);
    }
    if (r->zero1) kda_runtime_optim_release(r->rt); // the gathered full moments
    if (r->dist) {
        KdaError e;
        double b = (double)bad;
        if (kda_dist_allreduce(r->dist, &b, 1, KDA_DIST_F64, KDA_DIST_MAX, r->rank ? err : &e))
            return -1;
        if (b > 0 && r->rank) return kda_fail(err, "rank 0 could not write the checkpoint");
    }
    if (bad) return -1;
    snprintf(res->checkpoint, sizeof res->checkpoint, "%s", dir);
    snprintf(r->last_good, sizeof r->last_good, "%s", dir);
    if (!r->quiet) {
        clear_bar(r);
        kda_info("saved checkpoint %s (iteration %lld)", dir, (long long)r->st.iteration);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Non-finite policy (docs/reliability.md): non-finite updated weights always stop the run
// (the update cannot be undone; nothing is saved); a non-finite loss or grad norm stops it
// unless max_nan_steps > 0 opts into skipping, then it stops at max_nan_steps consecutive.

static const char *last_good(const Run *r) {
    return r->last_good[0] ? r->last_good : "none (no checkpoint written or resumed from)";
}

// After an update: the weights must still be finite (a finite loss and grad norm can still
// give an overflowing update, e.g. a huge lr). A runtime without a cheap check (the GPU) is
// covered at save time, where kda_checkpoint_save refuses non-finite weights.
static int check_weights(Run *r, const KdaStepInfo *si, KdaError *err) {
    if (kda_runtime_params_finite(r->rt) != 0) return 0;
    return kda_fail(err,
                    "iteration %lld: the update (lr %g, grad norm %g) made the weights "
                    "non-finite; stopped without saving. Last good checkpoint: %s",
                    (long long)si->iteration, si->lr, si->grad_norm, last_good(r));
}

static int nan_policy(Run *r, const KdaStepInfo *si, KdaError *err) {
    int64_t max = r->rc->max_nan_steps;
    if (!si->skipped || (max > 0 && r->st.consecutive_nan < max)) return 0;
    char what[64];
    if (!isfinite(si->loss))
        snprintf(what, sizeof what, "loss (%g)", (double)si->loss);
    else
        snprintf(what, sizeof what, "grad norm (%g)", si->grad_norm);
    if (max == 0)
        return kda_fail(err,
                        "iteration %lld: non-finite %s; stopped (max_nan_steps 0; N > 0 skips up "
                        "to N-1 consecutive such iterations). Last good checkpoint: %s",
                        (long long)si->iteration, what, last_good(r));
    return kda_fail(err,
                    "iteration %lld: non-finite %s, %lld consecutive iterations with a non-finite "
                    "loss or grad norm (max_nan_steps %lld); stopped. Last good checkpoint: %s",
                    (long long)si->iteration, what, (long long)r->st.consecutive_nan,
                    (long long)max, last_good(r));
}

// ---------------------------------------------------------------------------------------------
// One iteration

static int train_step(Run *r, KdaStepInfo *si, KdaError *err) {
    const KdaRunConfig *rc = r->rc;
    if (r->dist && kda_dist_mark_progress(r->dist, r->st.iteration + 1, err)) return -1;
    if (kda_runtime_zero_grads(r->rt, err)) return -1;
    double sum = 0;
    for (int k = 0; k < r->n_micro; k++) {
        const int32_t *ids = kda_loader_next(r->train, err);
        if (!ids) return -1;
        if (k == r->n_micro - 1 && r->dist) kda_dp_begin_reduce(r->dp);
        float l;
        if (kda_runtime_train_step(r->rt, ids, rc->micro_batch_size, r->T, 1, &l, err) ||
            (r->dist && kda_dp_backward_done(r->dp, err)))
            return -1;
        int global_k = k * r->world + r->rank; // the micro-batch's place in the global batch
        if (r->o->poison && r->o->poison(r->o->user, r->st.iteration + 1, global_k)) l = NAN;
        sum += l;
    }
    // One all-reduce for the loss sum and the stop request: every rank decides alike.
    double red[2] = {sum, g_stop || r->time_up ? 1.0 : 0.0};
    if (r->dist && kda_dist_allreduce(r->dist, red, 2, KDA_DIST_F64, KDA_DIST_SUM, err)) return -1;
    r->stop_all = red[1] > 0;
    int64_t n_all = r->n_micro * r->world;
    si->iteration = r->st.iteration + 1;
    si->loss = (float)(red[0] / (double)n_all);
    si->grad_norm = NAN;
    si->lr = 0;
    si->skipped = 1;
    // Always in data parallel (a GPU runtime may have started it during the backward); a
    // non-finite loss then skips the update on every rank alike.
    if (r->dist && kda_dp_reduce_grads(r->dp, err)) return -1;
    if (isfinite(si->loss)) {
        KdaError fe = {{0}}; // a device failure (not a non-finite gradient) stops the run
        si->grad_norm = kda_runtime_finish_grads(r->rt, 1.0 / (double)n_all, rc->clip_grad, &fe);
        if (!isfinite(si->grad_norm) && fe.msg[0]) return *err = fe, -1;
        if (isfinite(si->grad_norm)) {
            si->lr = kda_lr_for_update(&r->sched, kda_runtime_step(r->rt) + 1);
            if (kda_runtime_update(r->rt, si->lr, err)) return -1;
            if (r->zero1 && kda_dp_sync_params(r->dp, err)) return -1;
            si->skipped = 0;
            if (check_weights(r, si, err)) return -1;
        }
    }
    r->st.iteration++;
    r->st.consumed_train += rc->global_batch_size;
    r->win_iters++;
    if (si->skipped) {
        r->st.skipped_iters++;
        r->st.nan_iters++;
        r->st.consecutive_nan++;
        r->win_skipped++;
        r->win_nan++;
        if (!r->quiet) {
            clear_bar(r);
            kda_warn("iteration %lld: non-finite %s, update skipped (%lld consecutive, %lld total)",
                     (long long)si->iteration, isfinite(si->loss) ? "grad norm" : "loss",
                     (long long)r->st.consecutive_nan, (long long)r->st.nan_iters);
        }
    } else {
        r->st.consecutive_nan = 0;
        r->win_good++;
        r->win_loss += si->loss;
        r->last_norm = si->grad_norm;
    }
    r->last_loss = si->loss;
    return nan_policy(r, si, err);
}

static void progress_tick(Run *r, double tok_s) {
    if (!r->use_prog) return;
    char extra[160];
    int n = snprintf(extra, sizeof extra, "loss %.4f", r->last_loss);
    if (isfinite(r->last_valid))
        n += snprintf(extra + n, sizeof extra - (size_t)n, " | valid %.4f", r->last_valid);
    if (tok_s > 0) snprintf(extra + n, sizeof extra - (size_t)n, " | %.0f tok/s", tok_s);
    progress_update(&r->prog, (double)r->st.iteration, extra);
}

// One iteration under the runtime's per-op profile (kda train --profile N): rank 0's table goes
// to stdout and, when asked, every rank's into its o->profile_out.
static int profiled_step(Run *r, KdaStepInfo *si, KdaError *err) {
    const char *dev = kda_runtime_device(r->rt) == KDA_DEVICE_CUDA ? "cuda" : "cpu";
    KdaProf prof;
    kda_prof_reset(&prof, 0, 0);
    if (kda_runtime_profile(r->rt, &prof, err)) return -1;
    int rc = train_step(r, si, err);
    if (kda_runtime_profile(r->rt, NULL, err) || rc) return -1;
    char title[256];
    double ms = kda_prof_wall_ms(&prof);
    snprintf(title, sizeof title,
             "profile of iteration %lld (%s, %lld x %lld x %lld tokens): %.1f ms, %.0f tokens/s",
             (long long)si->iteration, dev, (long long)r->n_micro,
             (long long)r->rc->micro_batch_size, (long long)r->T, ms,
             ms > 0 ? (double)r->tokens_per_iter / (ms / 1e3) : 0.0);
    if (r->rank == 0) { // one table per run, as every other log line (each rank measured its own)
        clear_bar(r);
        kda_prof_print(&prof, title, stdout);
    }
    if (r->o->profile_out) *r->o->profile_out = prof;
    return 0;
}

static int loop(Run *r, KdaTrainResult *res, KdaError *err) {
    const KdaRunConfig *rc = r->rc;
    const KdaTrainOptions *o = r->o;
    double t0 = now_seconds(), t1 = 0;
    int64_t it1 = r->st.iteration;
    r->win_t0 = t0;
    while (r->st.iteration < rc->train_iters) {
        KdaStepInfo si;
        double ts = now_seconds();
        int prof_now = o->profile_iter > 0 && r->st.iteration + 1 == o->profile_iter;
        if (prof_now ? profiled_step(r, &si, err) : train_step(r, &si, err)) return -1;
        r->last_step_ms = 1000.0 * (now_seconds() - ts);
        if (o->on_step) o->on_step(o->user, &si);
        int64_t it = r->st.iteration;
        if (it == r->start_iteration + 1) { // throughput excludes the first (warm-up) iteration
            t1 = now_seconds();
            it1 = it;
        }
        int last = it == rc->train_iters;
        int evaluated = 0;
        if (r->valid && (it % rc->eval_interval == 0 || last)) {
            double vl, te = now_seconds();
            if (evaluate(r, &vl, err)) return -1;
            r->win_t0 += now_seconds() - te; // ms/iter counts training steps only
            log_eval(r, vl);
            evaluated = 1;
        }
        if (it == 1 || (rc->log_interval > 0 && it % rc->log_interval == 0) || last) {
            if (log_train(r, evaluated, err)) return -1;
        } else if (evaluated) {
            if (write_metrics_(r, NULL, 1, err)) return -1;
        }
        double el = now_seconds() - t1;
        progress_tick(r, it > it1 && el > 0 ? (double)((it - it1) * r->tokens_per_iter) / el : 0);
        int out_of_time =
            rc->exit_duration_in_mins > 0 && now_seconds() - t0 >= 60.0 * rc->exit_duration_in_mins;
        // ranks agree through the step's reduction: this rank's clock joins the next one
        r->time_up = out_of_time;
        int stop = (r->dist ? r->stop_all : g_stop || out_of_time) ||
                   (o->stop_after > 0 && it >= o->stop_after);
        if (last || stop || (rc->save_interval > 0 && it % rc->save_interval == 0)) {
            double tsave = now_seconds();
            if (save(r, res, err)) return -1;
            r->win_t0 += now_seconds() - tsave; // nor checkpoint writes
        }
        if (stop && !last) {
            res->interrupted = 1;
            if (!r->quiet) {
                clear_bar(r);
                kda_info("stopped at iteration %lld %s", (long long)it,
                         out_of_time ? "(exit_duration_in_mins reached)" : "on request");
            }
            break;
        }
    }
    res->seconds = now_seconds() - t0;
    double el = now_seconds() - t1;
    if (r->st.iteration > it1 && el > 0)
        res->tokens_per_s = (double)((r->st.iteration - it1) * r->tokens_per_iter) / el;
    return 0;
}

int kda_train(const KdaTrainOptions *o, KdaTrainResult *res, KdaError *err) {
    memset(res, 0, sizeof *res);
    res->last_valid_loss = NAN;
    Run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.rc = o->rc;
    r.last_valid = NAN;
    r.last_norm = NAN;
    r.dist = o->dist;
    r.world = o->dist ? kda_dist_world(o->dist) : 1;
    r.rank = o->dist ? kda_dist_rank(o->dist) : 0;
    r.zero1 = o->dist && o->rc->use_distributed_optimizer;
    r.quiet = o->quiet || r.rank != 0;
    r.lock.fd = -1;
    int rc = setup(&r, err);
    if (!rc) {
        r.use_prog = o->progress && isatty(STDERR_FILENO) && r.rank == 0;
        if (r.use_prog) {
            progress_init(&r.prog, "train", (double)r.rc->train_iters, "it");
            progress_update(&r.prog, (double)r.st.iteration, NULL);
        }
        if (!r.quiet)
            kda_info("training %lld iterations from %lld: %lld micro-batches of %lld x %lld "
                     "tokens, objective %s, data order %s, %.3g model FLOPs/token",
                     (long long)r.rc->train_iters, (long long)r.st.iteration, (long long)r.n_micro,
                     (long long)r.rc->micro_batch_size, (long long)r.T,
                     r.rc->objective ? r.rc->objective : "megatron",
                     r.rc->data_order ? r.rc->data_order : "megatron", r.flops_tok);
        if (!r.quiet && r.dist) {
            char z[160] = "";
            KdaShard sh; // the moments' memory per rank (the GPU pads its layout: ~0.01% more)
            if (r.zero1 && !kda_zero1_plan(&sh, r.table.total_numel, r.world, r.rank, 1, err))
                snprintf(z, sizeof z,
                         ", ZeRO-1 (distributed optimizer): AdamW moments %.1f MiB per rank "
                         "instead of %.1f MiB",
                         kda_zero1_moment_bytes(&sh, 1) / (1 << 20),
                         kda_zero1_moment_bytes(&sh, 0) / (1 << 20));
            kda_info("data parallel over %d ranks (%s): %lld micro-batches per rank per "
                     "iteration, global batch %lld = %lld x %lld x %d%s",
                     r.world, kda_dist_engine(r.dist), (long long)r.n_micro,
                     (long long)r.rc->global_batch_size, (long long)r.rc->micro_batch_size,
                     (long long)r.n_micro, r.world, z);
        }
        rc = loop(&r, res, err);
        if (r.use_prog) progress_finish(&r.prog, (double)r.st.iteration, NULL);
    }
    res->iteration = r.st.iteration;
    res->consumed_samples = r.st.consumed_train;
    res->start_iteration = r.start_iteration;
    res->nan_iters = r.st.nan_iters;
    res->skipped_iters = r.st.skipped_iters;
    res->last_loss = r.last_loss;
    res->last_valid_loss = r.last_valid;
    if (r.metrics && fclose(r.metrics) && !rc)
        rc = kda_fail(err, "%s: write failed: %s", r.metrics_path, strerror(errno));
    kda_tfevents_close(r.tb);
    kda_save_unlock(&r.lock);
    kda_loader_free(r.train);
    kda_loader_free(r.valid);
    kda_run_plan_free(&r.plan);
    free(r.eval_buf);
    kda_dp_close(r.dp);
    kda_runtime_close(r.rt);
    kda_params_free(&r.table);
    return rc;
}
