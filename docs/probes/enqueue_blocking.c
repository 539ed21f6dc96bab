// Which enqueues block behind an unreleased stream wait.
// For each case: a fresh non-blocking stream waits on a word of mapped host memory
// (cuStreamWaitValue32), then a host function, a stream callback, an event record or nothing is
// enqueued, then the operation under test. Another thread releases the wait after RELEASE_MS;
// the time the operation's enqueue took tells whether it waited for the release.
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RELEASE_MS 400
static double now_ms(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static void CUDA_CB host_fn(void *p) { (void)p; }
static void CUDA_CB callback(CUstream s, CUresult r, void *p) { (void)s; (void)r; (void)p; }
static volatile unsigned *gate;
static void *release(void *p) { (void)p; usleep(RELEASE_MS * 1000); *gate = 1; __sync_synchronize(); return NULL; }

enum { NONE, HOST_FUNC, ADD_CALLBACK, EVENT };
static const char *before_names[] = {"nothing", "cuLaunchHostFunc", "cuStreamAddCallback", "cuEventRecord"};

int main(void) {
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  void *mapped; cuMemHostAlloc(&mapped, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP); memset(mapped, 0, 1 << 20);
  CUdeviceptr mapped_d; cuMemHostGetDevicePointer(&mapped_d, mapped, 0);
  void *pinned; cuMemAllocHost(&pinned, 1 << 20);
  void *pageable = malloc(1 << 20); memset(pageable, 0, 1 << 20);
  CUdeviceptr device; cuMemAlloc(&device, 1 << 20);
  CUdeviceptr managed; cuMemAllocManaged(&managed, 1 << 20, CU_MEM_ATTACH_GLOBAL);
  CUevent event; cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
  const char *ops[] = {
    "DtoD mapped->mapped 4 B", "DtoD mapped->mapped 64 KiB", "DtoD device->device 4 B", "DtoD device->device 64 KiB",
    "DtoD mapped->device 4 B", "DtoD device->mapped 4 B", "HtoD pinned->device 4 B", "HtoD pinned->device 64 KiB",
    "DtoH device->pinned 4 B", "HtoD pageable->device 4 B", "HtoD pageable->device 64 KiB", "DtoH device->pageable 4 B",
    "cuMemcpyAsync mapped->mapped 4 B", "MemsetD32 mapped 1 word", "MemsetD32 device 1 word", "MemsetD8 device 64 KiB",
    "DtoD managed->managed 4 B", "cuLaunchHostFunc", "cuEventRecord", "cuStreamWriteValue32 mapped",
  };
  int n_ops = sizeof ops / sizeof *ops;
  int befores[] = {HOST_FUNC, NONE, ADD_CALLBACK, EVENT};
  for (int b = 0; b < 4; b++) {
    for (int op = 0; op < n_ops; op++) {
      gate = (volatile unsigned *)mapped; *gate = 0;
      CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      CUresult r = cuStreamWaitValue32(s, mapped_d, 1, CU_STREAM_WAIT_VALUE_GEQ);
      if (r) { printf("wait -> %d\n", r); return 1; }
      switch (befores[b]) {
        case HOST_FUNC: r = cuLaunchHostFunc(s, host_fn, NULL); break;
        case ADD_CALLBACK: r = cuStreamAddCallback(s, callback, NULL, 0); break;
        case EVENT: r = cuEventRecord(event, s); break;
        default: break;
      }
      if (r) { printf("before -> %d\n", r); return 1; }
      pthread_t t; pthread_create(&t, NULL, release, NULL);
      double start = now_ms();
      switch (op) {
        case 0: r = cuMemcpyDtoDAsync(mapped_d + 4096, mapped_d + 8192, 4, s); break;
        case 1: r = cuMemcpyDtoDAsync(mapped_d + 65536, mapped_d + 131072, 65536, s); break;
        case 2: r = cuMemcpyDtoDAsync(device, device + 4096, 4, s); break;
        case 3: r = cuMemcpyDtoDAsync(device, device + 65536, 65536, s); break;
        case 4: r = cuMemcpyDtoDAsync(device, mapped_d + 4096, 4, s); break;
        case 5: r = cuMemcpyDtoDAsync(mapped_d + 4096, device, 4, s); break;
        case 6: r = cuMemcpyHtoDAsync(device, pinned, 4, s); break;
        case 7: r = cuMemcpyHtoDAsync(device, pinned, 65536, s); break;
        case 8: r = cuMemcpyDtoHAsync(pinned, device, 4, s); break;
        case 9: r = cuMemcpyHtoDAsync(device, pageable, 4, s); break;
        case 10: r = cuMemcpyHtoDAsync(device, pageable, 65536, s); break;
        case 11: r = cuMemcpyDtoHAsync(pageable, device, 4, s); break;
        case 12: r = cuMemcpyAsync(mapped_d + 4096, mapped_d + 8192, 4, s); break;
        case 13: r = cuMemsetD32Async(mapped_d + 4096, 7, 1, s); break;
        case 14: r = cuMemsetD32Async(device, 7, 1, s); break;
        case 15: r = cuMemsetD8Async(device, 7, 65536, s); break;
        case 16: r = cuMemcpyDtoDAsync(managed, managed + 4096, 4, s); break;
        case 17: r = cuLaunchHostFunc(s, host_fn, NULL); break;
        case 18: r = cuEventRecord(event, s); break;
        case 19: r = cuStreamWriteValue32(s, mapped_d + 4096, 5, 0); break;
      }
      double took = now_ms() - start;
      pthread_join(t, NULL);
      CUresult sync = cuStreamSynchronize(s);
      printf("after %-20s %-30s -> %d in %7.2f ms%s (sync %d)\n", before_names[befores[b]], ops[op], r, took,
             took > RELEASE_MS * 0.8 ? "  BLOCKED until the release" : "", sync);
      cuStreamDestroy(s);
    }
  }
  return 0;
}
