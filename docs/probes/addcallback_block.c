// Probe: do enqueues block behind a host function held at a stream wait? See README.md.
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <pthread.h>
#include <unistd.h>
#include <time.h>
static volatile unsigned *flag;
static double t0;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9 - t0; }
static void CUDA_CB hf(void *p) { (void)p; }
static void CUDA_CB cb(CUstream s, CUresult r, void *p) { (void)s; (void)r; (void)p; }
static void *watchdog(void *p) { (void)p; sleep(2); printf("  %.3f watchdog opens the gate\n", now()); fflush(stdout); *flag = 1; __sync_synchronize(); return NULL; }
static void scenario(const char *name, int gated_kind, int then_kind, int same_stream) {
  CUstream s1, s2; cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING); cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
  CUdeviceptr dp; cuMemHostGetDevicePointer(&dp, (void *)flag, 0); *flag = 0; __sync_synchronize();
  printf("%s\n", name);
  cuStreamWaitValue32(s1, dp, 1, CU_STREAM_WAIT_VALUE_GEQ);
  CUresult r = gated_kind ? cuStreamAddCallback(s1, cb, NULL, 0) : cuLaunchHostFunc(s1, hf, NULL);
  printf("  %.3f gated %s enqueued -> %d\n", now(), gated_kind ? "AddCallback" : "LaunchHostFunc", r);
  pthread_t t; pthread_create(&t, NULL, watchdog, NULL);
  CUstream target = same_stream ? s1 : s2;
  double a = now();
  if (then_kind == 0) r = cuLaunchHostFunc(target, hf, NULL);
  else if (then_kind == 1) r = cuStreamAddCallback(target, cb, NULL, 0);
  else r = cuMemsetD32Async(dp + 0, 1, 1, target);
  printf("  %.3f then %s on %s returned %d after %.3f s\n", now(), then_kind == 0 ? "LaunchHostFunc" : then_kind == 1 ? "AddCallback" : "MemsetAsync", same_stream ? "same stream" : "other stream", r, now() - a);
  pthread_join(t, NULL); cuStreamSynchronize(s1); cuStreamSynchronize(s2); cuStreamDestroy(s1); cuStreamDestroy(s2);
}
int main(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); t0 = t.tv_sec + t.tv_nsec * 1e-9;
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  void *h; cuMemHostAlloc(&h, 64, CU_MEMHOSTALLOC_DEVICEMAP); flag = h;
  scenario("A: gated AddCallback, then AddCallback on another stream", 1, 1, 0);
  scenario("B: gated AddCallback, then LaunchHostFunc on another stream", 1, 0, 0);
  scenario("C: gated AddCallback, then AddCallback on the same stream", 1, 1, 1);
  scenario("D: gated AddCallback, then MemsetAsync on the same stream", 1, 2, 1);
  scenario("E: gated LaunchHostFunc, then AddCallback on another stream", 0, 1, 0);
  scenario("F: gated LaunchHostFunc, then LaunchHostFunc on the same stream", 0, 0, 1);
  return 0;
}
