// baracuda-info: the device, the CUDA / cuBLASLt / cuDNN versions, and the op coverage table.
//
//   baracuda-info                    device, versions, coverage table
//   baracuda-info device             device and versions only
//   baracuda-info ops                coverage table: one line per op and direction
//   baracuda-info coverage [--json]  the table, or one JSON row per op x direction x dtype
//
// The coverage is what every family's select(Target::offline()) accepts, so it needs no GPU.
// cuBLASLt and cuDNN are looked up with dlopen: baracuda-info links neither library.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baracuda/core/coverage.hpp"

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

/// Short dtype names for the table ("bf16" rather than "bfloat16").
std::string short_name(std::string_view full) {
  auto t = dtype_from_name(full);
  return t ? kShortName[static_cast<int>(*t)] : std::string(full);
}

void print_json(const std::vector<CoverageRow>& rows) {
  // Every field is an identifier-like string (op and dtype names): no escaping needed.
  std::printf("[\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const CoverageRow& r = rows[i];
    std::printf(
        "  {\"family\": \"%s\", \"op\": \"%s\", \"direction\": \"%s\", \"dtype\": \"%s\", \"backend\": \"%s\"}%s\n",
        r.family.c_str(), r.op.c_str(), to_string(r.direction), r.dtype.c_str(), to_string(r.backend),
        i + 1 < rows.size() ? "," : "");
  }
  std::printf("]\n");
}

/// Appends `item` to a space-separated list unless it is already there.
void add_unique(std::string& list, const std::string& item) {
  const std::string padded = " " + list + " ";
  if (padded.find(" " + item + " ") == std::string::npos) list += (list.empty() ? "" : " ") + item;
}

void print_table(const std::vector<CoverageRow>& rows) {
  size_t fw = 0, bw = 0, ops = 0;
  std::string last;
  for (const auto& r : rows) {
    (r.direction == Direction::Forward ? fw : bw)++;
    if (r.family + "." + r.op != last) ++ops, last = r.family + "." + r.op;
  }
  std::printf("coverage: %zu ops, %zu forward + %zu backward (op, dtype) plans accepted by select() for sm_90\n", ops,
              fw, bw);
  std::printf("%-12s %-20s %-4s %-8s %s\n", "family", "op", "dir", "backend", "dtypes");
  // Group consecutive rows of one (family, op, direction); "a->b" rows list sources and targets.
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    std::string src, dst;
    while (j < rows.size() && rows[j].family == rows[i].family && rows[j].op == rows[i].op &&
           rows[j].direction == rows[i].direction) {
      const std::string& d = rows[j].dtype;
      const auto arrow = d.find("->");
      add_unique(src, short_name(d.substr(0, arrow)));
      if (arrow != std::string::npos) add_unique(dst, short_name(d.substr(arrow + 2)));
      ++j;
    }
    std::string dts = src.empty() ? "-" : src;
    if (!dst.empty()) {
      const auto count = [](const std::string& l) { return 1 + std::count(l.begin(), l.end(), ' '); };
      const bool full = static_cast<size_t>(count(src) * count(dst)) == j - i;
      dts = "{" + src + "} -> {" + dst + "}" + (full ? " (every pair)" : " (some pairs)");
    }
    std::printf("%-12s %-20s %-4s %-8s %s\n", rows[i].family.c_str(), rows[i].op.c_str(),
                rows[i].direction == Direction::Forward ? "fw" : "bw", to_string(rows[i].backend), dts.c_str());
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
    print_table(coverage(Target::offline()));
    return 0;
  }
  if (cmd == "device" && argc == 2) {
    print_device_and_versions();
    return 0;
  }
  if (cmd == "ops" && argc == 2) {
    print_table(coverage(Target::offline()));
    return 0;
  }
  if (cmd == "coverage" && (argc == 2 || json) && argc <= 3) {
    const auto rows = coverage(Target::offline());
    if (json)
      print_json(rows);
    else
      print_table(rows);
    return 0;
  }
  return usage(stderr);
}
