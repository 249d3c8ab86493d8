// The device normalize of stokerd: out[i] = table[c][in[i]], c the channel of element i, with the
// per-channel table the CPU writer uses (image::OutputWriter), so device and host outputs are
// bit-identical. Built into a fatbin that the `cuda` backend loads through the driver API
// (cuModuleLoadData), so stokerd links no CUDA runtime. Two entry points over one body: any
// output type, and float32 alone with streaming accesses (at the end of the file).
//
// Memory-bound: in each step of its grid-stride loop a thread handles the 4 consecutive
// elements at 4 * (global thread index) + k * stride (the CPU twin in tests/cuda_emu walks the
// grid the same way). Where the pointers allow (ring slots are 256-aligned), those 4 elements
// are one 4-byte load and one 16-byte (float32) or 8-byte (float16) store; elsewhere (a tail
// under 4, an unaligned pointer) element by element. The table (at most 4 KB) sits in shared
// memory. Parameters match CudaDriverBackend::normalize.
//
// No division in the loop: a thread finds the channel of its first element once, then moves
// its cursor by the stride with additions (measured on an H200, a division per step held
// float16 NCHW at 0.65 of a device copy's bandwidth, docs/GPU.md).
namespace {

// Where element e sits: its channel, and (NCHW) its index inside its plane.
struct Cursor {
  unsigned c;
  unsigned r;  // NCHW: e % plane; NHWC: unused
};

struct Layout {
  unsigned plane;
  unsigned channels;
  bool nhwc;
};

__device__ __forceinline__ Cursor cursor_at(unsigned long long e, const Layout& l) {
  if (l.nhwc) return {static_cast<unsigned>(e % l.channels), 0};
  return {static_cast<unsigned>((e / l.plane) % l.channels), static_cast<unsigned>(e % l.plane)};
}

// The cursor `by` elements on, given by's own decomposition d = cursor_at(by) (d.c: the
// channels `by` moves across whole planes or pixels, d.r: the rest).
__device__ __forceinline__ void advance(Cursor& p, const Cursor& d, const Layout& l) {
  unsigned c = p.c + d.c;
  if (!l.nhwc) {
    // p.r + d.r could pass 2^32; compared as p.r >= plane - d.r it cannot.
    if (p.r >= l.plane - d.r) {
      p.r -= l.plane - d.r;
      ++c;
    } else {
      p.r += d.r;
    }
  }
  // c <= 2 * (channels - 1) + 1 < 2 * channels: one subtraction is enough.
  p.c = c >= l.channels ? c - l.channels : c;
}

__device__ __forceinline__ void next_element(Cursor& p, const Layout& l) {
  if (l.nhwc || ++p.r == l.plane) {
    p.r = 0;
    p.c = p.c + 1 == l.channels ? 0 : p.c + 1;
  }
}

// How one kernel reads its input and writes its output. kAny: the output type is the launch's
// `half` argument, plain loads and stores. kF32: float32 only, streaming (evict-first) loads and
// stores: the float32 kernel writes 4 bytes per byte it reads, and on an H200 keeping those
// lines out of L2 moved it from 0.78-0.80 to 0.85-0.86 of a device copy, where the same streaming
// cost float16 a fifth (docs/GPU.md). Hence a kernel of its own, with its own registers.
enum class Access { kAny, kF32 };

template <Access A>
__device__ __forceinline__ uchar4 load4(const unsigned char* p) {
  if constexpr (A == Access::kF32) return __ldcs(reinterpret_cast<const uchar4*>(p));
  return *reinterpret_cast<const uchar4*>(p);
}

// Elements e .. e+3 at cursor p, their raw bytes already loaded (vector path: `out` 16-aligned
// for float32, 8-aligned for float16).
template <Access A>
__device__ __forceinline__ void write_four(const unsigned* t, uchar4 v, void* out, unsigned long long e, Cursor p,
                                           const Layout& l, unsigned half) {
  const unsigned o0 = t[p.c * 256 + v.x];
  next_element(p, l);
  const unsigned o1 = t[p.c * 256 + v.y];
  next_element(p, l);
  const unsigned o2 = t[p.c * 256 + v.z];
  next_element(p, l);
  const unsigned o3 = t[p.c * 256 + v.w];
  if constexpr (A == Access::kF32) {
    __stcs(reinterpret_cast<uint4*>(static_cast<unsigned*>(out) + e), make_uint4(o0, o1, o2, o3));
  } else if (half) {  // little-endian: element e in the low half
    *reinterpret_cast<uint2*>(static_cast<unsigned short*>(out) + e) =
        make_uint2((o0 & 0xffffu) | (o1 << 16), (o2 & 0xffffu) | (o3 << 16));
  } else {
    *reinterpret_cast<uint4*>(static_cast<unsigned*>(out) + e) = make_uint4(o0, o1, o2, o3);
  }
}

// The whole kernel; `half` is the launch's argument for kAny and 0 for kF32.
template <Access A>
__device__ __forceinline__ void normalize(const unsigned char* __restrict__ in, void* __restrict__ out,
                                          unsigned long long elems, unsigned plane, unsigned channels, unsigned nhwc,
                                          unsigned half, const unsigned* __restrict__ table) {
  __shared__ unsigned t[4 * 256];
  for (unsigned k = threadIdx.x; k < channels * 256; k += blockDim.x) t[k] = table[k];
  __syncthreads();
  const Layout l{plane, channels, nhwc != 0};
  const bool vector = (reinterpret_cast<unsigned long long>(in) & 3) == 0 &&
                      (reinterpret_cast<unsigned long long>(out) & (half ? 7 : 15)) == 0;
  const unsigned long long stride = 4ull * gridDim.x * blockDim.x;
  unsigned long long i = 4ull * (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x);
  if (i >= elems) return;
  Cursor p = cursor_at(i, l);
  const Cursor step = cursor_at(stride, l);
  if (vector) {
    // Four steps of the loop at once, their loads issued before any lookup, so each thread
    // keeps four reads in flight (one 4-byte read per step left too few to fill HBM). The same
    // elements, in the same steps.
    for (; i + 3 * stride + 4 <= elems; i += 4 * stride) {
      uchar4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = load4<A>(in + i + k * stride);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        write_four<A>(t, v[k], out, i + k * stride, p, l, half);
        advance(p, step, l);
      }
    }
  }
  for (; i < elems; i += stride, advance(p, step, l)) {
    if (vector && elems - i >= 4) {
      write_four<A>(t, load4<A>(in + i), out, i, p, l, half);
      continue;
    }
    Cursor e = p;
    const unsigned long long n = elems - i < 4 ? elems - i : 4;
    for (unsigned long long j = 0; j < n; ++j) {
      const unsigned v = t[e.c * 256 + in[i + j]];
      if (half) {
        static_cast<unsigned short*>(out)[i + j] = static_cast<unsigned short>(v);
      } else {
        static_cast<unsigned*>(out)[i + j] = v;
      }
      next_element(e, l);
    }
  }
}

}  // namespace

// __launch_bounds__(256, 8): 32 registers, so 8 blocks of 256 fit on an SM and the host's grid
// of 1024 blocks is one wave on an H100/H200 (132 SMs); unbounded, ptxas took 38 and 6 fit.
// On an H200 that moved float16 from 0.78-0.80 to 0.82-0.86 of a device copy; float32 stayed
// within noise (0.78-0.83 either way).
//
// stoker_normalize_table: either output type (`half`); the backend launches it for float16.
extern "C" __global__ void __launch_bounds__(256, 8)
    stoker_normalize_table(const unsigned char* __restrict__ in, void* __restrict__ out, unsigned long long elems,
                           unsigned plane, unsigned channels, unsigned nhwc, unsigned half,
                           const unsigned* __restrict__ table) {
  normalize<Access::kAny>(in, out, elems, plane, channels, nhwc, half, table);
}

// stoker_normalize_table_f32: float32 output only, streaming; the same parameters, `half` must
// be 0 (the emulation's twin refuses anything else).
extern "C" __global__ void __launch_bounds__(256, 8)
    stoker_normalize_table_f32(const unsigned char* __restrict__ in, void* __restrict__ out, unsigned long long elems,
                               unsigned plane, unsigned channels, unsigned nhwc, unsigned half,
                               const unsigned* __restrict__ table) {
  (void)half;
  normalize<Access::kF32>(in, out, elems, plane, channels, nhwc, 0, table);
}
