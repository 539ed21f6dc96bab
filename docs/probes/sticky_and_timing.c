// Probe: host-function enqueue cost, and which host functions run after a sticky error. See README.md.
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <stdatomic.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *n_; cuGetErrorName(r_, &n_); printf("FAIL %s -> %d %s (line %d)\n", #x, r_, n_, __LINE__); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static atomic_ulong counter;
static void CUDA_CB host_fn(void *p) { (void)p; atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed); }
static void CUDA_CB cb_fn(CUstream s, CUresult st, void *p) { (void)s; (void)st; (void)p; atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed); }
static void CUDA_CB host_fn_malloc(void *p) { free(p); atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed); }
static void CUDA_CB cb_fn_malloc(CUstream s, CUresult st, void *p) { (void)s; (void)st; free(p); atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed); }

struct ev { const char *name; int ran; int status; long tid; };
static struct ev evs[16];
static void CUDA_CB rec_host(void *p) { struct ev *e = p; e->ran++; e->tid = syscall(SYS_gettid); }
static void CUDA_CB rec_cb(CUstream s, CUresult st, void *p) { (void)s; struct ev *e = p; e->ran++; e->status = st; e->tid = syscall(SYS_gettid); }
static void dump(const char *when) {
  printf("-- %s\n", when);
  for (int i = 0; i < 16; i++) if (evs[i].name) printf("   %-28s ran=%d status=%d tid=%ld\n", evs[i].name, evs[i].ran, evs[i].status, evs[i].tid);
}

static CUmodule mod;
static CUfunction f_store, f_spin, f_empty;

static void timing(CUstream s) {
  const int N = 200000;
  for (int rep = 0; rep < 5; rep++) {
    for (int kind = 0; kind < 4; kind++) {
      atomic_store(&counter, 0);
      double t0 = now();
      for (int i = 0; i < N; i++) {
        if (kind == 0) CK(cuLaunchHostFunc(s, host_fn, NULL));
        else if (kind == 1) CK(cuStreamAddCallback(s, cb_fn, NULL, 0));
        else if (kind == 2) CK(cuLaunchHostFunc(s, host_fn_malloc, malloc(32)));
        else CK(cuStreamAddCallback(s, cb_fn_malloc, malloc(32), 0));
      }
      double t1 = now();
      CK(cuStreamSynchronize(s));
      double t2 = now();
      const char *names[] = {"cuLaunchHostFunc", "cuStreamAddCallback", "cuLaunchHostFunc+malloc", "cuStreamAddCallback+malloc"};
      printf("rep %d %-28s enqueue %.3f us/call total %.3f us/cb  %.0f cb/s ran=%lu\n", rep, names[kind], (t1 - t0) / N * 1e6, (t2 - t0) / N * 1e6, N / (t2 - t0), atomic_load(&counter));
    }
  }
  // trivial call cost
  for (int rep = 0; rep < 3; rep++) {
    CUstreamCaptureStatus st; double t0 = now();
    for (int i = 0; i < 1000000; i++) cuStreamIsCapturing(s, &st);
    double t1 = now();
    CUcontext c; for (int i = 0; i < 1000000; i++) cuCtxGetCurrent(&c);
    double t2 = now();
    printf("cuStreamIsCapturing %.1f ns, cuCtxGetCurrent %.1f ns\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
  }
}

static void capture_check(void) {
  CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUresult r = cuStreamAddCallback(s, cb_fn, NULL, 0);
  CUstreamCaptureStatus st; CUresult r2 = cuStreamIsCapturing(s, &st);
  printf("capture: cuStreamAddCallback -> %d; isCapturing -> %d status %d\n", r, r2, st);
  CUgraph g; r = cuStreamEndCapture(s, &g); printf("capture: end -> %d\n", r);
  cuStreamDestroy(s);
}

static void sticky(void) {
  CUstream s1, s2; CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  evs[0].name = "s1 cb before fault"; evs[1].name = "s1 hostfn before fault";
  evs[2].name = "s2 cb behind spin"; evs[3].name = "s2 hostfn behind spin";
  evs[4].name = "s1 cb after fault"; evs[5].name = "s1 hostfn after fault";
  evs[6].name = "s1 cb after error seen"; evs[7].name = "s2 cb after error seen";
  CK(cuStreamAddCallback(s1, rec_cb, &evs[0], 0));
  CK(cuLaunchHostFunc(s1, rec_host, &evs[1]));
  unsigned long long ns = 300000000ull; void *a1[] = {&ns};
  CK(cuLaunchKernel(f_spin, 1, 1, 1, 1, 1, 1, 0, s2, a1, NULL));
  CK(cuStreamAddCallback(s2, rec_cb, &evs[2], 0));
  CK(cuLaunchHostFunc(s2, rec_host, &evs[3]));
  unsigned long long addr = 0x10; unsigned int val = 7; void *a2[] = {&addr, &val};
  CK(cuLaunchKernel(f_store, 1, 1, 1, 1, 1, 1, 0, s1, a2, NULL));
  CK(cuStreamAddCallback(s1, rec_cb, &evs[4], 0));
  CK(cuLaunchHostFunc(s1, rec_host, &evs[5]));
  CUresult r = cuStreamSynchronize(s1); printf("sync s1 -> %d\n", r);
  usleep(100000);
  dump("after sync s1 + 100ms");
  r = cuStreamAddCallback(s1, rec_cb, &evs[6], 0); printf("addCallback s1 after error -> %d\n", r);
  r = cuStreamAddCallback(s2, rec_cb, &evs[7], 0); printf("addCallback s2 after error -> %d\n", r);
  r = cuStreamSynchronize(s2); printf("sync s2 -> %d\n", r);
  usleep(500000);
  dump("after sync s2 + 500ms");
  r = cuStreamDestroy(s1); printf("destroy s1 -> %d\n", r);
  r = cuStreamDestroy(s2); printf("destroy s2 -> %d\n", r);
  usleep(200000);
  CUdevice d; cuDeviceGet(&d, 0);
  r = cuDevicePrimaryCtxRelease(d); printf("primary release -> %d\n", r);
  usleep(200000);
  dump("after destroy + release");
  printf("main tid %ld\n", (long)syscall(SYS_gettid));
}

int main(int argc, char **argv) {
  CK(cuInit(0));
  int v; cuDriverGetVersion(&v); printf("driver %d\n", v);
  CUdevice d; CK(cuDeviceGet(&d, 0));
  CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  FILE *f = fopen(argv[2], "rb"); static char ptx[1 << 20]; size_t n = fread(ptx, 1, sizeof ptx - 1, f); ptx[n] = 0; fclose(f);
  CK(cuModuleLoadData(&mod, ptx));
  CK(cuModuleGetFunction(&f_store, mod, "store_to_address"));
  CK(cuModuleGetFunction(&f_spin, mod, "spin_ns"));
  CK(cuModuleGetFunction(&f_empty, mod, "empty_kernel"));
  if (!strcmp(argv[1], "timing")) { CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); timing(s); capture_check(); }
  else sticky();
  return 0;
}
