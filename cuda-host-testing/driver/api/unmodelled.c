/*
 * unmodelled.c - every function a CUDA 13.5 driver exports that this driver does not model
 * (unmodelled.def: exports.txt, generated from the headers, less entries.def): each is exported
 * under its name and reachable through cuGetProcAddress, so that a caller that resolves it finds
 * it, as on the real driver; called, it answers CUDA_ERROR_NOT_SUPPORTED, is counted (by its
 * name, cuswCallCount, and with all the others, cuswUnmodelledCalls), and is named in the
 * driver's log the first time.
 *
 * Each is defined without parameters: it reads none, and on the ABIs this driver is built for
 * (System V x86-64 and AArch64, where the caller passes arguments in registers and on a stack it
 * owns and cleans up) a callee that reads none of them may be called with any.
 */
#include "internal.h"

#define UNMODELLED(base, version, name)                                                          \
    CUSW_EXPORT CUresult name(void)                                                              \
    {                                                                                            \
        CUSW_ENTRY();                                                                            \
        static atomic_bool logged;                                                               \
        return cusw_unmodelled_call(__func__, &logged);                                          \
    }
#define UNMODELLED_TWIN(base, version, name, twin)                                               \
    UNMODELLED(base, version, name)                                                              \
    UNMODELLED(base, version, twin)
#include "unmodelled.def"
#undef UNMODELLED
#undef UNMODELLED_TWIN
