// DLPack interop. The structs below follow the DLPack ABI (v0.8 / v1 DLTensor layout), so a
// `DLTensor*` from any framework can be passed by reinterpret_cast; we do not require dlpack.h.
#pragma once
#include <cstdint>

#include "baracuda/core/tensor.hpp"

namespace baracuda::dlpack {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum TypeCode : uint8_t {
  kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLOpaqueHandle = 3, kDLBfloat = 4, kDLComplex = 5,
  kDLBool = 6, kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12,
};
struct Device { int32_t device_type; int32_t device_id; };
struct DataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // may be null: row-major
  uint64_t byte_offset;
};

/// DLPack dtype -> DType; fails for lanes != 1 or codes we do not know.
Result<DType> to_dtype(DataType dt);
DataType from_dtype(DType t);
/// Converts a DLTensor (CUDA, managed or host memory) into a view. Refuses rank > 8,
/// unknown dtypes, and byte offsets that are not a multiple of the element size.
Result<TensorMut> to_tensor(const Tensor& t);
/// Fills a DLTensor that points at `t`'s storage; `shape`/`strides` must hold t.rank() items.
Tensor from_tensor(const TensorRef& t, Device dev, int64_t* shape, int64_t* strides);

}  // namespace baracuda::dlpack
