// Which event calls a global-mode capture on one thread allows another thread, and the
// capturing thread itself: the calls stream points make (cuEventRecord on another stream,
// cuEventQuery, cuEventCreate, cuEventDestroy), a stream memory write for comparison, and a query
// of an event the capture took. For each: the call's result, then cuStreamEndCapture's. Then the
// same query made by a thread that set its own capture interaction mode first
// (cuThreadExchangeStreamCaptureMode), and what setting and restoring that mode costs.
// Build: nvcc -o capture_event_calls capture_event_calls.c -lcuda -lpthread
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>

static CUstream capturing, other;
static CUevent done, captured;
static CUdeviceptr word_d;

enum { QUERY, RECORD_OTHER, CREATE, DESTROY, WRITE_OTHER, QUERY_CAPTURED, CASES };
static const char *names[] = {"cuEventQuery (event of another stream)", "cuEventRecord on another stream",
                              "cuEventCreate", "cuEventDestroy", "cuStreamWriteValue32 on another stream",
                              "cuEventQuery (event the capture took)"};

static CUresult run(int which) {
  CUevent fresh;
  switch (which) {
  case QUERY: return cuEventQuery(done);
  case RECORD_OTHER: return cuEventRecord(done, other);
  case CREATE: { CUresult r = cuEventCreate(&fresh, CU_EVENT_DISABLE_TIMING); if (r == CUDA_SUCCESS) cuEventDestroy(fresh); return r; }
  case DESTROY: { cuEventCreate(&fresh, CU_EVENT_DISABLE_TIMING); return cuEventDestroy(fresh); }
  case WRITE_OTHER: return cuStreamWriteValue32(other, word_d, 1, 0);
  case QUERY_CAPTURED: return cuEventQuery(captured);
  }
  return CUDA_ERROR_UNKNOWN;
}

struct job { int which; CUresult result; CUcontext context; CUstreamCaptureMode own_mode; int set_mode; };
static void *on_thread(void *p) {
  struct job *j = p; cuCtxSetCurrent(j->context);
  CUstreamCaptureMode previous = j->own_mode;
  if (j->set_mode) cuThreadExchangeStreamCaptureMode(&previous);
  j->result = run(j->which);
  if (j->set_mode) cuThreadExchangeStreamCaptureMode(&previous);
  return NULL;
}
#include <time.h>
static double now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

int main(void) {
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING); cuStreamCreate(&other, CU_STREAM_NON_BLOCKING);
  cuEventCreate(&done, CU_EVENT_DISABLE_TIMING); cuEventCreate(&captured, CU_EVENT_DISABLE_TIMING);
  void *word; cuMemHostAlloc(&word, 4096, CU_MEMHOSTALLOC_DEVICEMAP); cuMemHostGetDevicePointer(&word_d, word, 0);
  CUdeviceptr scratch; cuMemAlloc(&scratch, 4096);
  cuEventRecord(done, other); cuStreamSynchronize(other);
  const char *modes[] = {"global", "thread-local", "relaxed"};
  CUstreamCaptureMode mode_values[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_RELAXED};
  for (int m = 0; m < 3; m++)
    for (int where = 0; where < 2; where++)
      for (int which = 0; which < CASES; which++) {
        cuStreamBeginCapture(capturing, mode_values[m]);
        cuMemsetD32Async(scratch, 0, 1, capturing);
        cuEventRecord(captured, capturing);
        CUresult result;
        if (where == 0) {
          struct job j = {which, CUDA_SUCCESS, c, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}; pthread_t t;
          pthread_create(&t, NULL, on_thread, &j); pthread_join(t, NULL); result = j.result;
        } else {
          result = run(which);
        }
        CUgraph graph = NULL;
        CUresult ended = cuStreamEndCapture(capturing, &graph);
        if (graph) cuGraphDestroy(graph);
        cuStreamSynchronize(other);
        cuEventRecord(done, other); cuStreamSynchronize(other);
        const char *rn, *en; cuGetErrorName(result, &rn); cuGetErrorName(ended, &en);
        printf("%-12s %-17s %-42s -> %-40s end capture: %s\n", modes[m], where ? "capturing thread" : "another thread",
               names[which], rn, en);
      }
  printf("\nthe query of an event of another stream, by a thread that set its own interaction mode\n");
  for (int own = 0; own < 3; own++)
    for (int where = 0; where < 2; where++) {
      cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL);
      cuMemsetD32Async(scratch, 0, 1, capturing);
      struct job j = {QUERY, CUDA_SUCCESS, c, mode_values[own], 1};
      if (where == 0) { pthread_t t; pthread_create(&t, NULL, on_thread, &j); pthread_join(t, NULL); }
      else on_thread(&j);
      CUgraph graph = NULL;
      CUresult ended = cuStreamEndCapture(capturing, &graph);
      if (graph) cuGraphDestroy(graph);
      const char *rn, *en; cuGetErrorName(j.result, &rn); cuGetErrorName(ended, &en);
      printf("global capture; %-17s in mode %-12s -> %-40s end capture: %s\n", where ? "capturing thread" : "another thread",
             modes[own], rn, en);
    }
  const int calls = 1000000;
  double start = now_ns();
  for (int i = 0; i < calls; i++) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cuThreadExchangeStreamCaptureMode(&mode);
    cuThreadExchangeStreamCaptureMode(&mode);
  }
  printf("\nsetting relaxed and restoring: %.1f ns a pair\n", (now_ns() - start) / calls);
  return 0;
}
