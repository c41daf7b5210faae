// The GEMM family's coverage rows: every dtype combination select() accepts for the target,
// forward and backward, once per backend that can serve it (cuBLASLt for the general problem,
// CUTLASS for int8 -> floating D on sm_90, the native small-M kernel for decode shapes). Probed
// with small dense descriptors.
#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/gemm.hpp"

namespace baracuda {
namespace {

void gemm_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  auto dtype_str = [](const GemmDesc& d) {
    std::string s(name(d.a_dtype));
    if (d.b_dtype != d.a_dtype || d.d_dtype != d.a_dtype)
      s += "," + std::string(name(d.b_dtype)) + "->" + std::string(name(d.d_dtype));
    return s;
  };
  auto probe = [&](const GemmDesc& d, Backend be) {
    PlanPreference pref;
    pref.backend = be;
    if (auto p = GemmPlan::select(target, d, pref))
      rows.push_back({"gemm", "gemm", d.direction, dtype_str(d), p->sku().backend});
  };
  for (int i = 0; i < kNumDTypes; ++i) {
    for (int j = 0; j < kNumDTypes; ++j) {
      for (int o = 0; o < kNumDTypes; ++o) {
        const auto a = static_cast<DType>(i), b = static_cast<DType>(j), out = static_cast<DType>(o);
        // K-contiguous A and B (row-major A, [n, k] weight): the form every dtype accepts.
        GemmDesc d = GemmDesc::dense(a, out, 64, 64, 64, false, true);
        d.b_dtype = b;
        probe(d, Backend::CuBlasLt);
        probe(d, Backend::Cutlass);
        d.m = 4;
        d.a = MatrixStrides::row_major(64);
        d.c = d.d = MatrixStrides::row_major(64);
        probe(d, Backend::Native);
        GemmDesc bw = GemmDesc::dense(a, out, 64, 64, 64, false, true);
        bw.b_dtype = b;
        bw.direction = Direction::Backward;
        bw.bgrad = GemmBiasGrad::OfD;
        probe(bw, Backend::CuBlasLt);
      }
    }
  }
  for (DType t : {DType::f16, DType::bf16}) {
    GroupedGemmDesc g;
    g.dtype = t;
    g.groups = 4, g.rows = 64, g.n = 64, g.k = 64;
    if (auto p = GroupedGemmPlan::select(target, g))
      rows.push_back({"gemm", "grouped_gemm", Direction::Forward, std::string(name(t)), p->sku().backend});
  }
}

[[maybe_unused]] const bool registered = detail::register_coverage("gemm", &gemm_coverage);

}  // namespace
}  // namespace baracuda
