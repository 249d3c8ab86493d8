// Helpers of the gpu test tier, with no CUDA types, so the Catch2 sources stay plain C++
// (catch.hpp is not fed to nvcc) and build without the toolkit too (gpu_test_support_stub.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace stoker::gputest {

// Usable CUDA devices; 0 and `why` when built without CUDA or none is usable.
int device_count(std::string& why);

// Call first in every gpu test case: without a device the process prints why and exits 77,
// which ctest (SKIP_RETURN_CODE 77) reports as "Skipped", never as passed. With
// STOKER_REQUIRE_GPU=1 in the environment (scripts/gpu-check.sh) a missing device fails.
void skip_without_device();

struct NormalizeCase {
  std::uint32_t images = 1, channels = 3, height = 1, width = 1;
  bool nhwc = false;
  bool out_half = false;
  float mean[4] = {0, 0, 0, 0};
  float stddev[4] = {1, 1, 1, 1};
};

// Runs the daemon's normalize kernel on `in` on device 0; `out` gets the results as float.
bool normalize_on_device(const std::vector<std::uint8_t>& in, const NormalizeCase& c, std::vector<float>& out,
                         std::string& why);
// The kernel refuses an output pointer that is not 16-byte aligned (cudaErrorInvalidValue).
bool normalize_refuses_misaligned_output();

// Device helpers for the importer side.
void* stream_create(int device, std::string& why);
void stream_destroy(void* stream);
// Copies device -> host on `stream` and waits for it.
bool copy_to_host(void* host, const void* device_ptr, std::size_t bytes, void* stream, std::string& why);
// Free device memory in bytes (cudaMemGetInfo), 0 on failure.
std::size_t device_free_bytes(int device);

// IEEE binary16 -> float (host side).
inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: renormalize
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// CPU reference of the normalize kernel, in double.
inline double normalize_reference(std::uint8_t x, std::size_t index, const NormalizeCase& c) {
  const std::size_t pixels = static_cast<std::size_t>(c.height) * c.width;
  const std::size_t ch = c.nhwc ? index % c.channels : (index / pixels) % c.channels;
  return (x / 255.0 - c.mean[ch]) / c.stddev[ch];
}

// Largest error the kernel may make against normalize_reference for input x in channel ch:
// a few float32 ulps of the terms it adds (x*scale and -mean/std may cancel), plus half an
// ulp of binary16 (round to nearest) when the output is float16.
inline double normalize_tolerance(std::uint8_t x, std::size_t index, const NormalizeCase& c) {
  const std::size_t pixels = static_cast<std::size_t>(c.height) * c.width;
  const std::size_t ch = c.nhwc ? index % c.channels : (index / pixels) % c.channels;
  const double mean = c.mean[ch] < 0 ? -c.mean[ch] : c.mean[ch];
  const double terms = (x / 255.0 + mean) / c.stddev[ch];
  double tol = 5e-7 * (terms > 1 ? terms : 1);
  if (c.out_half) {
    double ref = normalize_reference(x, index, c);
    ref = ref < 0 ? -ref : ref;
    tol += ref / 2048.0 * 1.001 + 1e-7;
  }
  return tol;
}

}  // namespace stoker::gputest
