// Modules and kernel launches. cuModuleLoadData takes a fatbin, a cubin (ELF) or PTX text as
// the driver does, without running any of it: it checks the image's framing and finds the
// kernel names in it. cuLaunchKernel runs the CPU twin of a known kernel on the stream,
// reading the argument array by that kernel's real parameter list, so a wrong argument list
// gives wrong pixels or an illegal address (abort), as it would on a GPU.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emu.hpp"

namespace cuemu {

struct Function;
struct Module {
  Context* ctx;
  std::string image;  // the bytes, to look names up
  std::vector<Function*> functions;
};
struct Function {
  Module* module;
  std::string name;
};

namespace {

struct Kernels {
  std::mutex mu;
  std::set<Module*> modules;  // live
  std::vector<Module*> unloaded;  // kept reachable, so no new module takes a used address
};
Kernels& kernels() {
  static Kernels* k = new Kernels;
  return *k;
}

// The size of a driver image, or 0 when it is none of fatbin / ELF / PTX.
std::size_t image_size(const unsigned char* p) {
  std::uint32_t magic = 0;
  std::memcpy(&magic, p, 4);
  if (magic == 0xBA55ED50u) {  // fatbin: magic, version (u16), header size (u16), payload size (u64)
    std::uint16_t header = 0;
    std::uint64_t payload = 0;
    std::memcpy(&header, p + 6, 2);
    std::memcpy(&payload, p + 8, 8);
    return header >= 16 && payload < (1ull << 32) ? header + payload : 0;
  }
  if (std::memcmp(p, "\x7f" "ELF", 4) == 0 && p[4] == 2) {  // 64-bit cubin: up to its section table
    std::uint64_t shoff = 0;
    std::uint16_t shentsize = 0, shnum = 0;
    std::memcpy(&shoff, p + 0x28, 8);
    std::memcpy(&shentsize, p + 0x3A, 2);
    std::memcpy(&shnum, p + 0x3C, 2);
    return shoff < (1ull << 32) ? shoff + std::size_t{shentsize} * shnum : 0;
  }
  const char* text = reinterpret_cast<const char*>(p);
  const std::size_t n = std::strlen(text);
  return std::strstr(text, ".version") != nullptr && std::strstr(text, ".entry") != nullptr ? n : 0;
}

// `name` as a whole symbol in the image (not a prefix of a longer identifier).
bool names(const std::string& image, const std::string& name) {
  const auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; };
  for (std::size_t at = image.find(name); at != std::string::npos; at = image.find(name, at + 1)) {
    const bool start = at == 0 || !ident(image[at - 1]);
    const bool end = at + name.size() == image.size() || !ident(image[at + name.size()]);
    if (start && end) return true;
  }
  return false;
}

// Argument i of a launch, read with the width of the kernel's parameter.
template <typename T>
T arg(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof v);
  return v;
}

// A device range a kernel touches, resolved in the launching context (an address of another
// device, or outside device memory, is an illegal address on a GPU).
unsigned char* kernel_bytes(const char* kernel, CUdeviceptr p, std::size_t n, int device,
                            std::vector<std::shared_ptr<Shared>>& keep) {
  DeviceRange r;
  if (!resolve(p, n, r) || r.device != device) {
    char what[200];
    std::snprintf(what, sizeof what, "%s: illegal address: %zu bytes at 0x%llx are not device memory of device %d in "
                  "this process", kernel, n, p, device);
    fail("cuLaunchKernel", what);
  }
  keep.push_back(r.object);
  return r.alias;
}

// CPU twin of daemon/cuda/normalize_table.cu's stoker_normalize_table(const u8* in, void* out,
// u64 elems, u32 plane, u32 channels, u32 nhwc, u32 half, const u32* table), run over the
// launch's grid exactly as its grid-stride loop is written; also of stoker_normalize_table_f32
// (the same parameters and elements; `half` must be 0: float32 only).
CUresult launch_normalize(const std::string& kernel, unsigned grid, unsigned block, CUstream s, void** params) {
  const auto in = arg<CUdeviceptr>(params, 0);
  const auto out = arg<CUdeviceptr>(params, 1);
  const auto elems = arg<unsigned long long>(params, 2);
  const auto plane = arg<unsigned>(params, 3);
  const auto channels = arg<unsigned>(params, 4);
  const auto nhwc = arg<unsigned>(params, 5);
  const auto half = arg<unsigned>(params, 6);
  const auto table = arg<CUdeviceptr>(params, 7);
  const char* k = kernel.c_str();  // kernel_bytes names it in its failures
  if (half != 0 && kernel == "stoker_normalize_table_f32") {
    fail("cuLaunchKernel", kernel + ": launched for float16 output (half = 1); it writes float32 only");
  }
  if (channels == 0 || channels > 4 || (nhwc == 0 && plane == 0)) {
    fail("cuLaunchKernel", kernel + ": channels " + std::to_string(channels) + ", plane " + std::to_string(plane) +
                               ": the kernel would divide by zero or read past its table");
  }
  const int device = context_device(current_context());
  std::vector<std::shared_ptr<Shared>> keep;
  const unsigned char* src = kernel_bytes(k, in, elems, device, keep);
  unsigned char* dst = kernel_bytes(k, out, elems * (half ? 2 : 4), device, keep);
  const unsigned char* tab = kernel_bytes(k, table, std::size_t{channels} * 256 * 4, device, keep);
  const bool ok = enqueue("cuLaunchKernel", s, [=, keep = std::move(keep)] {
    unsigned t[4 * 256];
    std::memcpy(t, tab, std::size_t{channels} * 256 * 4);  // the kernel's shared-memory copy
    const unsigned long long stride = 4ull * grid * block;
    for (unsigned long long b = 0; b < grid; ++b) {
      for (unsigned long long th = 0; th < block; ++th) {
        for (unsigned long long i = 4ull * (b * block + th); i < elems; i += stride) {
          const unsigned long long n = elems - i < 4 ? elems - i : 4;
          for (unsigned long long j = 0; j < n; ++j) {
            const unsigned long long e = i + j;
            const unsigned c = nhwc ? static_cast<unsigned>(e % channels) : static_cast<unsigned>((e / plane) % channels);
            const unsigned v = t[c * 256 + src[e]];
            if (half) {
              const auto h = static_cast<unsigned short>(v);
              std::memcpy(dst + 2 * e, &h, 2);
            } else {
              std::memcpy(dst + 4 * e, &v, 4);
            }
          }
        }
      }
    }
  });
  if (!ok) return CUDA_ERROR_INVALID_HANDLE;
  ++stats().launches;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace cuemu

using namespace cuemu;

CUEMU_API CUresult cuModuleLoadData(CUmodule* out, const void* image) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const unsigned char*>(image);
  const std::size_t n = image_size(p);
  if (n == 0) return CUDA_ERROR_INVALID_IMAGE;
  auto* m = new Module{current_context(), std::string(reinterpret_cast<const char*>(p), n), {}};
  {
    std::lock_guard lock(kernels().mu);
    kernels().modules.insert(m);
  }
  ++stats().modules;
  *out = m;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuModuleUnload(CUmodule m) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(kernels().mu);
  if (kernels().modules.erase(m) == 0) fail("cuModuleUnload", "the module was unloaded (or never loaded)");
  kernels().unloaded.push_back(m);
  m->image.clear();
  --stats().modules;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuModuleGetFunction(CUfunction* out, CUmodule m, const char* name) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(kernels().mu);
  if (kernels().modules.count(m) == 0) fail("cuModuleGetFunction", "the module was unloaded (or never loaded)");
  if (!names(m->image, name)) return CUDA_ERROR_NOT_FOUND;
  for (Function* f : m->functions) {
    if (f->name == name) {
      *out = f;
      return CUDA_SUCCESS;
    }
  }
  m->functions.push_back(new Function{m, name});
  *out = m->functions.back();
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned shared_bytes, CUstream s, void** params, void** extra) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard lock(kernels().mu);
    if (f == nullptr || kernels().modules.count(f->module) == 0) {
      fail("cuLaunchKernel", "the function's module was unloaded (or it was never a function)");
    }
  }
  if (f->module->ctx != current_context()) return CUDA_ERROR_INVALID_HANDLE;  // a function of another context
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || std::uint64_t{bx} * by * bz > 1024 ||
      bz > 64 || gy > 65535 || gz > 65535 || shared_bytes > 48 * 1024 - 4096) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (params == nullptr || extra != nullptr) return CUDA_ERROR_INVALID_VALUE;  // the kernels here take parameters
  // The twins index x only, as the kernels do (a y/z extent repeats the same work there).
  if (f->name == "stoker_normalize_table" || f->name == "stoker_normalize_table_f32") {
    return launch_normalize(f->name, gx, bx, s, params);
  }
  fail("cuLaunchKernel", "no CPU twin for kernel '" + f->name + "' in the emulation");
}
