#include "ext_common.hpp"

#include <cuda_runtime_api.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <stdexcept>
#include <vector>

#include "baracuda/core/dlpack.hpp"

namespace baracuda::py {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }
void unwrap(const Result<void>& r) {
  if (!r) fail(r.message());
}

namespace {
const char* device_name(int type) {
  switch (type) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host";
    case 13: return "cuda_managed";
    default: return "non-CUDA";
  }
}

}  // namespace

View to_view(const std::string& op, nb::handle obj, const char* role, size_t idx, bool writable) {
  View v;
  nb::handle arr = obj;
  std::string reinterpret;
  if (nb::isinstance<nb::tuple>(obj)) {
    auto tup = nb::borrow<nb::tuple>(obj);
    if (tup.size() != 2 || !nb::isinstance<nb::str>(tup[1]))
      throw nb::type_error((op + ": " + role + " " + std::to_string(idx) +
                            " expected a tensor or a (tensor, dtype name) pair").c_str());
    arr = tup[0];
    reinterpret = nb::cast<std::string>(tup[1]);
  }
  const bool ok = writable ? nb::try_cast(arr, v.keep_rw, false) : nb::try_cast(arr, v.keep_ro, false);
  if (!ok)
    throw nb::type_error((op + ": " + role + " " + std::to_string(idx) + " is not a DLPack tensor (got " +
                          std::string(nb::type_name(arr.type()).c_str()) + ")")
                             .c_str());
  const int dev_type = writable ? v.keep_rw.device_type() : v.keep_ro.device_type();
  if (dev_type != 2 && dev_type != 3 && dev_type != 13)
    fail(op + ": " + role + " " + std::to_string(idx) + " is on the " + device_name(dev_type) +
         " device; baracuda runs on CUDA tensors only");
  dlpack::Tensor t{};
  auto fill = [&](const auto& a) {
    t.data = const_cast<void*>(static_cast<const void*>(a.data()));  // byte_offset already applied
    t.device = {a.device_type(), a.device_id()};
    t.ndim = static_cast<int32_t>(a.ndim());
    const auto d = a.dtype();
    t.dtype = {d.code, d.bits, d.lanes};
    t.shape = const_cast<int64_t*>(a.shape_ptr());
    t.strides = const_cast<int64_t*>(a.stride_ptr());
    t.byte_offset = 0;
  };
  if (writable) fill(v.keep_rw);
  else fill(v.keep_ro);
  v.device = t.device.device_id;
  if (!reinterpret.empty()) {
    auto dt = dtype_from_name(reinterpret);
    if (!dt) fail(op + ": " + role + " " + std::to_string(idx) + ": unknown dtype name '" + reinterpret + "'");
    if (t.dtype.bits != size_in_bits(*dt) || t.dtype.lanes != 1)
      fail(op + ": " + role + " " + std::to_string(idx) + ": cannot reinterpret " + std::to_string(t.dtype.bits) +
           "-bit elements as " + reinterpret);
    t.dtype = dlpack::from_dtype(*dt);
  }
  auto m = dlpack::to_tensor(t);
  if (!m) fail(op + ": " + role + " " + std::to_string(idx) + ": " + m.message());
  v.t = *m;
  return v;
}

DeviceGuard::DeviceGuard(int dev) {
    if (dev < 0 || cudaGetDevice(&prev) != cudaSuccess) {
      cudaGetLastError();
      prev = -1;
      return;
    }
    if (prev == dev || cudaSetDevice(dev) != cudaSuccess) prev = -1;
}
DeviceGuard::~DeviceGuard() {
  if (prev >= 0) cudaSetDevice(prev);
}

Target target_for(int device) {
  thread_local std::optional<Target> cached;
  if (!cached || (device >= 0 && cached->device != device)) {
    DeviceGuard g(device);
    auto t = Target::current();
    if (!t) return Target::offline();
    cached = *t;
  }
  return *cached;
}


Workspace workspace_of(const std::string& op, nb::handle obj, View& keep) {
  if (obj.is_none()) return {};
  keep = to_view(op, obj, "workspace", 0, true);
  return {keep.t.data, static_cast<size_t>(keep.t.numel()) * static_cast<size_t>(size_in_bytes(keep.t.dtype))};
}

nb::list dtype_names(DTypeSet s) {
  nb::list l;
  for (int i = 0; i < kNumDTypes; ++i)
    if (contains(s, static_cast<DType>(i))) l.append(std::string(name(static_cast<DType>(i))));
  return l;
}

namespace {
std::vector<BindFn>& binders() {
  static std::vector<BindFn> b;  // function-local: registrars in other TUs may run first
  return b;
}
}  // namespace
bool register_bindings(BindFn fn) {
  binders().push_back(fn);
  return true;
}
void bind_all(nb::module_& m) {
  for (BindFn f : binders()) f(m);
}

}  // namespace baracuda::py
