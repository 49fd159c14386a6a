// cmd_train.c - `kda train --config X.yaml [--any_key value ...] [--init-from HF_DIR]`.
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "model/runtime.h" // defines: kda_runtime_pick
#include "model/config.h"  // defines: kda_config_load, kda_config_derive
#include "model/params.h"  // defines: kda_params_build (parameter count for --dry-run)
#include "dist/dist.h"     // defines: KdaDist, kda_dist_env_read, kda_dist_open
#include "dist/launch.h"   // defines: kda_launch_take_nproc, kda_launch_local
#include "model/zero1.h"   // defines: kda_zero1_plan (the --dry-run memory plan)
#include "train/run_config.h"
#include "train/trainer.h"

void openblas_set_num_threads(int n); // OpenBLAS (cblas.h pulls in more than needed)

static void usage(FILE *f) {
    fprintf(f,
            "usage: kda train --config RUN.yaml [--KEY VALUE ...] [--init-from HF_DIR]\n"
            "train (or resume) a KDA model on the CPU or GPUs (device: cpu | cuda)\n\n"
            "  --config PATH       run config (YAML, Megatron key names; configs/*.yaml)\n"
            "  --KEY VALUE         override any run-config key, e.g. --train_iters 100 "
            "--lr 1e-3\n"
            "                      (lists take several words: --train_data_path a b)\n"
            "  --init-from DIR     start from the weights of an HF model dir (fresh optimizer)\n"
            "  --profile N         per-op time table of iteration N (CUDA events on the GPU,\n"
            "                      host clock on the CPU; its rows add up to the step)\n"
            "  --print-config      print the effective config (YAML) and exit\n"
            "  --dry-run           print the effective config and the plan (batch, tokens,\n"
            "                      memory) without training\n"
            "  --nproc-per-node N  start N local ranks (data parallel; as torchrun's standalone\n"
            "                      mode); signals to this launcher go to every rank\n"
            "  --no-progress       no progress bar\n"
            "  --no-verify-checksums  resume without checking the checkpoint's checksums\n"
            "  --quiet             no per-iteration log lines\n"
            "  --help              this help\n\n"
            "Resumes from `load`, or from `save` when it holds a `latest` checkpoint. SIGINT/\n"
            "SIGTERM/SIGHUP: finish the step, save, exit 0 (a second signal exits at once).\n"
            "The effective config is saved with every checkpoint (run_config.yaml).\n"
            "Several ranks: launched by torchrun, srun (Slurm), mpirun or --nproc-per-node;\n"
            "see README \"Multi-GPU and clusters\".\n"
            "Megatron/Primus YAML works as is: finetune: true + load: DIR starts from DIR's\n"
            "weights (HF dir or kda checkpoint; its config.json when `model` is unset).\n\n"
            "Keys (YAML or --KEY VALUE; dashes = underscores):\n");
    kda_run_config_print_keys(f);
}

// Keys accepted without effect: one line each kind, so nothing is silently ignored.
static void report_noops(const KdaRunConfig *rc, const KdaDist *dist) {
    int wandb = 0;
    for (int i = 0; i < rc->ignored.n; i++)
        wandb |= !strncmp(rc->ignored.items[i], "wandb_", 6);
    if (wandb)
        kda_warn("wandb_*: Weights & Biases is not supported (kda.c writes metrics.jsonl and, with "
                 "tensorboard_dir, TensorBoard files). To upload a run:\n"
                 "  pip install wandb\n"
                 "  python3 -c \"import json, wandb; wandb.init(project='P'); [wandb.log(r, "
                 "step=r['iteration']) for r in map(json.loads, open('SAVE/metrics.jsonl'))]\"");
    if (rc->ignored.n > wandb) {
        char list[512];
        size_t k = 0;
        for (int i = 0; i < rc->ignored.n && k < sizeof list; i++)
            if (strncmp(rc->ignored.items[i], "wandb_", 6))
                k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "",
                                      rc->ignored.items[i]);
        kda_info("ignored (Primus/FLA/Megatron internals kda.c has no counterpart for; it "
                 "implements FLA's fused math once): %s",
                 list);
    }
    if (rc->use_distributed_optimizer && !dist)
        kda_info("use_distributed_optimizer: true: one process, nothing to shard");
}

// --dry-run: what the run would do, from the validated config (no data is read).
static int print_plan_(const KdaRunConfig *rc, const char *init_from) {
    char dir[4096];
    KdaError err;
    int got = init_from ? 0 : kda_run_config_init_dir(rc, dir, sizeof dir, &err);
    if (got < 0) kda_die("%s", err.msg);
    const char *model = rc->model ? rc->model : init_from ? init_from : dir;
    KdaConfig cfg;
    KdaParamTable t;
    if (kda_config_load(&cfg, model, &err) || kda_config_derive(&cfg, model, &err) ||
        kda_params_build(&t, &cfg, &err))
        kda_die("%s", err.msg);
    KdaDistEnv env; // the launcher's world (a plain run: 1)
    if (kda_dist_env_read(&env, NULL, &err)) kda_die("%s", err.msg);
    int64_t accum = rc->global_batch_size / (rc->micro_batch_size * env.world);
    if (rc->global_batch_size % (rc->micro_batch_size * env.world))
        kda_die("global_batch_size %lld must be a multiple of micro_batch_size x data-parallel "
                "ranks = %lld x %d",
                (long long)rc->global_batch_size, (long long)rc->micro_batch_size, env.world);
    double tokens = (double)rc->global_batch_size * (double)rc->seq_length;
    printf("\n# plan\n# model: %s, %lld parameters%s\n", model, (long long)t.total_numel,
           got == 1 || init_from ? " (weights from it: fresh optimizer, iteration 0)" : "");
    printf("# world size %d (%s, launcher %s), global batch %lld = micro %lld x %lld "
           "accumulation steps x %d ranks\n",
           env.world, rc->device ? rc->device : "cpu", env.launcher,
           (long long)rc->global_batch_size, (long long)rc->micro_batch_size, (long long)accum,
           env.world);
    printf("# %.0f tokens per iteration, %lld iterations = %.4g tokens\n", tokens,
           (long long)rc->train_iters, tokens * (double)rc->train_iters);
    KdaShard sh; // ZeRO-1: each rank keeps the Adam moments of its 1/world shard
    int zero1 = rc->use_distributed_optimizer && env.world > 1;
    if (kda_zero1_plan(&sh, t.total_numel, env.world, 0, 1, &err)) kda_die("%s", err.msg);
    double fixed = 8.0 * (double)t.total_numel + kda_zero1_moment_bytes(&sh, zero1);
    printf("# memory: %.2f GiB fixed per rank (fp32 weights and gradients 8 B/parameter, Adam m "
           "and v %s) + activations (kda info --model %s --micro-batch %lld --seq-length %lld)\n",
           fixed / (1 << 30), zero1 ? "8 B/parameter / world (ZeRO-1)" : "8 B/parameter", model,
           (long long)rc->micro_batch_size, (long long)rc->seq_length);
    if (zero1)
        printf("# ZeRO-1 saves %.2f GiB of Adam moments per rank\n",
               (kda_zero1_moment_bytes(&sh, 0) - kda_zero1_moment_bytes(&sh, 1)) / (1 << 30));
    printf("# ETA: not estimated before running (the log line's ms/iter x %lld iterations)\n",
           (long long)rc->train_iters);
    kda_params_free(&t);
    return 0;
}

// --nproc-per-node N: this program again, N times, as ranks of one local world.
static int launch_ranks(int nproc, int argc, char **argv) {
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) kda_die("--nproc-per-node: cannot find this program (/proc/self/exe)");
    exe[k] = 0;
    char **av = calloc((size_t)argc + 3, sizeof *av);
    if (!av) kda_die("out of memory");
    av[0] = exe;
    av[1] = "train";
    for (int i = 0; i < argc; i++)
        av[i + 2] = argv[i];
    KdaError err = {{0}};
    int st = kda_launch_local(nproc, exe, av, 90.0, &err);
    free(av);
    if (st < 0) kda_die("%s", err.msg);
    return st;
}

// The communicator of a launched rank (NULL for a plain single process). GPU ranks use NCCL
// even alone (the code path of 8), CPU ranks Gloo; world > 1 without an engine is an error.
static KdaDist *join_world(const KdaRunConfig *rc, int cuda, int *device) {
    KdaDistEnv env;
    KdaError err = {{0}};
    if (kda_dist_env_read(&env, NULL, &err)) kda_die("%s", err.msg);
    *device = cuda ? env.local_rank : 0;
    if (env.world == 1 && (!cuda || !strcmp(env.launcher, "none"))) return NULL;
    // The batch split is checked before joining (the trainer checks it again), so that every rank
    // fails alike with this message: after joining, the first rank to exit made the others report
    // a lost peer instead (seen under load in dp_batch_not_divisible_is_an_error).
    if (rc->micro_batch_size > 0 && rc->global_batch_size % (rc->micro_batch_size * env.world))
        kda_die("global_batch_size %lld must be a multiple of micro_batch_size x data-parallel "
                "ranks = %lld x %d",
                (long long)rc->global_batch_size, (long long)rc->micro_batch_size, env.world);
    KdaDist *d = NULL;
    if (kda_dist_open(&d, &env, cuda ? KDA_DIST_NCCL : KDA_DIST_HOST, *device,
                      rc->distributed_timeout_minutes * 60.0, &err))
        kda_die("%s", err.msg);
    return d;
}

int cmd_train(int argc, char **argv) {
    const char *init_from = NULL;
    KdaError lerr = {{0}};
    int nproc = kda_launch_take_nproc(&argc, argv, &lerr);
    if (nproc < 0) kda_die("%s", lerr.msg);
    if (nproc > 0) return launch_ranks(nproc, argc, argv);
    // First thing a rank does: a SIGINT/SIGTERM/SIGHUP during start-up (config, data, rendezvous)
    // then stops the run after its first iteration with a checkpoint instead of killing it.
    kda_train_install_signal_handlers();
    int progress = 1, quiet = 0, print_config = 0, dry_run = 0, no_verify = 0;
    long long profile_iter = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            free(rest);
            return 0;
        } else if (!strcmp(argv[i], "--init-from") || !strcmp(argv[i], "--init_from")) {
            if (i + 1 >= argc) kda_die("--init-from needs a directory");
            init_from = argv[++i];
        } else if (!strncmp(argv[i], "--init-from=", 12)) {
            init_from = argv[i] + 12;
        } else if (!strcmp(argv[i], "--profile")) {
            char *end = NULL;
            if (i + 1 < argc) profile_iter = strtoll(argv[i + 1], &end, 10);
            if (i + 1 >= argc || !end || *end || profile_iter < 1)
                kda_die("--profile needs an iteration number >= 1 (got '%s')",
                        i + 1 < argc ? argv[i + 1] : "");
            i++;
        } else if (!strcmp(argv[i], "--print-config")) {
            print_config = 1;
        } else if (!strcmp(argv[i], "--dry-run")) {
            dry_run = 1;
        } else if (!strcmp(argv[i], "--no-progress")) {
            progress = 0;
        } else if (!strcmp(argv[i], "--no-verify-checksums")) {
            no_verify = 1;
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else {
            rest[n++] = argv[i];
        }
    }
    KdaRunConfig rc;
    KdaError err = {{0}};
    // kda_run_config_from_cli starts from the defaults itself (applying them here leaked them)
    if (kda_run_config_from_cli(&rc, n, rest, &err)) kda_usage_die("kda train", "%s", err.msg);
    free(rest);
    if (!rc.model && init_from) {
        const char *v[1] = {init_from};
        if (kda_run_config_set(&rc, "model", v, 1, &err)) kda_die("%s", err.msg);
    }
    if (kda_run_config_validate(&rc, &err)) kda_usage_die("kda train", "%s", err.msg);
    if (print_config || dry_run) {
        if (kda_run_config_write(&rc, stdout)) kda_die("stdout: write failed");
        int rc2 = dry_run ? print_plan_(&rc, init_from) : 0;
        kda_run_config_free(&rc);
        return rc2;
    }
    KdaDeviceKind kind; // the runtime's one device check, before any rank starts
    if (rc.device && !strcmp(rc.device, "cuda") && kda_runtime_pick("cuda", &kind, &err))
        kda_die("device \"cuda\": %s", err.msg);
    if (rc.threads > 0) {
        omp_set_num_threads((int)rc.threads);
        openblas_set_num_threads((int)rc.threads);
    }
    int device = 0;
    KdaDist *dist = join_world(&rc, rc.device && !strcmp(rc.device, "cuda"), &device);
    if (!dist || kda_dist_rank(dist) == 0) report_noops(&rc, dist);
    KdaTrainOptions o = {.rc = &rc,
                         .no_verify_checksums = no_verify,
                         .init_from = init_from,
                         .progress = progress,
                         .quiet = quiet,
                         .profile_iter = profile_iter,
                         .dist = dist,
                         .device = device};
    KdaTrainResult res;
    int status = 0;
    if (kda_train(&o, &res, &err)) {
        fprintf(stderr, "kda: error: %s\n", err.msg);
        status = 1;
    } else if (dist && kda_dist_rank(dist) != 0) {
        // ranks other than 0 print no summary
    } else if (res.iteration == res.start_iteration && !res.interrupted) {
        kda_info("nothing to train: the run is already at iteration %lld (train_iters %lld); "
                 "raise train_iters to continue",
                 (long long)res.iteration, (long long)rc.train_iters);
    } else {
        char a[32], b[32];
        kda_info("%s at iteration %lld (%lld samples) in %s, %s tokens/s; last loss %.4f%s%s",
                 res.interrupted ? "stopped" : "done", (long long)res.iteration,
                 (long long)res.consumed_samples, human_seconds(a, sizeof a, res.seconds),
                 human_count(b, sizeof b, res.tokens_per_s), res.last_loss,
                 res.checkpoint[0] ? "; checkpoint " : "", res.checkpoint);
        if (res.nan_iters)
            kda_warn("%lld iterations had a non-finite loss or grad norm and were skipped",
                     (long long)res.nan_iters);
    }
    kda_dist_close(dist);
    kda_run_config_free(&rc);
    return status;
}
