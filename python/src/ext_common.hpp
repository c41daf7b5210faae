// Shared by the nanobind binding files of every family: DLPack tensor conversion, error
// translation, device guard, and the registrar through which each family adds its functions to
// baracuda._C (so adding a family never edits another family's bindings).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"

namespace baracuda::py {

namespace nb = nanobind;

[[noreturn]] void fail(const std::string& msg);
template <class T>
T unwrap(Result<T> r) {
  if (!r) fail(r.message());
  return std::move(r.value());
}
void unwrap(const Result<void>& r);

/// One converted tensor; `keep` holds the DLPack export alive for the duration of the call.
struct View {
  nb::ndarray<nb::ro> keep_ro;
  nb::ndarray<> keep_rw;
  TensorMut t;
  int device = -1;
};

/// Converts a DLPack-capable object (or a (tensor, dtype_name) pair that reinterprets the
/// storage as another dtype of the same width). Errors name op, role ("input", "output", ...),
/// and index.
View to_view(const std::string& op, nb::handle obj, const char* role, size_t idx, bool writable);

/// Makes `dev` current for the scope (the library launches on the current device).
struct DeviceGuard {
  int prev = -1;
  explicit DeviceGuard(int dev);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
};

/// The optional workspace tensor of a call as a Workspace (empty for None); `keep` holds the
/// DLPack export alive for the duration of the call.
Workspace workspace_of(const std::string& op, nb::handle obj, View& keep);

/// Names of the dtypes in `s`, in enum order (the op tables' dtype columns).
nb::list dtype_names(DTypeSet s);

/// The Target of CUDA device `device` (cached per thread); Target::offline() without a GPU.
Target target_for(int device);

/// Registers a function that adds a family's bindings to the module; call from a static
/// initializer in the family's binding file: `const bool reg = register_bindings(&bind_gemm);`
using BindFn = void (*)(nb::module_&);
bool register_bindings(BindFn fn);
void bind_all(nb::module_& m);

}  // namespace baracuda::py
