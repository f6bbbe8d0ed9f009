// BinaryPC CPU scoring and selection kernels (icml26.binarypc.kernel builds this file lazily
// with torch.utils.cpp_extension and caches the build; the tensor path in select.py is the
// reference these functions reproduce bit for bit).
//
// bpc_scores: s[b, h, t] = max over the GQA group g of float(S_int[g, t]) * scale[g], where
//   S_int[g, t] = sum_i pint[g, i] * sign_i(code[t]) (sign +1 for a 0 bit, -1 for a 1 bit) is an
//   exact integer computed from 9 popcounts over the query's bit planes (see below).
// bpc_select: the k indices kept per (b, h), in ascending order, under the total order
//   (allowed decode tokens) > (allowed forced tokens) > (allowed scored tokens, by score)
//   > (not allowed tokens), ties always to the later token; NaN scores rank below -inf.
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

constexpr int32_t kBins = 4096;

inline int64_t ordered(float x) {
  // a monotone int32 image of a float32 (-0 == +0); NaN below -inf
  if (std::isnan(x)) return static_cast<int64_t>(std::numeric_limits<int32_t>::min());
  x = x + 0.0f;
  int32_t i;
  std::memcpy(&i, &x, sizeof(i));
  if (i < 0) i ^= 0x7fffffff;
  // i is in (INT32_MIN, INT32_MAX]; -inf maps above INT32_MIN, so NaN stays the lowest
  return static_cast<int64_t>(i);
}

}  // namespace

torch::Tensor bpc_scores(torch::Tensor pint, torch::Tensor scale, torch::Tensor codes) {
  TORCH_CHECK(pint.dim() == 3 && pint.scalar_type() == torch::kInt32, "pint must be (B, Hq, bits) int32");
  TORCH_CHECK(scale.dim() == 2 && scale.scalar_type() == torch::kFloat32, "scale must be (B, Hq) float32");
  TORCH_CHECK(codes.dim() == 3 && codes.scalar_type() == torch::kInt64, "codes must be (B, Hkv, P) int64");
  pint = pint.contiguous();
  scale = scale.contiguous();
  const int64_t B = pint.size(0), Hq = pint.size(1), bits = pint.size(2);
  const int64_t Bc = codes.size(0), Hkv = codes.size(1), P = codes.size(2);
  TORCH_CHECK(bits <= 64, "at most 64 bits");
  TORCH_CHECK(Hkv > 0 && Hq % Hkv == 0, "Hq must be a multiple of Hkv");
  TORCH_CHECK(Bc == 1 || Bc == B, "codes batch must be 1 or B");
  TORCH_CHECK(codes.stride(2) == 1 || P <= 1, "codes must be contiguous along tokens");
  const int64_t G = Hq / Hkv;
  auto out = torch::empty({B, Hkv, P}, torch::dtype(torch::kFloat32));
  const int32_t* pp = pint.data_ptr<int32_t>();
  const float* sc = scale.data_ptr<float>();
  const int64_t* cp = codes.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const int64_t cs0 = codes.stride(0), cs1 = codes.stride(1);
  // Bit planes of u_b = p_b + 127 in [0, 254]: with c_b the code bits,
  //   sum_b p_b (1 - 2 c_b) = sum_b p_b - 2 sum_j 2^j popcount(c & M_j) + 254 popcount(c),
  // an exact integer: 9 popcounts per code and query head (vectorized with VPOPCNTQ).
  at::parallel_for(0, B * Hkv, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t b = r / Hkv, h = r % Hkv;
      const uint64_t* c = reinterpret_cast<const uint64_t*>(cp + (Bc == 1 ? 0 : b) * cs0 + h * cs1);
      float* o = op + r * P;
      for (int64_t g = 0; g < G; ++g) {
        const int32_t* p = pp + (b * Hq + h * G + g) * bits;
        uint64_t M[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t sp = 0;
        for (int64_t i = 0; i < bits; ++i) {
          const uint32_t u = static_cast<uint32_t>(p[i] + 127);
          sp += p[i];
          for (int j = 0; j < 8; ++j)
            if ((u >> j) & 1u) M[j] |= uint64_t(1) << i;
        }
        const uint64_t M0 = M[0], M1 = M[1], M2 = M[2], M3 = M[3], M4 = M[4], M5 = M[5],
                       M6 = M[6], M7 = M[7];
        const float f = sc[b * Hq + h * G + g];
        const int64_t spc = sp;
        if (g == 0) {
          for (int64_t t = 0; t < P; ++t) {
            const uint64_t x = c[t];
            const int64_t w = __builtin_popcountll(x & M0) + 2 * __builtin_popcountll(x & M1) +
                              4 * __builtin_popcountll(x & M2) + 8 * __builtin_popcountll(x & M3) +
                              16 * __builtin_popcountll(x & M4) + 32 * __builtin_popcountll(x & M5) +
                              64 * __builtin_popcountll(x & M6) + 128 * __builtin_popcountll(x & M7);
            const int64_t s = spc - 2 * w + 254 * __builtin_popcountll(x);
            o[t] = static_cast<float>(static_cast<int32_t>(s)) * f;
          }
        } else {
          for (int64_t t = 0; t < P; ++t) {
            const uint64_t x = c[t];
            const int64_t w = __builtin_popcountll(x & M0) + 2 * __builtin_popcountll(x & M1) +
                              4 * __builtin_popcountll(x & M2) + 8 * __builtin_popcountll(x & M3) +
                              16 * __builtin_popcountll(x & M4) + 32 * __builtin_popcountll(x & M5) +
                              64 * __builtin_popcountll(x & M6) + 128 * __builtin_popcountll(x & M7);
            const int64_t s = spc - 2 * w + 254 * __builtin_popcountll(x);
            const float v = static_cast<float>(static_cast<int32_t>(s)) * f;
            o[t] = v > o[t] ? v : o[t];
          }
        }
      }
    }
  });
  return out;
}

torch::Tensor bpc_select(torch::Tensor scores, torch::Tensor forced, torch::Tensor allowed,
                         int64_t n_total, int64_t k) {
  TORCH_CHECK(scores.dim() == 3 && scores.scalar_type() == torch::kFloat32, "scores must be (B, Hkv, P) float32");
  scores = scores.contiguous();
  const int64_t B = scores.size(0), Hkv = scores.size(1), P = scores.size(2);
  TORCH_CHECK(n_total >= P, "n_total must be >= P");
  TORCH_CHECK(n_total < (int64_t(1) << 31), "at most 2^31 tokens");
  k = std::min(k, n_total);
  TORCH_CHECK(k >= 0, "k must be >= 0");
  const bool has_f = forced.defined() && forced.numel() > 0;
  const bool has_a = allowed.defined() && allowed.numel() > 0;
  int64_t Bf = 1;
  if (has_f) {
    TORCH_CHECK(forced.dim() == 3 && forced.scalar_type() == torch::kBool && forced.size(1) == Hkv && forced.size(2) == P,
                "forced must be (B, Hkv, P) bool");
    forced = forced.contiguous();
    Bf = forced.size(0);
    TORCH_CHECK(Bf == 1 || Bf == B, "forced batch must be 1 or B");
  }
  if (has_a) {
    TORCH_CHECK(allowed.dim() == 2 && allowed.scalar_type() == torch::kBool && allowed.size(0) == B && allowed.size(1) == n_total,
                "allowed must be (B, n_total) bool");
    allowed = allowed.contiguous();
  }
  auto out = torch::empty({B, Hkv, k}, torch::dtype(torch::kInt64));
  const float* sp = scores.data_ptr<float>();
  const bool* fp = has_f ? forced.data_ptr<bool>() : nullptr;
  const bool* ap = has_a ? allowed.data_ptr<bool>() : nullptr;
  int64_t* op = out.data_ptr<int64_t>();
  at::parallel_for(0, B * Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> keys, sel;
    std::vector<uint16_t> bins;
    std::vector<int64_t> hist(kBins + 1);
    keys.reserve(static_cast<size_t>(P));
    sel.reserve(static_cast<size_t>(k));
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t b = r / Hkv, h = r % Hkv;
      const float* s = sp + r * P;
      const bool* f = has_f ? fp + ((Bf == 1 ? 0 : b) * Hkv + h) * P : nullptr;
      const bool* a = has_a ? ap + b * n_total : nullptr;
      sel.clear();
      int64_t room = k;
      // 1. decode tokens (no score), latest first
      for (int64_t i = n_total - 1; i >= P && room > 0; --i)
        if (!a || a[i]) { sel.push_back(i); --room; }
      // 2. forced scored tokens, latest first
      if (f && room > 0)
        for (int64_t i = P - 1; i >= 0 && room > 0; --i)
          if (f[i] && (!a || a[i])) { sel.push_back(i); --room; }
      // 3. the other allowed scored tokens by (score, index): a 4096-bin histogram of the
      //    scores (a monotone map, so every bin above the boundary bin is kept whole), then an
      //    exact partial selection inside the boundary bin only. Forced and masked tokens get
      //    the bin kBins, which the histogram search skips. Every loop but the last two is
      //    branch-free (vectorized).
      if (room > 0) {
        const float inf = std::numeric_limits<float>::infinity();
        float lo_v = inf, hi_v = -inf;
        for (int64_t i = 0; i < P; ++i) {
          const float v = s[i];
          const bool use = ((v - v) == 0.0f) && !(f && f[i]) && !(a && !a[i]);
          lo_v = (use && v < lo_v) ? v : lo_v;
          hi_v = (use && v > hi_v) ? v : hi_v;
        }
        const float range = hi_v - lo_v;
        const bool binned = std::isfinite(range) && range > 0.0f;
        const float inv = binned ? static_cast<float>(kBins - 1) / range : 0.0f;
        const float top = static_cast<float>(kBins - 1);
        bins.resize(static_cast<size_t>(P));
        for (int64_t i = 0; i < P; ++i) {
          const float v = s[i];
          float x = (v - lo_v) * inv;
          x = x > 0.0f ? x : 0.0f;  // also NaN (comparisons are false) and -inf
          x = x < top ? x : top;    // also +inf
          const bool skip = (f && f[i]) || (a && !a[i]);
          bins[i] = static_cast<uint16_t>(skip ? kBins : static_cast<int32_t>(x));
        }
        std::fill(hist.begin(), hist.end(), 0);
        for (int64_t i = 0; i < P; ++i) ++hist[bins[i]];
        const int64_t m = P - hist[kBins];
        if (m <= room) {
          for (int64_t i = 0; i < P; ++i)
            if (bins[i] != kBins) sel.push_back(i);
          room -= m;
        } else {
          int32_t edge = kBins - 1;
          int64_t above = 0;
          while (above + hist[edge] < room) above += hist[edge--];
          keys.clear();
          for (int64_t i = 0; i < P; ++i) {
            const int32_t bi = bins[i];
            if (bi == kBins) continue;
            if (bi > edge) sel.push_back(i);
            else if (bi == edge) keys.push_back(ordered(s[i]) * (int64_t(1) << 31) + i);
          }
          const int64_t need = room - above;
          std::nth_element(keys.begin(), keys.begin() + need, keys.end(), std::greater<int64_t>());
          for (int64_t j = 0; j < need; ++j) sel.push_back(keys[j] & ((int64_t(1) << 31) - 1));
          room = 0;
        }
      }
      // 4. tokens that are not allowed (the caller masks them out), latest first
      for (int64_t i = n_total - 1; i >= 0 && room > 0; --i)
        if (a && !a[i]) { sel.push_back(i); --room; }
      std::sort(sel.begin(), sel.end());
      std::memcpy(op + r * k, sel.data(), sizeof(int64_t) * static_cast<size_t>(k));
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bpc_scores", &bpc_scores, "BinaryPC code scores (int8 query, byte LUT)");
  m.def("bpc_select", &bpc_select, "top-k selection with the later-token tie rule");
}
