# kda.c - build, test and demo. `make` builds build/kda; `make test` runs the CPU suite.
#
#   make [BUILD=dir] [KDA_CUDA=auto|0|1]   build (CUDA auto-detected from nvcc; 0 forces CPU)
#   make test                              check-refs, then the CPU test suite (what CI runs)
#   make check-refs                        every `NAME.md §X.Y` citation resolves (docs/spec/)
#   make test-gpu                          GPU test suite (on a machine with an NVIDIA GPU)
#   make demo                              install deps, build, run the quick-start demo
#   make fuzz                              build the libFuzzer targets (clang)
#   make format                            clang-format every source file
#   make test SAN=address,undefined        the suite under sanitizers (own BUILD dir advised)
#   make test-san                          ASan + UBSan + LSan suite in build-asan (CI runs it)
#   EXTRA_CFLAGS / EXTRA_LDFLAGS           appended to the compile / link lines

BUILD    ?= build
CC       ?= cc
NVCC     ?= $(shell command -v nvcc 2>/dev/null)
KDA_CUDA ?= auto
OPT      ?= -O2
# Warnings are errors; the GPU machine's scripts (bench/train_throughput/gpu_env.sh) retry a
# failed build with WERROR= so one warning of another host compiler does not waste a device call.
WERROR   ?= -Werror
# sm_90a (wgmma/TMA-capable H100/H200 code) and sm_90 (plain Hopper); the GPU machine's scripts
# build sm_90a only (CUDA_ARCHS=90a), which halves the nvcc time of a device call.
CUDA_ARCHS ?= 90a 90
CUDA_GENCODE = $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
comma    := ,
space    := $(subst ,, )

CFLAGS   := -std=c11 $(OPT) -g -Wall -Wextra $(WERROR) -fopenmp -D_GNU_SOURCE -Isrc -MMD -MP
LDLIBS   := -lopenblas -lzstd -lz -lsnappy -lyaml -lm -lpthread
LDFLAGS  := -fopenmp
ifneq ($(SAN),)
  CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=$(SAN)
endif
CFLAGS  += $(EXTRA_CFLAGS)
LDFLAGS += $(EXTRA_LDFLAGS)

# OpenBLAS built on OpenMP (Debian's libopenblas-openmp-dev) shares our OpenMP thread pool; the
# default pthread build runs its own pool, and the two fight for the cores (idle OpenMP workers
# spin while BLAS threads run). Use the OpenMP build when it is installed.
MULTIARCH    := $(shell $(CC) -print-multiarch 2>/dev/null)
OPENBLAS_OMP := $(wildcard /usr/lib/$(MULTIARCH)/openblas-openmp/libopenblas.so)
ifneq ($(OPENBLAS_OMP),)
  CFLAGS := -I/usr/include/$(MULTIARCH)/openblas-openmp $(CFLAGS)
  LDLIBS := -L$(dir $(OPENBLAS_OMP)) -Wl,-rpath,$(dir $(OPENBLAS_OMP)) $(LDLIBS)
endif

# src/cli/main.c is the `kda` binary's main(): linked into build/kda, kept out of libkda.a (the
# commands, src/cli/cmd_*.c, stay in the library: the tests call them).
MAIN_SRC := src/cli/main.c
LIB_SRC  := $(filter-out $(MAIN_SRC),$(sort $(wildcard src/*/*.c)))
TEST_SRC := $(sort $(wildcard tests/*.c))
CU_SRC   := $(sort $(wildcard src/cuda/*.cu))

ifeq ($(KDA_CUDA),auto)
  USE_CUDA := $(if $(NVCC),1,0)
else
  USE_CUDA := $(KDA_CUDA)
endif

ifeq ($(USE_CUDA),1)
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  CFLAGS    += -DKDA_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  NVFLAGS   := -std=c++17 -O3 -g -lineinfo -Isrc -DKDA_HAVE_CUDA=1 -MMD -MP \
               $(CUDA_GENCODE) \
               -Xcompiler -Wall,-Wextra$(if $(WERROR),$(comma)-Werror) $(if $(WERROR),-Werror all-warnings)
  LDLIBS    += -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart_static -ldl -lrt -lstdc++
  CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/%.o)
endif

# Build identification for `kda --version` (src/core/version.c is recompiled on every build,
# so the commit is always the tree's). The archs are the -gencode targets above.
KDA_COMMIT    := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
VERSION_FLAGS := -DKDA_COMMIT='"$(KDA_COMMIT)"'
ifeq ($(USE_CUDA),1)
  VERSION_FLAGS += -DKDA_CUDA_ARCHS='"$(subst $(space),$(comma) ,$(strip $(CUDA_ARCHS:%=sm_%)))"'
endif

# Gloo (Debian libgloo-dev): the collective engine of CPU ranks (src/dist/gloo_shim.cc, the one
# C++ host file). KDA_GLOO=0 builds without it (then a world size > 1 on CPU is an error).
KDA_GLOO ?= $(if $(wildcard /usr/include/gloo/transport/tcp/device.h),1,0)
ifeq ($(KDA_GLOO),1)
  CXX      ?= g++
  CFLAGS   += -DKDA_HAVE_GLOO=1
  CC_OBJ   := $(BUILD)/src/dist/gloo_shim.o
  LDLIBS   += -lgloo -lstdc++
endif

# NCCL (GPU ranks): NCCL_HOME, else the CUDA toolkit, else the PyPI wheel (nvidia-nccl-cu*) of a
# Python next to the toolkit. Without it a GPU world size > 1 is an error.
ifeq ($(USE_CUDA),1)
  NCCL_PROBE := $(NCCL_HOME) $(CUDA_HOME) \
                $(patsubst %/include/nccl.h,%,$(wildcard /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/include/nccl.h)) \
                $(patsubst %/include/nccl.h,%,$(wildcard /usr/local/lib/python3*/dist-packages/nvidia/nccl/include/nccl.h))
  NCCL_DIR   := $(firstword $(foreach d,$(NCCL_PROBE),$(if $(wildcard $(d)/include/nccl.h),$(d))))
  NCCL_LIB   := $(firstword $(wildcard $(NCCL_DIR)/lib64/libnccl.so $(NCCL_DIR)/lib/libnccl.so \
                  $(NCCL_DIR)/lib64/libnccl.so.2 $(NCCL_DIR)/lib/libnccl.so.2))
  ifneq ($(NCCL_LIB),)
    CFLAGS  += -DKDA_HAVE_NCCL=1 -I$(NCCL_DIR)/include
    NVFLAGS += -DKDA_HAVE_NCCL=1
    LDLIBS  += $(NCCL_LIB) -Wl,-rpath,$(dir $(NCCL_LIB))
  endif
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ) $(CC_OBJ)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
# The GPU benchmarks' C drivers (bench/kda_kernel/*.c: run on the GPU machine by its scripts)
# are compiled and linked by `make test` on a CUDA build, so an API change cannot leave them
# broken until the next device call.
BENCH_BIN := $(if $(CU_OBJ),$(patsubst bench/kda_kernel/%.c,$(BUILD)/bench/%,$(sort $(wildcard bench/kda_kernel/*.c))))

.PHONY: all test test-san test-gpu check-refs demo deps deps-check fuzz format clean FORCE
all: $(BUILD)/kda $(BUILD)/kda_test
FORCE:
$(BUILD)/src/core/version.o: CFLAGS += $(VERSION_FLAGS)
$(BUILD)/src/core/version.o: FORCE

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $(OPT) -g -Wall -Wextra $(WERROR) -Isrc -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/tests/%.o: CFLAGS += -Itests

$(BUILD)/libkda.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kda: $(BUILD)/src/cli/main.o $(BUILD)/libkda.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kda_test: $(TEST_OBJ) $(BUILD)/libkda.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: bench/kda_kernel/%.c $(BUILD)/libkda.a | deps-check
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkda.a $(LDFLAGS) $(LDLIBS)

# A fresh machine: one line naming what is missing instead of a wall of compiler errors
# (checked before any object is compiled: an order-only prerequisite).
$(LIB_OBJ) $(TEST_OBJ) $(BUILD)/src/cli/main.o: | deps-check
deps-check:
	@printf '#include <yaml.h>\n#include <zstd.h>\n#include <zlib.h>\n#include <snappy-c.h>\n#include <cblas.h>\n' | \
	  $(CC) $(filter -I%,$(CFLAGS)) -E -x c - >/dev/null 2>&1 || \
	  { echo "kda: build dependencies missing (libyaml, zstd, zlib, snappy, OpenBLAS headers): run 'make deps'"; exit 1; }

test: all $(BENCH_BIN) check-refs
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} KDA_BIN=./$(BUILD)/kda ./$(BUILD)/kda_test $(TESTS)

# The CPU suite under AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer, in its own
# build dir; any UBSan finding fails the run (halt_on_error), a leak fails the process that has
# it (the test binary, or a `kda` child of the CLI tests). docs/reliability.md: ~9 min on 2 cores.
SAN_BUILD ?= build-asan
test-san:
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
	  $(MAKE) test BUILD=$(SAN_BUILD) OPT=-O1 SAN=address,undefined KDA_CUDA=0

test-gpu: all
	KDA_BIN=./$(BUILD)/kda ./$(BUILD)/kda_test --gpu $(TESTS)

check-refs:
	python3 tools/check_spec_refs.py --self-test
	python3 tools/check_spec_refs.py
	python3 bench/parity/spread.py --self-test
	python3 bench/train_throughput/report.py --self-test

deps:
	./tools/install-deps.sh

demo: deps
	$(MAKE) -j$$(nproc) all
	./tools/demo.sh

# libFuzzer targets: one per parser, each fuzz/fuzz_<name>.c, linked against a sanitized build
# of the library (objects built once, incrementally, into $(BUILD)/fuzz/).
FUZZ_SRC    := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BIN    := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_OBJ    := $(LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_CFLAGS := -std=c11 -O1 -g -D_GNU_SOURCE -Isrc -fopenmp -MMD -MP
FUZZ_SAN    := address,undefined
fuzz: $(FUZZ_BIN)
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,$(FUZZ_SAN) -c $< -o $@
$(BUILD)/fuzz/libkda_fuzz.a: $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/fuzz/%: fuzz/%.c $(BUILD)/fuzz/libkda_fuzz.a
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,$(FUZZ_SAN) -o $@ $< $(BUILD)/fuzz/libkda_fuzz.a \
	  -lopenblas -lzstd -lz -lsnappy -lyaml -lm -lpthread

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(CC_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/src/cli/main.d $(FUZZ_OBJ:.o=.d) $(BENCH_BIN:=.d)
