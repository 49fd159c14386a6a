// version.h - what kda.c build this is: version, git commit, CUDA architectures, NCCL.
#ifndef KDA_VERSION_H
#define KDA_VERSION_H

#define KDA_VERSION_STRING "0.2.0"

// The release version ("0.2.0"). Static string.
const char *kda_version(void);
// `git describe --always --dirty` of the tree the binary was built from ("unknown" outside a
// git checkout). Static string.
const char *kda_commit(void);
// The CUDA architectures compiled in ("sm_90a, sm_90"), or "none (CPU build)". Static string.
const char *kda_cuda_archs(void);
// NCCL the build links, "NCCL x.y.z", or "none". Static string.
const char *kda_nccl(void);

#endif
