/*
 * user_objects.c - Graph Management, user objects: cuUserObjectCreate, cuUserObjectRetain,
 * cuUserObjectRelease, cuGraphRetainUserObject, cuGraphReleaseUserObject. Who owns which
 * references, and where destructors run, is model/user_object.c's.
 */
#include "internal.h"

CUSW_EXPORT CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                        unsigned int initialRefcount, unsigned int flags)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (object_out == NULL || destroy == NULL || initialRefcount == 0 ||
        flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_user_object *o = cusw_user_object_new(ptr, destroy, initialRefcount);
    if (o == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        *object_out = (CUuserObject)o->handle;
    cusw_lock_release();
    return rc;
}

/* The application's retain (`retain`) or release of `count` references. */
static CUresult retain_or_release(CUuserObject object, unsigned int count, bool retain)
{
    if (count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    CUresult rc = CUDA_SUCCESS;
    /* Releasing more than exists would take references owned by graphs: refuse. */
    if (o == NULL || (!retain && count > o->refs))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (retain)
        cusw_user_object_retain(o, count);
    else
        cusw_user_object_release(o, count, CUSW_DESTROY_INLINE);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    CUSW_INIT_ENTRY();
    return retain_or_release(object, count, true);
}

CUSW_EXPORT CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    CUSW_INIT_ENTRY();
    return retain_or_release(object, count, false);
}

CUSW_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object,
                                             unsigned int count, unsigned int flags)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (count == 0 || (flags & ~(unsigned int)CU_GRAPH_USER_OBJECT_MOVE) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = cusw_handle_get((uintptr_t)graph, CUSW_KIND_GRAPH);
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    bool move = (flags & CU_GRAPH_USER_OBJECT_MOVE) != 0;
    if (g == NULL || o == NULL || (move && count > o->refs))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!cusw_urefs_add(&g->urefs, o, count))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!move)
        cusw_user_object_retain(o, count); /* new references; a move re-labels the caller's */
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object,
                                              unsigned int count)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = cusw_handle_get((uintptr_t)graph, CUSW_KIND_GRAPH);
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    if (g == NULL || o == NULL || !cusw_urefs_take(&g->urefs, o, count))
        rc = CUDA_ERROR_INVALID_VALUE; /* the graph does not hold that many */
    else
        cusw_user_object_release(o, count, CUSW_DESTROY_INLINE);
    cusw_lock_release();
    return rc;
}
