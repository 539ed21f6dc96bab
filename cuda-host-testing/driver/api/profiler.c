/*
 * profiler.c - Profiler Control: cuProfilerStart and cuProfilerStop. There is no profiler to
 * start: each answers success for the current context, as the real driver does where no profiling
 * tool is attached, and starting or stopping twice is no error (as documented since CUDA 5.0).
 */
#include "internal.h"

static CUresult current_context(void)
{
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    CUresult rc = cusw_ctx_current(&c);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuProfilerStart(void)
{
    CUSW_INIT_ENTRY();
    return current_context();
}

CUSW_EXPORT CUresult cuProfilerStop(void)
{
    CUSW_INIT_ENTRY();
    return current_context();
}
