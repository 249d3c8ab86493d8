// The DLPack ABI (the "dltensor" capsule protocol, versions 0.5-0.8, which torch 1.13+ reads),
// written out from the public specification: the struct layout is the contract.
#pragma once

#include <cstdint>

namespace dlpack {

enum DLDeviceType : std::int32_t { kDLCPU = 1, kDLCUDA = 2 };
enum DLDataTypeCode : std::uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2 };

struct DLDevice {
  DLDeviceType device_type;
  std::int32_t device_id;
};

struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // nullptr: compact row-major
  std::uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

static_assert(sizeof(DLTensor) == 48);
static_assert(sizeof(DLManagedTensor) == 64);

}  // namespace dlpack
