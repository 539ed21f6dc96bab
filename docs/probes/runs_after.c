// Replays tests/host_launch.rs runs_after_...: gate (wait value), memset of mapped memory, host
// function, DtoD copy of mapped memory, open the gate, synchronize. argv[1] picks the variant.
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static volatile unsigned *mem;
static void CUDA_CB hf(void *p) { (void)p; printf("  host function sees %u\n", mem[1]); mem[2] = 2; }
static void CUDA_CB cb(CUstream s, CUresult r, void *p) { (void)s; (void)r; hf(p); }
int main(int argc, char **argv) {
  int v = atoi(argv[1]);
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  void *h; cuMemHostAlloc(&h, 64, CU_MEMHOSTALLOC_DEVICEMAP | ((v & 8) ? CU_MEMHOSTALLOC_PORTABLE : 0)); mem = h;
  for (int i = 0; i < 16; i++) mem[i] = 0;
  CUdeviceptr dp; cuMemHostGetDevicePointer(&dp, h, 0);
  CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUresult r;
  if (v & 1) { r = cuStreamWaitValue32(s, dp, 1, CU_STREAM_WAIT_VALUE_GEQ); printf("  wait -> %d\n", r); }
  r = cuMemsetD32Async(dp + 4, 1, 1, s); printf("  memset -> %d\n", r);
  r = (v & 2) ? cuStreamAddCallback(s, cb, NULL, 0) : cuLaunchHostFunc(s, hf, NULL); printf("  host fn -> %d\n", r);
  if (v & 4) { r = cuMemcpyDtoDAsync(dp + 12, dp + 8, 4, s); printf("  copy -> %d\n", r); }
  mem[0] = 1; __sync_synchronize();
  r = cuStreamSynchronize(s); printf("  sync -> %d, copied %u\n", r, mem[3]);
  return 0;
}
