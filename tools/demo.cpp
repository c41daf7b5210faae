// baracuda-demo: a small workload through several elementwise plans on 16M elements.
//
// With a GPU: for each plan, the SKU, the kernel variant run() takes for these tensors, the
// median time of a few runs (CUDA events) and the achieved bandwidth; then one result checked
// against a host computation. Without a GPU: the plans select() would choose for sm_90.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "baracuda/ops/elementwise.hpp"

namespace {

using namespace baracuda;

constexpr int64_t kRows = 4096, kCols = 4096, kN = kRows * kCols;  // 16M elements
// Timing: kSamples samples, each the mean of kBatch back-to-back runs; the median is reported.
// One untimed run precedes each batch so the GPU is busy when the start event is recorded (the
// host-side cost of run() then overlaps the previous kernel instead of being timed).
constexpr int kSamples = 7, kBatch = 5;

#define CUDA_OK(expr)                                                                             \
  do {                                                                                            \
    const cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

// ---- host reference helpers ----------------------------------------------------------------------
uint16_t f32_to_bf16(float f) {  // round to nearest even, as the device conversion
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
float bf16_to_f32(uint16_t h) {
  const uint32_t b = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
double gelu_tanh(double x) {
  constexpr double kBeta = 0.7978845608028654;  // sqrt(2/pi)
  return 0.5 * x * (1.0 + std::tanh(kBeta * (x + 0.044715 * x * x * x)));
}

// ---- the workload ----------------------------------------------------------------------------------
/// Device buffers (or null pointers when only showing plans).
struct Buffers {
  void* x_f32 = nullptr;  // [4096, 4096] f32 input
  void* x = nullptr;      // bf16 cast of x_f32
  void* g = nullptr;      // gelu(x)
  void* bias = nullptr;   // [4096] bf16
  void* h = nullptr;      // g + bias
  void* dx = nullptr;     // silu_backward(h, x)
  void* cond = nullptr;   // [4096, 4096] bool
  void* w = nullptr;      // where(cond, x, g)
};

struct Step {
  const char* title;
  ElementwiseDesc desc;
  ElementwiseArgs args;
  size_t bytes = 0;  // moved per run (reads + writes)
};

ElementwiseArgs args_of(std::vector<TensorRef> in, std::vector<TensorMut> out) {
  ElementwiseArgs a;
  for (size_t k = 0; k < in.size(); ++k) a.in[k] = in[k];
  for (size_t k = 0; k < out.size(); ++k) a.out[k] = out[k];
  a.nin = static_cast<int>(in.size());
  a.nout = static_cast<int>(out.size());
  return a;
}

size_t bytes_of(const ElementwiseArgs& a) {
  size_t b = 0;
  for (int k = 0; k < a.nin; ++k) b += static_cast<size_t>(a.in[k].numel()) * size_in_bytes(a.in[k].dtype);
  for (int k = 0; k < a.nout; ++k) b += static_cast<size_t>(a.out[k].numel()) * size_in_bytes(a.out[k].dtype);
  return b;
}

std::vector<Step> workload(const Buffers& b) {
  const Shape mat = Shape::of({kRows, kCols});
  const Shape row = Shape::of({kCols});
  std::vector<Step> steps;
  auto add = [&](const char* title, ElementwiseDesc d, ElementwiseArgs a) {
    const size_t bytes = bytes_of(a);
    steps.push_back({title, d, a, bytes});
  };
  {
    auto d = ElementwiseDesc::make(ElementwiseOp::cast, DType::f32, {mat});
    d.out_dtype = DType::bf16;
    add("cast f32 -> bf16", d,
        args_of({make_ref(b.x_f32, DType::f32, {kRows, kCols})}, {make_mut(b.x, DType::bf16, {kRows, kCols})}));
  }
  {
    auto d = ElementwiseDesc::make(ElementwiseOp::gelu, DType::bf16, {mat});
    (void)d.set_param("approximate", "tanh");
    add("gelu(approximate=tanh) bf16", d,
        args_of({make_ref(b.x, DType::bf16, {kRows, kCols})}, {make_mut(b.g, DType::bf16, {kRows, kCols})}));
  }
  add("add bf16 [4096,4096] + bias [4096]", ElementwiseDesc::make(ElementwiseOp::add, DType::bf16, {mat, row}),
      args_of({make_ref(b.g, DType::bf16, {kRows, kCols}), make_ref(b.bias, DType::bf16, {kCols})},
              {make_mut(b.h, DType::bf16, {kRows, kCols})}));
  add("silu_backward bf16 (grad_output, self)",
      ElementwiseDesc::make(ElementwiseOp::silu, DType::bf16, {mat}, Direction::Backward),
      args_of({make_ref(b.h, DType::bf16, {kRows, kCols}), make_ref(b.x, DType::bf16, {kRows, kCols})},
              {make_mut(b.dx, DType::bf16, {kRows, kCols})}));
  add("where(cond, x, gelu) bf16", ElementwiseDesc::make(ElementwiseOp::where, DType::bf16, {mat, mat, mat}),
      args_of({make_ref(b.cond, DType::b8, {kRows, kCols}), make_ref(b.x, DType::bf16, {kRows, kCols}),
               make_ref(b.g, DType::bf16, {kRows, kCols})},
              {make_mut(b.w, DType::bf16, {kRows, kCols})}));
  return steps;
}

int show_offline() {
  std::printf("no CUDA device: showing the plans select() would choose for sm_90\n\n");
  const auto steps = workload(Buffers{});  // null pointers: layout_for assumes cudaMalloc alignment
  int failed = 0;
  for (const auto& s : steps) {
    auto plan = ElementwisePlan::select(Target::offline(90), s.desc);
    std::printf("%-40s ", s.title);
    if (!plan) {
      std::printf("select failed: %s\n", plan.message().c_str());
      ++failed;
      continue;
    }
    std::printf("%s\n%-40s layout=%s, workspace=%zu B, %.1f MB moved per run\n", plan->sku().to_string().c_str(), "",
                std::string(plan->layout_for(s.args)).c_str(), plan->workspace_size(), s.bytes / 1e6);
  }
  return failed ? 1 : 0;
}

int run_gpu(const Target& target) {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, target.device));
  std::printf("device %d: %s (sm_%d, %d SMs), %lld elements per tensor\n\n", target.device, prop.name, target.sm,
              target.num_sms, static_cast<long long>(kN));

  Buffers b;
  CUDA_OK(cudaMalloc(&b.x_f32, kN * 4));
  for (void** p : {&b.x, &b.g, &b.h, &b.dx, &b.w}) CUDA_OK(cudaMalloc(p, kN * 2));
  CUDA_OK(cudaMalloc(&b.bias, kCols * 2));
  CUDA_OK(cudaMalloc(&b.cond, kN));

  // Inputs: a deterministic pattern in [-4, 4), a bias row, a checkerboard-ish condition.
  std::vector<float> x(kN);
  uint32_t s = 12345;
  for (auto& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 8.0f - 4.0f;
  }
  std::vector<uint16_t> bias(kCols);
  for (int64_t j = 0; j < kCols; ++j) bias[j] = f32_to_bf16(0.001f * static_cast<float>(j % 97) - 0.05f);
  std::vector<uint8_t> cond(kN);
  for (int64_t i = 0; i < kN; ++i) cond[i] = static_cast<uint8_t>((i * 2654435761u >> 7) & 1);
  CUDA_OK(cudaMemcpy(b.x_f32, x.data(), kN * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b.bias, bias.data(), kCols * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b.cond, cond.data(), kN, cudaMemcpyHostToDevice));

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  cudaEvent_t t0, t1;
  CUDA_OK(cudaEventCreate(&t0));
  CUDA_OK(cudaEventCreate(&t1));

  int failed = 0;
  std::printf("%-40s %10s %10s  %s\n", "step", "median us", "GB/s", "plan");
  for (const auto& st : workload(b)) {
    auto plan = ElementwisePlan::select(target, st.desc);
    if (!plan) {
      std::printf("%-40s select failed: %s\n", st.title, plan.message().c_str());
      ++failed;
      continue;
    }
    void* wsp = nullptr;
    if (plan->workspace_size()) CUDA_OK(cudaMalloc(&wsp, plan->workspace_size()));
    const Workspace ws{wsp, plan->workspace_size()};
    std::vector<float> ms;
    Result<void> r = plan->run(stream, ws, st.args);  // warm-up, and the first error if any
    for (int sample = 0; sample < kSamples && r.ok(); ++sample) {
      r = plan->run(stream, ws, st.args);
      CUDA_OK(cudaEventRecord(t0, stream));
      for (int k = 0; k < kBatch && r.ok(); ++k) r = plan->run(stream, ws, st.args);
      CUDA_OK(cudaEventRecord(t1, stream));
      CUDA_OK(cudaEventSynchronize(t1));
      float e = 0;
      CUDA_OK(cudaEventElapsedTime(&e, t0, t1));
      ms.push_back(e / kBatch);
    }
    if (wsp) CUDA_OK(cudaFree(wsp));
    if (!r.ok()) {
      std::printf("%-40s run failed: %s\n", st.title, r.message().c_str());
      ++failed;
      continue;
    }
    std::sort(ms.begin(), ms.end());
    const double us = ms[ms.size() / 2] * 1e3;
    std::printf("%-40s %10.1f %10.1f  %s\n%-40s %10s %10s  layout=%s\n", st.title, us, st.bytes / (us * 1e3),
                plan->sku().to_string().c_str(), "", "", "", std::string(plan->layout_for(st.args)).c_str());
  }
  CUDA_OK(cudaStreamSynchronize(stream));

  // Check: the cast is exact (round to nearest even); gelu(tanh) within bf16 tolerance.
  std::vector<uint16_t> xb(kN), gb(kN);
  CUDA_OK(cudaMemcpy(xb.data(), b.x, kN * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gb.data(), b.g, kN * 2, cudaMemcpyDeviceToHost));
  int64_t cast_bad = 0, gelu_bad = 0;
  for (int64_t i = 0; i < kN; ++i) {
    if (xb[i] != f32_to_bf16(x[i])) ++cast_bad;
    const double ref = bf16_to_f32(f32_to_bf16(static_cast<float>(gelu_tanh(bf16_to_f32(xb[i])))));
    if (std::fabs(bf16_to_f32(gb[i]) - ref) > 1e-5 + 1.6e-2 * std::fabs(ref)) ++gelu_bad;
  }
  std::printf("\ncheck: cast f32->bf16 %lld/%lld elements differ from the host (exact expected)\n",
              static_cast<long long>(cast_bad), static_cast<long long>(kN));
  std::printf("check: gelu tanh bf16 %lld/%lld elements outside rtol 1.6e-2 / atol 1e-5\n",
              static_cast<long long>(gelu_bad), static_cast<long long>(kN));
  failed += (cast_bad != 0) + (gelu_bad != 0);

  for (void* p : {b.x_f32, b.x, b.g, b.bias, b.h, b.dx, b.cond, b.w}) cudaFree(p);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaStreamDestroy(stream);
  std::printf("%s\n", failed ? "FAILED" : "OK");
  return failed ? 1 : 0;
}

}  // namespace

int main() {
  auto target = Target::current();
  if (!target) {
    if (target.status() != Status::NoDevice) std::printf("%s\n", target.message().c_str());
    return show_offline();
  }
  return run_gpu(*target);
}
