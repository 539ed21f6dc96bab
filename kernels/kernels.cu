// Kernels for the examples, tests and benchmarks; see README.md for how kernels.ptx is made.
extern "C" __global__ void fill_iota(unsigned int *out, unsigned int n, unsigned int mul) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * mul;
}
extern "C" __global__ void add_scalar(unsigned int *data, const unsigned int *scalar, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += *scalar;
}
extern "C" __global__ void store_to_address(unsigned long long address, unsigned int value) {
    *(volatile unsigned int *)address = value;
}
extern "C" __global__ void spin_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
extern "C" __global__ void empty_kernel() {}
extern "C" __global__ void bump_counter(unsigned long long address) {
    *(volatile unsigned int *)address += 1;
}
