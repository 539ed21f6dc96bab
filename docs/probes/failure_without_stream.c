// Probe: which calls that name no stream answer a context's sticky error, and whether a stream
// memory write queued behind the faulting kernel ever lands. See README.md.
//
// Before the fault: an event never recorded, an event recorded and completed, a pinned word that
// the stream writes 1 before the faulting kernel and 2 after it. Then a kernel stores to address
// 0x10, and from the main thread, after a synchronize of another stream: what each call answers.
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *name(CUresult r) {
  const char *n = "?";
  cuGetErrorName(r, &n);
  return n;
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

  CUstream a, idle;
  cuStreamCreate(&a, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING);
  CUevent never, done;
  cuEventCreate(&never, CU_EVENT_DISABLE_TIMING);
  cuEventCreate(&done, CU_EVENT_DISABLE_TIMING);
  cuEventRecord(done, idle);
  cuStreamSynchronize(idle);
  volatile unsigned int *word;
  printf("alloc -> %s\n",
         name(cuMemHostAlloc((void **)&word, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)));
  *word = 0;
  CUdeviceptr device;
  cuMemHostGetDevicePointer(&device, (void *)word, 0);
  printf("write 1 -> %s\n", name(cuStreamWriteValue32(a, device, 1, 0)));
  unsigned long long address = 0x10;
  unsigned int value = 7;
  void *arguments[] = {&address, &value};
  printf("fault kernel -> %s\n",
         name(cuLaunchKernel(store, 1, 1, 1, 1, 1, 1, 0, a, arguments, NULL)));
  printf("write 2 -> %s\n", name(cuStreamWriteValue32(a, device, 2, 0)));
  printf("sync a -> %s\n", name(cuStreamSynchronize(a)));
  usleep(100 * 1000);
  printf("word after the fault: %u (1: the write behind the fault never landed)\n", *word);
  printf("cuEventQuery(never recorded) -> %s\n", name(cuEventQuery(never)));
  printf("cuEventQuery(completed before) -> %s\n", name(cuEventQuery(done)));
  printf("cuStreamQuery(idle stream) -> %s\n", name(cuStreamQuery(idle)));
  size_t free_bytes = 0, total = 0;
  printf("cuMemGetInfo -> %s\n", name(cuMemGetInfo(&free_bytes, &total)));
  CUdevice current;
  printf("cuCtxGetDevice -> %s\n", name(cuCtxGetDevice(&current)));
  unsigned int version = 0;
  printf("cuCtxGetApiVersion -> %s\n", name(cuCtxGetApiVersion(c, &version)));
  unsigned int flags = 0;
  printf("cuCtxGetFlags -> %s\n", name(cuCtxGetFlags(&flags)));
  unsigned long long id = 0;
  printf("cuCtxGetId -> %s\n", name(cuCtxGetId(c, &id)));
  printf("cuStreamGetId(idle) -> %s\n", name(cuStreamGetId(idle, &id)));
  CUevent fresh;
  printf("cuEventCreate -> %s\n", name(cuEventCreate(&fresh, CU_EVENT_DISABLE_TIMING)));
  printf("cuCtxSynchronize -> %s\n", name(cuCtxSynchronize()));
  return 0;
}
