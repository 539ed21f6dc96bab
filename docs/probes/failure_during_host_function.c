// Probe: what the driver answers about a stream while its host function is still running when
// the context fails. See README.md.
//
// Stream A runs a host function that sleeps HOLD_MS, with a second host function queued behind
// it; once the first has started, a kernel on stream B stores to address 0x10. Then, from the
// main thread: how long cuStreamSynchronize(A) takes and what it answers, measured against the
// end of the running host function; what cuStreamQuery(A), cuStreamIsCapturing(A),
// cuEventQuery and cuCtxSynchronize answer after the failure; and whether the host function
// queued behind the running one ever runs.
#define _GNU_SOURCE
#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOLD_MS 300

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static const char *name(CUresult r) {
  const char *n = "?";
  cuGetErrorName(r, &n);
  return n;
}

static atomic_int started;
static _Atomic double held_start, held_end;
static atomic_int behind_ran;

static void CUDA_CB held(void *p) {
  (void)p;
  held_start = now_ms();
  atomic_store(&started, 1);
  usleep(HOLD_MS * 1000);
  held_end = now_ms();
}

static void CUDA_CB behind(void *p) {
  (void)p;
  atomic_fetch_add(&behind_ran, 1);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s KERNELS.ptx\n", argv[0]);
    return 2;
  }
  cuInit(0);
  CUdevice d;
  cuDeviceGet(&d, 0);
  CUcontext c;
  cuDevicePrimaryCtxRetain(&c, d);
  cuCtxSetCurrent(c);
  FILE *f = fopen(argv[1], "rb");
  static char ptx[1 << 20];
  size_t n = fread(ptx, 1, sizeof ptx - 1, f);
  ptx[n] = 0;
  fclose(f);
  CUmodule module;
  CUfunction store;
  printf("load -> %s\n", name(cuModuleLoadData(&module, ptx)));
  cuModuleGetFunction(&store, module, "store_to_address");

  CUstream a, b;
  cuStreamCreate(&a, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&b, CU_STREAM_NON_BLOCKING);
  CUevent event;
  cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
  printf("launch held -> %s\n", name(cuLaunchHostFunc(a, held, NULL)));
  printf("launch behind -> %s\n", name(cuLaunchHostFunc(a, behind, NULL)));
  cuEventRecord(event, a);
  while (!atomic_load(&started)) usleep(100);

  unsigned long long address = 0x10;
  unsigned int value = 7;
  void *arguments[] = {&address, &value};
  printf("fault kernel -> %s\n",
         name(cuLaunchKernel(store, 1, 1, 1, 1, 1, 1, 0, b, arguments, NULL)));
  double t0 = now_ms();
  CUresult rb = cuStreamSynchronize(b);
  printf("sync B -> %s after %.1f ms (held function started %.1f ms before)\n", name(rb),
         now_ms() - t0, t0 - held_start);

  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  printf("while held runs: query A -> %s, isCapturing A -> %s (status %d), event query -> %s\n",
         name(cuStreamQuery(a)), name(cuStreamIsCapturing(a, &status)), (int)status,
         name(cuEventQuery(event)));
  double t1 = now_ms();
  CUresult ra = cuStreamSynchronize(a);
  double t2 = now_ms();
  double end = held_end;
  if (end == 0)
    printf("sync A -> %s after %.1f ms, WHILE the held function still runs\n", name(ra), t2 - t1);
  else
    printf("sync A -> %s after %.1f ms, %.1f ms after the held function ended\n", name(ra),
           t2 - t1, t2 - end);
  printf("ctx sync -> %s\n", name(cuCtxSynchronize()));
  usleep((HOLD_MS + 200) * 1000);
  printf("after the held function: ended=%d, behind ran %d times\n", held_end != 0,
         atomic_load(&behind_ran));
  printf("query A -> %s, isCapturing A -> %s, launch on A -> %s\n", name(cuStreamQuery(a)),
         name(cuStreamIsCapturing(a, &status)), name(cuLaunchHostFunc(a, behind, NULL)));
  return 0;
}
