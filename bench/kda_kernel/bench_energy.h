// bench_energy.h - energy per launch of a GPU benchmark row at the sustained power draw: NVML's
// total-energy counter around a loop of one row's launches that runs long enough for the board's
// power controller to settle (docs/perf-log.md, "The training step is power-bound").
//
// Why: kda train runs an H200 at its 700 W cap (SM clock ~1590 MHz against ~1950 MHz for short
// bursts), so a step costs energy, not time: step ms = step J / 700 W. The benchmarks' medians of
// 10 launches run at the burst clock and overstate a change's saving in the model when it raises
// the power draw (session 6: the v5 core and the trimmed CE rows gave half their predicted ms).
// mJ per call is the cost that carries into the capped step.
//
// NVML comes from the driver (libnvidia-ml.so.1, present wherever a GPU is), opened with dlopen
// at run time: no header, no link-time dependency, and a build machine without a GPU still links.
// Header-only (static inline functions): include it from one benchmark translation unit, after
// bench_common.h or the benchmark's own `g` (KdaCudaCtx, whose stream the loops sync) and die_().
//
// Threads: one (the benchmark's main). Errors: NVML missing or failing disables the energy rows
// with one line (bench_energy_open returns 0); a failed launch or sync exits through die_().
#ifndef KDA_BENCH_ENERGY_H
#define KDA_BENCH_ENERGY_H

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_sync

// The few NVML entry points used, by their documented C signatures (nvml.h): nvmlDevice_t is an
// opaque pointer, nvmlReturn_t an int (0 = NVML_SUCCESS), NVML_CLOCK_SM = 1.
typedef struct {
    void *lib, *dev;
    int (*energy)(void *dev, unsigned long long *mj); // nvmlDeviceGetTotalEnergyConsumption
    int (*clock)(void *dev, int type, unsigned *mhz); // nvmlDeviceGetClockInfo
} BenchNvml;

// Which rows get an energy line: KDA_BENCH_ENERGY unset or empty, none; "all", every row; else
// the rows whose name contains it.
static inline int bench_energy_wanted(const char *row) {
    const char *f = getenv("KDA_BENCH_ENERGY");
    return f && *f && (!strcmp(f, "all") || strstr(row, f));
}

// Opens NVML on the CUDA device `cuda_dev` (matched by PCI bus id). 1 on success, 0 when NVML is
// not usable (one line on stdout says why; the energy lines are then skipped).
static inline int bench_energy_open(BenchNvml *n, int cuda_dev) {
    memset(n, 0, sizeof *n);
    char bus[32];
    int (*init)(void) = NULL;
    int (*by_bus)(const char *, void **) = NULL;
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (n->lib) {
        *(void **)&init = dlsym(n->lib, "nvmlInit_v2");
        *(void **)&by_bus = dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
        *(void **)&n->energy = dlsym(n->lib, "nvmlDeviceGetTotalEnergyConsumption");
        *(void **)&n->clock = dlsym(n->lib, "nvmlDeviceGetClockInfo");
    }
    if (!init || !by_bus || !n->energy || !n->clock) {
        printf("energy: NVML not available (libnvidia-ml.so.1: %s); energy rows skipped\n",
               n->lib ? "symbols missing" : "not found");
        return 0;
    }
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_dev) != cudaSuccess || init() != 0 ||
        by_bus(bus, &n->dev) != 0) {
        printf("energy: NVML cannot open the device (bus %s); energy rows skipped\n", bus);
        return 0;
    }
    return 1;
}

static inline double bench_now_s_(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// What one sustained loop measured: calls in the window, its wall seconds, the energy counter's
// millijoules over it, and the mean of the SM clock sampled at each sync.
typedef struct {
    long calls;
    double seconds, mj, sm_mhz;
} BenchEnergy;

// Derived figures: mJ per call, mean watts, ms per call at the sustained draw.
static inline double bench_energy_mj_per_call(const BenchEnergy *e) {
    return e->calls > 0 ? e->mj / (double)e->calls : 0.0;
}
static inline double bench_energy_watts(const BenchEnergy *e) {
    return e->seconds > 0 ? e->mj / 1e3 / e->seconds : 0.0;
}
static inline double bench_energy_ms_per_call(const BenchEnergy *e) {
    return e->calls > 0 ? e->seconds * 1e3 / (double)e->calls : 0.0;
}

// Runs fn(arg) back to back for BENCH_ENERGY_WARM_S (the power controller's ~1 s average
// settles), then for BENCH_ENERGY_WINDOW_S between two reads of the energy counter. The
// benchmark's stream (g's) is synced about every 20 ms of launches (the clock is sampled there;
// the queue never runs dry for longer than a sync's latency).
#define BENCH_ENERGY_WARM_S   1.0
#define BENCH_ENERGY_WINDOW_S 1.0
static inline BenchEnergy bench_energy_run(const BenchNvml *n, int (*fn)(void *), void *arg) {
    BenchEnergy e = {0, 0.0, 0.0, 0.0};
    unsigned long long e0 = 0, e1 = 0;
    double t0 = bench_now_s_(), ts = 0.0, mhz_sum = 0.0;
    long batch = 1, samples = 0;
    int timing = 0;
    for (;;) {
        double b0 = bench_now_s_();
        for (long i = 0; i < batch; i++)
            if (fn(arg)) die_("energy loop launch");
        if (kda_cuda_sync(&g)) die_("energy loop sync");
        double now = bench_now_s_();
        long done = batch;
        if (now - b0 < 0.02 && batch < (1L << 20)) batch *= 2; // ~20 ms between syncs
        if (timing) {
            unsigned mhz = 0;
            e.calls += done;
            if (n->clock(n->dev, 1, &mhz) == 0) mhz_sum += mhz, samples++;
            if (now - ts >= BENCH_ENERGY_WINDOW_S) {
                if (n->energy(n->dev, &e1) != 0) break;
                e.seconds = now - ts, e.mj = (double)(e1 - e0);
                e.sm_mhz = samples ? mhz_sum / (double)samples : 0.0;
                break;
            }
        } else if (now - t0 >= BENCH_ENERGY_WARM_S) {
            if (n->energy(n->dev, &e0) != 0) break;
            timing = 1, ts = bench_now_s_();
        }
    }
    return e;
}

// One line of a sustained run under `label`: ms, mJ and mean W per call, the mean SM clock.
static inline void bench_energy_print(const char *label, const BenchEnergy *e) {
    printf("  %-42s %9.3f ms %8.2f mJ/call %6.0f W %6.0f MHz (%ld calls)\n", label,
           bench_energy_ms_per_call(e), bench_energy_mj_per_call(e), bench_energy_watts(e),
           e->sm_mhz, e->calls);
}

#endif
