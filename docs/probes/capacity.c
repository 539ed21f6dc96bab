// Probe: can host functions be enqueued behind an unreleased stream wait? See README.md.
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include <time.h>
static atomic_ulong enqueued, ran;
static volatile unsigned *flag;
static void CUDA_CB hf(void *p) { (void)p; atomic_fetch_add(&ran, 1); }
static void *watchdog(void *p) { (void)p; sleep(3); printf("watchdog: %lu enqueued after 3 s, %lu ran; opening the gate\n", atomic_load(&enqueued), atomic_load(&ran)); fflush(stdout); *flag = 1; __sync_synchronize(); return NULL; }
int main(void) {
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  void *h; if (cuMemHostAlloc(&h, 4, CU_MEMHOSTALLOC_DEVICEMAP)) { printf("alloc failed\n"); return 1; }
  flag = h; *flag = 0; CUdeviceptr dp; cuMemHostGetDevicePointer(&dp, h, 0);
  CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUresult r = cuStreamWaitValue32(s, dp, 1, CU_STREAM_WAIT_VALUE_GEQ); printf("wait value -> %d\n", r);
  pthread_t t; pthread_create(&t, NULL, watchdog, NULL);
  for (int i = 0; i < 100000; i++) { r = cuLaunchHostFunc(s, hf, NULL); if (r) { printf("launch %d -> %d\n", i, r); break; } atomic_fetch_add(&enqueued, 1); }
  printf("loop done: %lu enqueued\n", atomic_load(&enqueued));
  cuStreamSynchronize(s); printf("ran %lu\n", atomic_load(&ran)); pthread_join(t, NULL); return 0;
}
