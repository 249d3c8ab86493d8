// The device normalize of stokerd: out[i] = table[c][in[i]], c the channel of element i, with the
// per-channel table the CPU writer uses (image::OutputWriter), so device and host outputs are
// bit-identical. Built into a fatbin that the `cuda` backend loads through the driver API
// (cuModuleLoadData), so stokerd links no CUDA runtime.
//
// Memory-bound: each thread handles 4 consecutive elements (one 32-bit load of input), the
// 4 KB table sits in shared memory. Parameters match CudaDriverBackend::normalize.
extern "C" __global__ void stoker_normalize_table(const unsigned char* __restrict__ in, void* __restrict__ out,
                                                  unsigned long long elems, unsigned plane, unsigned channels,
                                                  unsigned nhwc, unsigned half, const unsigned* __restrict__ table) {
  __shared__ unsigned t[4 * 256];
  for (unsigned k = threadIdx.x; k < channels * 256; k += blockDim.x) t[k] = table[k];
  __syncthreads();
  const unsigned long long stride = 4ull * gridDim.x * blockDim.x;
  for (unsigned long long i = 4ull * (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x); i < elems;
       i += stride) {
    const unsigned long long n = elems - i < 4 ? elems - i : 4;
    for (unsigned long long j = 0; j < n; ++j) {
      const unsigned long long e = i + j;
      const unsigned c = nhwc ? static_cast<unsigned>(e % channels) : static_cast<unsigned>((e / plane) % channels);
      const unsigned v = t[c * 256 + in[e]];
      if (half) {
        static_cast<unsigned short*>(out)[e] = static_cast<unsigned short>(v);
      } else {
        static_cast<unsigned*>(out)[e] = v;
      }
    }
  }
}
