// Special functions not in CUDA's math library, following the algorithms ATen uses (Cephes):
// digamma, Hurwitz zeta, polygamma. Device-only, templated on float/double.
#pragma once
#include <cuda/std/limits>

namespace baracuda::kern {

template <class M>
__device__ inline M digamma(M x) {
  constexpr M kPi = M(3.14159265358979323846);
  if (x == M(0)) return copysign(cuda::std::numeric_limits<M>::infinity(), -x);
  M result = 0;
  if (x < 0) {
    if (x == trunc(x)) return cuda::std::numeric_limits<M>::quiet_NaN();
    // Reflection: psi(1 - x) - psi(x) = pi / tan(pi x)
    const M r = kPi / tan(kPi * x);
    x = M(1) - x;
    result = -r;
  }
  while (x < M(10)) {
    result -= M(1) / x;
    x += M(1);
  }
  if (x == M(10)) return result + M(2.25175258906672110764);
  // Asymptotic series.
  M y = 0;
  if (x < M(1e17)) {
    const M z = M(1) / (x * x);
    y = z * (M(8.33333333333333333333E-2) +
             z * (M(-8.33333333333333333333E-3) +
                  z * (M(3.96825396825396825397E-3) +
                       z * (M(-4.16666666666666666667E-3) +
                            z * (M(7.57575757575757575758E-3) +
                                 z * (M(-2.10927960927960927961E-2) + z * M(8.33333333333333333333E-2)))))));
  }
  return result + log(x) - M(0.5) / x - y;
}

/// Hurwitz zeta(s, q) by Euler–Maclaurin summation (Cephes' zeta).
template <class M>
__device__ inline M zeta(M s, M q) {
  constexpr M kMachEp = sizeof(M) == 4 ? M(1.19209290e-7) : M(1.11022302462515654042e-16);
  const M A[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                 7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                 -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18};
  if (s == M(1)) return cuda::std::numeric_limits<M>::infinity();
  if (s < M(1)) return cuda::std::numeric_limits<M>::quiet_NaN();
  if (q <= M(0)) {
    if (q == floor(q)) return cuda::std::numeric_limits<M>::infinity();
    if (s != floor(s)) return cuda::std::numeric_limits<M>::quiet_NaN();
  }
  M sum = pow(q, -s);
  M a = q;
  int i = 0;
  M b = 0;
  while (i < 9 || a <= M(9)) {
    i += 1;
    a += M(1);
    b = pow(a, -s);
    sum += b;
    if (fabs(b / sum) < kMachEp) return sum;
  }
  const M w = a;
  sum += b * w / (s - M(1));
  sum -= M(0.5) * b;
  M t;
  M k = 0;
  M aa = 1;
  for (int j = 0; j < 12; ++j) {
    aa *= s + k;
    b /= w;
    t = aa * b / A[j];
    sum += t;
    if (fabs(t / sum) < kMachEp) return sum;
    k += M(1);
    aa *= s + k;
    b /= w;
    k += M(1);
  }
  return sum;
}

/// polygamma(n, x) for n >= 0.
template <class M>
__device__ inline M polygamma(int n, M x) {
  if (n == 0) return digamma(x);
  if (n == 1) {
    // trigamma (ATen's calc_trigamma)
    constexpr M kPi = M(3.14159265358979323846);
    M sign = 1, result = 0;
    if (x < M(0.5)) {
      sign = -1;
      const M s = sin(kPi * x);
      result -= (kPi * kPi) / (s * s);
      x = M(1) - x;
    }
    for (int i = 0; i < 6; ++i) {
      result += M(1) / (x * x);
      x += M(1);
    }
    const M ixx = M(1) / (x * x);
    result += (M(1) + M(1) / (M(2) * x) + ixx * (M(1) / M(6) - ixx * (M(1) / M(30) - ixx * (M(1) / M(42))))) / x;
    return sign * result;
  }
  // (-1)^(n+1) n! zeta(n+1, x)
  M fact = 1;
  for (int i = 2; i <= n; ++i) fact *= M(i);
  return ((n % 2) ? M(1) : M(-1)) * fact * zeta(M(n + 1), x);
}

}  // namespace baracuda::kern
