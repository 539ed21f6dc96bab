/*
 * cudasw.h - the subset of NVIDIA's CUDA 13.5 driver API (cuda.h) that the software driver
 * implements, declared by hand so the library builds on machines without CUDA headers.
 *
 * Every name, value, struct layout and signature below is copied from CUDA 13.5's cuda.h; the
 * function names are the ones cuda.h's renaming macros expand to (cuMemAlloc -> cuMemAlloc_v2,
 * cuStreamGetCaptureInfo -> cuStreamGetCaptureInfo_v3, ...), which are the symbols a real
 * libcuda.so.1 exports. Enums that are only partly used list only the members used, with
 * cuda.h's explicit values. The software driver's own test-control functions (cusw*) are
 * declared at the end.
 */
#ifndef CUDASW_H
#define CUDASW_H

#include <stddef.h>
#include <stdint.h>

#include "stand_in.h"

#define CUDA_VERSION 13050

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUuserObject_st *CUuserObject;
typedef struct CUgreenCtx_st *CUgreenCtx;

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

/* cuCtxCreate_v4's parameters. Execution affinity and graphics interop are not implemented:
 * their structs are declared only. */
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCigParam_st CUctxCigParam;
typedef struct CUctxCreateParams_st {
    CUexecAffinityParam *execAffinityParams;
    int numExecAffinityParams;
    CUctxCigParam *cigParams;
} CUctxCreateParams;

#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef enum cudaError_enum {
    CUDA_SUCCESS                              = 0,
    CUDA_ERROR_INVALID_VALUE                  = 1,
    CUDA_ERROR_OUT_OF_MEMORY                  = 2,
    CUDA_ERROR_NOT_INITIALIZED                = 3,
    CUDA_ERROR_DEINITIALIZED                  = 4,
    CUDA_ERROR_PROFILER_DISABLED              = 5,
    CUDA_ERROR_PROFILER_NOT_INITIALIZED       = 6,
    CUDA_ERROR_PROFILER_ALREADY_STARTED       = 7,
    CUDA_ERROR_PROFILER_ALREADY_STOPPED       = 8,
    CUDA_ERROR_STUB_LIBRARY                   = 34,
    CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER     = 36,
    CUDA_ERROR_DEVICE_UNAVAILABLE             = 46,
    CUDA_ERROR_MULTICAST_RESOURCE_FULL        = 47,
    CUDA_ERROR_NO_DEVICE                      = 100,
    CUDA_ERROR_INVALID_DEVICE                 = 101,
    CUDA_ERROR_DEVICE_NOT_LICENSED            = 102,
    CUDA_ERROR_INVALID_IMAGE                  = 200,
    CUDA_ERROR_INVALID_CONTEXT                = 201,
    CUDA_ERROR_CONTEXT_ALREADY_CURRENT        = 202,
    CUDA_ERROR_MAP_FAILED                     = 205,
    CUDA_ERROR_UNMAP_FAILED                   = 206,
    CUDA_ERROR_ARRAY_IS_MAPPED                = 207,
    CUDA_ERROR_ALREADY_MAPPED                 = 208,
    CUDA_ERROR_NO_BINARY_FOR_GPU              = 209,
    CUDA_ERROR_ALREADY_ACQUIRED               = 210,
    CUDA_ERROR_NOT_MAPPED                     = 211,
    CUDA_ERROR_NOT_MAPPED_AS_ARRAY            = 212,
    CUDA_ERROR_NOT_MAPPED_AS_POINTER          = 213,
    CUDA_ERROR_ECC_UNCORRECTABLE              = 214,
    CUDA_ERROR_UNSUPPORTED_LIMIT              = 215,
    CUDA_ERROR_CONTEXT_ALREADY_IN_USE         = 216,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED        = 217,
    CUDA_ERROR_INVALID_PTX                    = 218,
    CUDA_ERROR_INVALID_GRAPHICS_CONTEXT       = 219,
    CUDA_ERROR_NVLINK_UNCORRECTABLE           = 220,
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND         = 221,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION        = 222,
    CUDA_ERROR_JIT_COMPILATION_DISABLED       = 223,
    CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY      = 224,
    CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC       = 225,
    CUDA_ERROR_CONTAINED                      = 226,
    CUDA_ERROR_INSUFFICIENT_LOADER_VERSION    = 227,
    CUDA_ERROR_INVALID_SOURCE                 = 300,
    CUDA_ERROR_FILE_NOT_FOUND                 = 301,
    CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302,
    CUDA_ERROR_SHARED_OBJECT_INIT_FAILED      = 303,
    CUDA_ERROR_OPERATING_SYSTEM               = 304,
    CUDA_ERROR_INVALID_HANDLE                 = 400,
    CUDA_ERROR_ILLEGAL_STATE                  = 401,
    CUDA_ERROR_LOSSY_QUERY                    = 402,
    CUDA_ERROR_NOT_FOUND                      = 500,
    CUDA_ERROR_NOT_READY                      = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS                = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES        = 701,
    CUDA_ERROR_LAUNCH_TIMEOUT                 = 702,
    CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING  = 703,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED    = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED        = 705,
    CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE         = 708,
    CUDA_ERROR_CONTEXT_IS_DESTROYED           = 709,
    CUDA_ERROR_ASSERT                         = 710,
    CUDA_ERROR_TOO_MANY_PEERS                 = 711,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED     = 713,
    CUDA_ERROR_HARDWARE_STACK_ERROR           = 714,
    CUDA_ERROR_ILLEGAL_INSTRUCTION            = 715,
    CUDA_ERROR_MISALIGNED_ADDRESS             = 716,
    CUDA_ERROR_INVALID_ADDRESS_SPACE          = 717,
    CUDA_ERROR_INVALID_PC                     = 718,
    CUDA_ERROR_LAUNCH_FAILED                  = 719,
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE   = 720,
    CUDA_ERROR_TENSOR_MEMORY_LEAK             = 721,
    CUDA_ERROR_NOT_PERMITTED                  = 800,
    CUDA_ERROR_NOT_SUPPORTED                  = 801,
    CUDA_ERROR_SYSTEM_NOT_READY               = 802,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH         = 803,
    CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
    CUDA_ERROR_MPS_CONNECTION_FAILED          = 805,
    CUDA_ERROR_MPS_RPC_FAILURE                = 806,
    CUDA_ERROR_MPS_SERVER_NOT_READY           = 807,
    CUDA_ERROR_MPS_MAX_CLIENTS_REACHED        = 808,
    CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED    = 809,
    CUDA_ERROR_MPS_CLIENT_TERMINATED          = 810,
    CUDA_ERROR_CDP_NOT_SUPPORTED              = 811,
    CUDA_ERROR_CDP_VERSION_MISMATCH           = 812,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED     = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED     = 901,
    CUDA_ERROR_STREAM_CAPTURE_MERGE           = 902,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED       = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED        = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION       = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT        = 906,
    CUDA_ERROR_CAPTURED_EVENT                 = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD    = 908,
    CUDA_ERROR_TIMEOUT                        = 909,
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE      = 910,
    CUDA_ERROR_EXTERNAL_DEVICE                = 911,
    CUDA_ERROR_INVALID_CLUSTER_SIZE           = 912,
    CUDA_ERROR_FUNCTION_NOT_LOADED            = 913,
    CUDA_ERROR_INVALID_RESOURCE_TYPE          = 914,
    CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915,
    CUDA_ERROR_KEY_ROTATION                   = 916,
    CUDA_ERROR_STREAM_DETACHED                = 917,
    CUDA_ERROR_GRAPH_RECAPTURE_FAILURE        = 918,
    CUDA_ERROR_FABRIC_NOT_READY               = 919,
    CUDA_ERROR_UNKNOWN                        = 999
} CUresult;

typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED = 78,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
    CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
    CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID = 85,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
    CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 = 92,
    CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1 = 93,
    CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1 = 94,
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES = 98,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
    CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE = 108,
    CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111,
    CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
    CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122,
    CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR = 123
} CUdevice_attribute;

typedef enum CUctx_flags_enum {
    CU_CTX_SCHED_AUTO           = 0x00,
    CU_CTX_SCHED_SPIN           = 0x01,
    CU_CTX_SCHED_YIELD          = 0x02,
    CU_CTX_SCHED_BLOCKING_SYNC  = 0x04,
    CU_CTX_SCHED_MASK           = 0x07,
    CU_CTX_MAP_HOST             = 0x08,
    CU_CTX_LMEM_RESIZE_TO_MAX   = 0x10,
    CU_CTX_COREDUMP_ENABLE      = 0x20,
    CU_CTX_USER_COREDUMP_ENABLE = 0x40,
    CU_CTX_SYNC_MEMOPS          = 0x80,
    CU_CTX_FLAGS_MASK           = 0xFF
} CUctx_flags;

typedef enum CUlimit_enum {
    CU_LIMIT_STACK_SIZE                       = 0x00,
    CU_LIMIT_PRINTF_FIFO_SIZE                 = 0x01,
    CU_LIMIT_MALLOC_HEAP_SIZE                 = 0x02,
    CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH           = 0x03,
    CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT = 0x04,
    CU_LIMIT_MAX_L2_FETCH_GRANULARITY         = 0x05,
    CU_LIMIT_PERSISTING_L2_CACHE_SIZE         = 0x06,
    CU_LIMIT_SHMEM_SIZE                       = 0x07,
    CU_LIMIT_CIG_ENABLED                      = 0x08,
    CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED       = 0x09,
} CUlimit;

typedef enum CUfunc_cache_enum {
    CU_FUNC_CACHE_PREFER_NONE    = 0x00,
    CU_FUNC_CACHE_PREFER_SHARED  = 0x01,
    CU_FUNC_CACHE_PREFER_L1      = 0x02,
    CU_FUNC_CACHE_PREFER_EQUAL   = 0x03
} CUfunc_cache;

typedef enum CUfunction_attribute_enum {
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
    CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
    CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
    CU_FUNC_ATTRIBUTE_CACHE_MODE_CA = 7,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9,
    CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET = 10,
    CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11,
    CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT = 12,
    CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH = 13,
    CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14,
    CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 15,
    CU_FUNC_ATTRIBUTE_DEVICE_NODE_UPDATE_SUPPORTED = 16,
    CU_FUNC_ATTRIBUTE_SHARED_MEMORY_MODE = 17,
} CUfunction_attribute;

typedef enum CUjit_option_enum {
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
} CUjit_option;

typedef enum CUlibraryOption_enum {
    CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE = 0,
    CU_LIBRARY_BINARY_IS_PRESERVED = 1,
} CUlibraryOption;

typedef size_t (*CUoccupancyB2DSize)(int blockSize);

/* cuLaunchKernelEx's configuration; its attributes are taken and not read (declared only). */
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef enum CUstream_flags_enum {
    CU_STREAM_NON_BLOCKING        = 0x1
} CUstream_flags;

typedef enum CUevent_flags_enum {
    CU_EVENT_BLOCKING_SYNC  = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
} CUevent_flags;

typedef enum CUevent_wait_flags_enum {
    CU_EVENT_WAIT_EXTERNAL = 0x1
} CUevent_wait_flags;

typedef enum CUstreamWaitValue_flags_enum {
    CU_STREAM_WAIT_VALUE_GEQ   = 0x0,
    CU_STREAM_WAIT_VALUE_EQ    = 0x1,
    CU_STREAM_WAIT_VALUE_AND   = 0x2,
    CU_STREAM_WAIT_VALUE_NOR   = 0x3,
    CU_STREAM_WAIT_VALUE_FLUSH = 1<<30
} CUstreamWaitValue_flags;

typedef enum CUstreamWriteValue_flags_enum {
    CU_STREAM_WRITE_VALUE_DEFAULT           = 0x0,
} CUstreamWriteValue_flags;

typedef enum CUstreamBatchMemOpType_enum {
    CU_STREAM_MEM_OP_WAIT_VALUE_32  = 1,
    CU_STREAM_MEM_OP_WRITE_VALUE_32 = 2,
    CU_STREAM_MEM_OP_WAIT_VALUE_64  = 4,
    CU_STREAM_MEM_OP_WRITE_VALUE_64 = 5
} CUstreamBatchMemOpType;

typedef union CUstreamBatchMemOpParams_union {
    CUstreamBatchMemOpType operation;
    struct CUstreamMemOpWaitValueParams_st {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        union {
            cuuint32_t value;
            cuuint64_t value64;
        };
        unsigned int flags;
        CUdeviceptr alias;
    } waitValue;
    struct CUstreamMemOpWriteValueParams_st {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        union {
            cuuint32_t value;
            cuuint64_t value64;
        };
        unsigned int flags;
        CUdeviceptr alias;
    } writeValue;
    cuuint64_t pad[6];
} CUstreamBatchMemOpParams_v1;
typedef CUstreamBatchMemOpParams_v1 CUstreamBatchMemOpParams;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE        = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE      = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL       = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED      = 2
} CUstreamCaptureMode;

typedef enum CUgraphNodeType_enum {
    CU_GRAPH_NODE_TYPE_KERNEL           = 0,
    CU_GRAPH_NODE_TYPE_MEMCPY           = 1,
    CU_GRAPH_NODE_TYPE_MEMSET           = 2,
    CU_GRAPH_NODE_TYPE_HOST             = 3,
    CU_GRAPH_NODE_TYPE_GRAPH            = 4,
    CU_GRAPH_NODE_TYPE_EMPTY            = 5,
    CU_GRAPH_NODE_TYPE_EVENT_RECORD     = 7,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC        = 10,
    CU_GRAPH_NODE_TYPE_MEM_FREE         = 11,
    CU_GRAPH_NODE_TYPE_BATCH_MEM_OP     = 12,
} CUgraphNodeType;

typedef enum CUgraphInstantiate_flags_enum {
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH  = 1
  , CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY    = 8
} CUgraphInstantiate_flags;

typedef enum CUuserObject_flags_enum {
    CU_USER_OBJECT_NO_DESTRUCTOR_SYNC = 1
} CUuserObject_flags;

typedef enum CUuserObjectRetain_flags_enum {
    CU_GRAPH_USER_OBJECT_MOVE = 1
} CUuserObjectRetain_flags;

typedef enum CUhostTaskSyncMode_enum {
    CU_HOST_TASK_BLOCKING = 0x0,
    CU_HOST_TASK_SPINWAIT = 0x1,
} CUhostTaskSyncMode;

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS                = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND       = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
}  CUdriverProcAddressQueryResult;

typedef enum CUdriverProcAddress_flags_enum {
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
} CUdriverProcAddress_flags;

#define CU_MEMHOSTALLOC_PORTABLE        0x01
#define CU_MEMHOSTALLOC_DEVICEMAP       0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED   0x04

typedef struct CUmemPoolHandle_st *CUmemoryPool;

typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH,
    CU_MEMPOOL_ATTR_ALLOCATION_TYPE,
    CU_MEMPOOL_ATTR_EXPORT_HANDLE_TYPES,
    CU_MEMPOOL_ATTR_LOCATION_ID,
    CU_MEMPOOL_ATTR_LOCATION_TYPE,
    CU_MEMPOOL_ATTR_MAX_POOL_SIZE,
    CU_MEMPOOL_ATTR_HW_DECOMPRESS_ENABLED,
    CU_MEMPOOL_ATTR_LOCALITY_DOMAIN_ID,
} CUmemPool_attribute;

typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID                = 0x0,
    CU_MEM_LOCATION_TYPE_DEVICE                 = 0x1,
    CU_MEM_LOCATION_TYPE_HOST                   = 0x2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA              = 0x3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT      = 0x4,
    CU_MEM_LOCATION_TYPE_MAX                    = 0x7FFFFFFF
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
    CU_MEM_ALLOCATION_TYPE_PINNED  = 0x1,
    CU_MEM_ALLOCATION_TYPE_MANAGED = 0x2,
    CU_MEM_ALLOCATION_TYPE_MAX     = 0x7FFFFFFF
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE = 0x0,
    CU_MEM_HANDLE_TYPE_MAX  = 0x7FFFFFFF
} CUmemAllocationHandleType;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    union {
        int id;
        struct {
            unsigned char deviceId;
            unsigned char localityDomainId;
        } localized;
    };
} CUmemLocation_v1;
typedef CUmemLocation_v1 CUmemLocation;

typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char gpuDirectRDMACapable;
    unsigned char reserved[53];
} CUmemPoolProps_v1;
typedef CUmemPoolProps_v1 CUmemPoolProps;

typedef enum CUmemAttach_flags_enum {
    CU_MEM_ATTACH_GLOBAL = 0x1,
    CU_MEM_ATTACH_HOST   = 0x2,
    CU_MEM_ATTACH_SINGLE = 0x4
} CUmemAttach_flags;

typedef enum CUmem_advise_enum {
    CU_MEM_ADVISE_SET_READ_MOSTLY          = 1,
    CU_MEM_ADVISE_UNSET_READ_MOSTLY        = 2,
    CU_MEM_ADVISE_SET_PREFERRED_LOCATION   = 3,
    CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION = 4,
    CU_MEM_ADVISE_SET_ACCESSED_BY          = 5,
    CU_MEM_ADVISE_UNSET_ACCESSED_BY        = 6
} CUmem_advise;

typedef void (*CUhostFn)(void *userData);
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);

typedef struct CUDA_HOST_NODE_PARAMS_st {
    CUhostFn fn;
    void* userData;
} CUDA_HOST_NODE_PARAMS_v1;
typedef CUDA_HOST_NODE_PARAMS_v1 CUDA_HOST_NODE_PARAMS;

typedef struct CUDA_BATCH_MEM_OP_NODE_PARAMS_v1_st {
    CUcontext ctx;
    unsigned int count;
    CUstreamBatchMemOpParams *paramArray;
    unsigned int flags;
} CUDA_BATCH_MEM_OP_NODE_PARAMS_v1;
typedef CUDA_BATCH_MEM_OP_NODE_PARAMS_v1 CUDA_BATCH_MEM_OP_NODE_PARAMS;

typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;

typedef enum CUgraphExecUpdateResult_enum {
    CU_GRAPH_EXEC_UPDATE_SUCCESS                     = 0x0,
    CU_GRAPH_EXEC_UPDATE_ERROR                       = 0x1,
    CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED      = 0x2,
    CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED     = 0x3,
    CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED      = 0x4,
    CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED    = 0x5,
    CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED         = 0x6,
    CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE = 0x7,
    CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED    = 0x8
} CUgraphExecUpdateResult;

typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo_v1;
typedef CUgraphExecUpdateResultInfo_v1 CUgraphExecUpdateResultInfo;

/* What a recapture's callback is given (cuStreamBeginRecaptureToGraph): of CUgraphNodeParams'
 * union, only the members of the node types whose parameters the driver reports. */
typedef struct CUDA_HOST_NODE_PARAMS_v2_st {
    CUhostFn fn;
    void* userData;
    unsigned int syncMode;
    union {
        CUcontext ctx;
        CUgreenCtx gCtx;
    };
} CUDA_HOST_NODE_PARAMS_v2;

typedef struct CUDA_BATCH_MEM_OP_NODE_PARAMS_v2_st {
    CUcontext ctx;
    unsigned int count;
    CUstreamBatchMemOpParams *paramArray;
    unsigned int flags;
} CUDA_BATCH_MEM_OP_NODE_PARAMS_v2;

typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_HOST_NODE_PARAMS_v2 host;
        CUDA_BATCH_MEM_OP_NODE_PARAMS_v2 memOp;
        char asBytes[232];
    };
    long long reserved2;
} CUgraphNodeParams;

typedef enum CUgraphRecaptureStatus_enum {
    CU_GRAPH_RECAPTURE_ELIGIBLE_FOR_UPDATE = 0,
    CU_GRAPH_RECAPTURE_INELIGIBLE_FOR_UPDATE = 1,
    CU_GRAPH_RECAPTURE_ERROR = 2,
} CUgraphRecaptureStatus;

typedef CUresult (*CUgraphRecaptureCallback)(void *data, CUgraphNode node,
                                             const CUgraphNodeParams *originalParams,
                                             const CUgraphNodeParams *recaptureParams,
                                             CUgraphRecaptureStatus status);

/* ---- Test-control API of the software driver (not part of CUDA) ---------------------------- */

/* The next `count` calls of entry `entry` made from the calling thread return `code` and do
 * nothing else. `entry` is a base name ("cuLaunchHostFunc", which also covers its _ptsz
 * twin) or an exported name ("cuMemAlloc_v2"). */
CUresult cuswFailNextCalls(const char *entry, unsigned int count, CUresult code);
/* Same, for calls from any thread. */
CUresult cuswFailNextCallsAnyThread(const char *entry, unsigned int count, CUresult code);
/* Put `ctx` into the sticky error `code` now, as a faulting kernel would. */
CUresult cuswSetStickyError(CUcontext ctx, CUresult code);
/* Enqueue on `stream` a stand-in for a faulting kernel: when the stream reaches it, the stream's
 * context enters the sticky error `code`. */
CUresult cuswLaunchFault(CUstream stream, CUresult code);
/* Enqueue on `stream` a stand-in for a long kernel: the worker sleeps `microseconds`. */
CUresult cuswLaunchSleep(CUstream stream, unsigned int microseconds);
/* From now on every stream wait on memory reads its word once every `microseconds` (0 restores the
 * default: a backoff from 1 us to 1 ms between reads): plays a device slow to see a host's write,
 * holding open the window between the write and the stream's seeing it. */
CUresult cuswSetWaitPollInterval(unsigned int microseconds);
/* Report `version` from cuDriverGetVersion and hide from cuGetProcAddress every ABI newer than
 * it; 0 restores the default. */
CUresult cuswSetDriverVersion(int version);
/* Make every device answer `*value` from cuDeviceGetAttribute for `attribute` (any
 * CUdevice_attribute; CUDA_ERROR_INVALID_VALUE for another number); NULL restores its own value
 * (an H200's, or what CUSW_DEVICE_ATTRIBUTES set). A test plays another device with it: an older
 * one, a narrow one without 64-bit stream memory operations, one without memory pools; where the
 * driver models what the attribute says, it follows (h200.def). */
CUresult cuswOverrideDeviceAttribute(CUdevice_attribute attribute, const int *value);
/* How many user-object destructors have run, and how many user objects are alive. */
CUresult cuswUserObjectStats(unsigned long long *destroyed, unsigned long long *alive);
/* How far the stream whose cuStreamGetId answer is `id` got: how many operations were enqueued
 * on it, and how many it completed. An operation counts as completed before what it holds is let
 * go (a graph launch's references to user objects among it), so a destructor that a launch's end
 * makes due finds the launch counted. Operations are numbered from 1 in the order enqueued: the
 * operation enqueued after `*enqueued` was read is number `*enqueued + 1` or later.
 * CUDA_ERROR_NOT_FOUND once the stream is gone: destroyed, and done with all of it. */
CUresult cuswStreamOperations(unsigned long long id, unsigned long long *enqueued,
                              unsigned long long *completed);
/* The next `count` calls of `entry` (from any thread) sleep `microseconds` before doing anything,
 * injected failures included: a test holds a race's window open with it. `count` 0 disarms the
 * delays armed for `entry`. */
CUresult cuswDelayNextCalls(const char *entry, unsigned int count, unsigned int microseconds);
/* How many calls named a stream, event, graph or other handle after it was destroyed (the real
 * driver may crash on those; this one answers an error and counts them). */
CUresult cuswStaleHandleUses(unsigned long long *count);

/* How many times stream work (a copy, a set, a stream memory operation) touched memory of the
 * stream-ordered allocator before the point of its allocation or after the point of its free
 * (each failed its context with CUDA_ERROR_ILLEGAL_ADDRESS), since load. */
CUresult cuswStreamOrderedMemoryMisuses(unsigned long long *count);

/* What is alive in the driver now, process-wide, for leak checks. The caller sets `size` to
 * sizeof(struct cuswLiveCounts) as it was compiled; the driver fills only the members that fit
 * in that size and sets `size` to the bytes it filled. Members are only ever added at the end, so
 * a caller built against an older (shorter) struct keeps working. */
struct cuswLiveCounts {
    size_t size;
    unsigned long long streams;            /* made by cuStreamCreate, not destroyed */
    unsigned long long events;             /* created, not destroyed */
    unsigned long long graphs;             /* created, cloned or captured, not destroyed; a
                                              capture under way counts its graph */
    unsigned long long graph_execs;        /* instantiated, not destroyed */
    unsigned long long user_objects;       /* whose destructor has not run yet */
    unsigned long long host_allocations;   /* cuMemHostAlloc, not freed */
    unsigned long long device_allocations; /* cuMemAlloc, not freed */
    unsigned long long pending_host_functions; /* host functions and stream callbacks enqueued
                                                  (also as nodes of a graph launch) that have
                                                  not finished running, or been skipped because
                                                  of a sticky error */
};
/* Modules are not counted. */
CUresult cuswLiveObjects(struct cuswLiveCounts *counts);
/* How many injected failures of `entry`, spelt as it was armed, are still to come for calls from
 * the calling thread: those cuswFailNextCalls armed on this thread plus those
 * cuswFailNextCallsAnyThread armed. CUDA_ERROR_NOT_FOUND for an unknown entry name. */
CUresult cuswArmedFailures(const char *entry, unsigned int *remaining);
/* How many delayed calls of `entry`, spelt as it was armed, are still to come: a call takes its
 * delay (and leaves this count) as it enters, before it sleeps, so 0 after an arming means every
 * delayed call is held or done. CUDA_ERROR_NOT_FOUND for an unknown entry name. */
CUresult cuswArmedDelays(const char *entry, unsigned int *remaining);
/* How many times `entry` was called since the library was loaded, by any thread, including calls
 * an injected failure answered. A base name ("cuLaunchHostFunc") counts every ABI and per-thread
 * twin of it; an exported name ("cuLaunchHostFunc_ptsz") only that function.
 * CUDA_ERROR_NOT_FOUND for an unknown entry name. */
CUresult cuswCallCount(const char *entry, unsigned long long *count);

/* How many calls, since the library was loaded, by any thread, of the entry points this driver
 * exports without modelling them (each answers CUDA_ERROR_NOT_SUPPORTED and is named in the
 * driver's log the first time), calls an injected failure answered included. */
CUresult cuswUnmodelledCalls(unsigned long long *count);

/* How many host functions were launched through cuLaunchHostFunc_v2 (and its _ptsz form) with
 * `syncMode` (CU_HOST_TASK_BLOCKING or CU_HOST_TASK_SPINWAIT) since load, by any thread, calls an
 * injected failure answered excluded. CUDA_ERROR_INVALID_VALUE for another mode. */
CUresult cuswHostTaskSyncModeLaunches(unsigned int syncMode, unsigned long long *count);

/* The next call of `entry`, from any thread, first begins a capture of `stream` in `mode`, as
 * cuStreamBeginCapture_v2 on the calling thread would (its answer is not reported), then does its
 * work: other code's capture begun between two calls of an operation, on purpose. Arming again
 * replaces the armed capture; a NULL `entry` disarms it. CUDA_ERROR_NOT_FOUND for an unknown entry
 * name. */
CUresult cuswBeginCaptureAtNextCall(const char *entry, CUstream stream, CUstreamCaptureMode mode);
/* As cuswBeginCaptureAtNextCall, at the call of `entry` after `calls_before` others, from any
 * thread, which go as usual: a capture begun between an operation's later calls (its second look
 * whether the stream captures, after the work it enqueued). */
CUresult cuswBeginCaptureAtCall(const char *entry, unsigned int calls_before, CUstream stream,
                                CUstreamCaptureMode mode);

/* Registers `stand_in` for launches of kernels named `kernel`, as their PTX names them (NULL
 * removes it; a second registration replaces the first): from then on a launch runs it, in its
 * stream's order on the stream's worker, with `user_data` (stand_in.h). A library named in
 * CUSW_STAND_INS registers its own through the same function. */
CUresult cuswRegisterStandIn(const char *kernel, cuswStandIn stand_in, void *user_data);
/* How many launches, since load, found no stand-in for their kernel (each did nothing; the first
 * of each kernel is named in the log). */
CUresult cuswKernelsWithoutStandIn(unsigned long long *count);

/* A context of device `dev` beside its primary context, with its own legacy and per-thread
 * streams, events, allocations and sticky error: a test fails it on purpose while others go on on
 * the primary context. CUDA_ERROR_OUT_OF_MEMORY beyond 64 alive at once. */
CUresult cuswFreshContextCreate(CUcontext *pctx, CUdevice dev);
/* Destroys a fresh context as a primary context's last release does: its handle is invalid at
 * once, its streams drain (host functions run unless it failed) and are destroyed, then its events
 * and allocations. Must not be called from its own host functions or callbacks. A primary
 * context's handle answers CUDA_ERROR_INVALID_CONTEXT. See api/fresh_contexts.c. */
CUresult cuswFreshContextDestroy(CUcontext ctx);

#endif /* CUDASW_H */
