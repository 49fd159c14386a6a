// version.c - build identification (version.h). KDA_COMMIT, KDA_CUDA_ARCHS and KDA_NCCL_VERSION
// come from the Makefile (this file is recompiled on every build so the commit is current).
#include "core/version.h"

#ifndef KDA_COMMIT
#define KDA_COMMIT "unknown"
#endif
#ifndef KDA_CUDA_ARCHS
#define KDA_CUDA_ARCHS "none (CPU build)"
#endif
#ifndef KDA_NCCL_VERSION
#define KDA_NCCL_VERSION "none"
#endif

const char *kda_version(void) {
    return KDA_VERSION_STRING;
}

const char *kda_commit(void) {
    return KDA_COMMIT;
}

const char *kda_cuda_archs(void) {
    return KDA_CUDA_ARCHS;
}

const char *kda_nccl(void) {
    return KDA_NCCL_VERSION;
}
