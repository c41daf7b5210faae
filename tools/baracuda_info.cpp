// baracuda-info: the device, the CUDA / cuBLASLt / cuDNN versions, and the op coverage table.
//
//   baracuda-info                    device, versions, coverage table
//   baracuda-info device             device and versions only
//   baracuda-info ops                coverage table: one line per op and direction
//   baracuda-info coverage [--json]  the table, or one JSON row per op x direction x dtype
//
// The coverage is what ElementwisePlan::select(Target::offline()) accepts, so it needs no GPU.
// cuBLASLt and cuDNN are looked up with dlopen: baracuda-info links neither library.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baracuda/ops/elementwise.hpp"

namespace {

using namespace baracuda;

// ---- versions ------------------------------------------------------------------------------------
std::string cuda_version(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

/// dlopens the first library of `names` that loads, looking also in $CUDA_HOME/lib64 and
/// /usr/local/cuda/lib64, calls `size_t symbol(void)` and formats its version.
std::string library_version(const std::vector<const char*>& names, const char* symbol, bool cudnn) {
  std::vector<std::string> candidates;
  for (const char* n : names) candidates.emplace_back(n);
  for (const char* dir : std::initializer_list<const char*>{std::getenv("CUDA_HOME"), "/usr/local/cuda"}) {
    if (!dir || !*dir) continue;
    for (const char* n : names) candidates.push_back(std::string(dir) + "/lib64/" + n);
  }
  for (const auto& c : candidates) {
    void* h = dlopen(c.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (!h) continue;
    auto fn = reinterpret_cast<size_t (*)()>(dlsym(h, symbol));
    if (!fn) {
      dlclose(h);
      continue;
    }
    const size_t v = fn();
    // cuBLASLt and cuDNN >= 9: major*10000 + minor*100 + patch; cuDNN 8: major*1000 + minor*100 + patch.
    const bool old_cudnn = cudnn && v < 90000;
    const size_t major = old_cudnn ? v / 1000 : v / 10000;
    const size_t minor = old_cudnn ? (v % 1000) / 100 : (v % 10000) / 100;
    std::string out = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
    Dl_info di{};
    if (dladdr(reinterpret_cast<void*>(fn), &di) && di.dli_fname) out += std::string(" (") + di.dli_fname + ")";
    dlclose(h);
    return out;
  }
  return "not found";
}

void print_device_and_versions() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("device:    no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    cudaGetLastError();
  } else {
    for (int d = 0; d < count; ++d) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
      std::printf("device %d:  %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", d, p.name, p.major, p.minor,
                  p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / (1u << 30),
                  static_cast<double>(p.l2CacheSize) / (1u << 20));
    }
  }
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  std::printf("CUDA:      runtime %s, driver %s\n", cuda_version(rt).c_str(), cuda_version(drv).c_str());
  std::printf("cuBLASLt:  %s\n",
              library_version({"libcublasLt.so.13", "libcublasLt.so.12"}, "cublasLtGetVersion", false).c_str());
  std::printf("cuDNN:     %s\n", library_version({"libcudnn.so.9", "libcudnn.so.8"}, "cudnnGetVersion", true).c_str());
}

// ---- coverage ------------------------------------------------------------------------------------
constexpr const char* kShortName[] = {
#define BARACUDA_X(e, n, b, k) #e,
    BARACUDA_DTYPES(BARACUDA_X)
#undef BARACUDA_X
};

struct Row {
  std::string family, op, backend;
  Direction dir;
  DType dtype;
  std::optional<DType> out;  // cast only
};

/// A descriptor select() accepts whenever the dtype is declared (inputs [4, 5], generators [1, 1]).
ElementwiseDesc probe(ElementwiseOp op, DType dt, Direction dir) {
  const auto& in = info(op);
  const Shape s = in.nin == 0 ? Shape::of({1, 1}) : Shape::of({4, 5});
  switch (in.nin) {
    case 0:
    case 1:
      return ElementwiseDesc::make(op, dt, {s}, dir);
    case 2:
      return ElementwiseDesc::make(op, dt, {s, s}, dir);
    default:
      return ElementwiseDesc::make(op, dt, {s, s, s}, dir);
  }
}

std::vector<Row> coverage() {
  std::vector<Row> rows;
  const Target target = Target::offline();
  for (const auto& in : elementwise_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        if (in.out == OutRule::Cast && dir == Direction::Forward) {
          for (int j = 0; j < kNumDTypes; ++j) {
            auto d = probe(in.op, t, dir);
            d.out_dtype = static_cast<DType>(j);
            auto plan = ElementwisePlan::select(target, d);
            if (plan)
              rows.push_back({plan->sku().category, in.name, to_string(plan->sku().backend), dir, t, d.out_dtype});
          }
          continue;
        }
        auto plan = ElementwisePlan::select(target, probe(in.op, t, dir));
        if (plan) rows.push_back({plan->sku().category, in.name, to_string(plan->sku().backend), dir, t, std::nullopt});
      }
    }
  }
  return rows;
}

std::string dtype_field(const Row& r) {
  std::string s(name(r.dtype));
  if (r.out) s += "->" + std::string(name(*r.out));
  return s;
}

void print_json(const std::vector<Row>& rows) {
  // Every field is an identifier-like string (op and dtype names): no escaping needed.
  std::printf("[\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf(
        "  {\"family\": \"%s\", \"op\": \"%s\", \"direction\": \"%s\", \"dtype\": \"%s\", \"backend\": \"%s\"}%s\n",
        r.family.c_str(), r.op.c_str(), to_string(r.dir), dtype_field(r).c_str(), r.backend.c_str(),
        i + 1 < rows.size() ? "," : "");
  }
  std::printf("]\n");
}

std::string short_list(DTypeSet s) {
  std::string out;
  for (int i = 0; i < kNumDTypes; ++i)
    if (contains(s, static_cast<DType>(i))) out += (out.empty() ? "" : " ") + std::string(kShortName[i]);
  return out.empty() ? "-" : out;
}

void print_table(const std::vector<Row>& rows) {
  size_t fw = 0, bw = 0, ops = 0;
  std::string last;
  for (const auto& r : rows) {
    (r.dir == Direction::Forward ? fw : bw)++;
    if (r.op != last) ++ops, last = r.op;
  }
  std::printf("coverage: %zu ops, %zu forward + %zu backward (op, dtype) plans accepted by select() for sm_90\n", ops,
              fw, bw);
  std::printf("%-12s %-20s %-4s %-8s %s\n", "family", "op", "dir", "backend", "dtypes");
  // Group consecutive rows of one (op, direction).
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    DTypeSet src = 0, dst = 0;
    while (j < rows.size() && rows[j].op == rows[i].op && rows[j].dir == rows[i].dir) {
      src |= bit(rows[j].dtype);
      if (rows[j].out) dst |= bit(*rows[j].out);
      ++j;
    }
    std::string dts = short_list(src);
    if (dst) {
      const bool full = static_cast<size_t>(__builtin_popcount(src) * __builtin_popcount(dst)) == j - i;
      dts = "{" + dts + "} -> {" + short_list(dst) + "}" + (full ? " (every pair)" : " (some pairs)");
    }
    std::printf("%-12s %-20s %-4s %-8s %s\n", rows[i].family.c_str(), rows[i].op.c_str(),
                rows[i].dir == Direction::Forward ? "fw" : "bw", rows[i].backend.c_str(), dts.c_str());
    i = j;
  }
}

int usage(FILE* f) {
  std::fprintf(f,
               "usage: baracuda-info [device | ops | coverage [--json]]\n"
               "  (no argument)       device, CUDA/cuBLASLt/cuDNN versions, coverage table\n"
               "  device              device and library versions\n"
               "  ops                 coverage table: op x fw/bw x dtypes x backend\n"
               "  coverage [--json]   the table, or a JSON array of {family, op, direction, dtype, backend}\n");
  return f == stderr ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view cmd = argc > 1 ? argv[1] : "";
  const bool json = argc > 2 && std::string_view(argv[2]) == "--json";
  if (cmd == "-h" || cmd == "--help" || cmd == "help") return usage(stdout);
  if (cmd.empty()) {
    print_device_and_versions();
    std::printf("\n");
    print_table(coverage());
    return 0;
  }
  if (cmd == "device" && argc == 2) {
    print_device_and_versions();
    return 0;
  }
  if (cmd == "ops" && argc == 2) {
    print_table(coverage());
    return 0;
  }
  if (cmd == "coverage" && (argc == 2 || json) && argc <= 3) {
    const auto rows = coverage();
    if (json)
      print_json(rows);
    else
      print_table(rows);
    return 0;
  }
  return usage(stderr);
}
