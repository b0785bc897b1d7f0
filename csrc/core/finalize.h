// Finalize: K-sized formulas from the (possibly all-reduced) accumulators to
// densities, weights (docs/spec.md#weights), the batch statistics
// (docs/spec.md#batch-normalisation) and the affine map that apply uses:
// Ahat = (s - shift) * scale.
#pragma once
#include <cmath>
#include <cstdint>

#include "generated_tables.h"
#include "host_device.h"

namespace dara {

struct FinalizeInputs {
  const double* acc;      // AccumulatorLayout::size()
  const double* extrema;  // AccumulatorLayout::extrema_size()
  const double* base;     // b_k, [K]
  const double* bounds;   // [K, 2] (lo, hi) or nullptr
};

struct FinalizeOutputs {
  float* density;
  float* weights;
  float* energy;
  float* weighted_energy;
  int64_t* active_groups;
  int64_t* num_groups;
  int64_t* informative_groups;
  int64_t* sum_informative_groups;
  int64_t* conflict_groups;
  float* batch_mean;
  float* batch_std;
  double* combine;      // [C] coefficients of the combined columns in s_j
  double* shift_scale;  // [2]
};

DARA_HD double raw_mean(const AccumulatorLayout& L, const double* acc, int k) {
  double n = acc[L.raw_count(k)];
  return n > 0.0 ? acc[L.raw_sum(k)] / n : 0.0;
}

DARA_HD double raw_std(const AccumulatorLayout& L, const double* acc, int k) {
  double n = acc[L.raw_count(k)];
  if (n < 2.0) return 0.0;
  double mean = acc[L.raw_sum(k)] / n;
  double sum_sq = acc[L.raw_sum_sq(k)];
  double ss = sum_sq - n * mean * mean;
  // Below this, ss is the rounding error of sum_sq (a constant reward), not spread.
  return ss > 1e-12 * sum_sq ? sqrt(ss / (n - 1.0)) : 0.0;
}

DARA_HD double lower_bound(const AccumulatorLayout& L, const FinalizeInputs& in, int k) {
  return in.bounds ? in.bounds[2 * k] : -in.extrema[L.max_negated_reward(k)];
}

DARA_HD double upper_bound(const AccumulatorLayout& L, const FinalizeInputs& in, int k) {
  return in.bounds ? in.bounds[2 * k + 1] : in.extrema[L.max_reward(k)];
}

// DARA: w_k = b_k min(max_weight, (pi'_k / max_l pi'_l)^(-alpha)), with
// pi'_k = max(pi_k, density_floor); the ratio is 0 when every pi'_l is, so a
// reward active nowhere gets b_k max_weight (pow(0, -alpha) is +inf).
DARA_HD void dara_weights(const Options& o, const double* base, const double* density, int K, double* w) {
  double top = 0.0;
  for (int k = 0; k < K; ++k) top = fmax(top, fmax(density[k], o.density_floor));
  for (int k = 0; k < K; ++k) {
    const double ratio = top > 0.0 ? fmax(density[k], o.density_floor) / top : 0.0;
    w[k] = base[k] * fmin(o.max_weight, pow(ratio, -o.alpha));
  }
}

// Writes w_k (docs/spec.md#weights) into `w`.
DARA_HD void method_weights(const Options& o, const AccumulatorLayout& L, const FinalizeInputs& in,
                            const double* density, double* w) {
  const int K = L.K;
  const double* acc = in.acc;
  if (o.method == kDara) {
    dara_weights(o, in.base, density, K, w);
  } else if (o.method == kSaw) {
    double cv_total = 0.0;
    for (int k = 0; k < K; ++k) {
      double shifted_mean = raw_mean(L, acc, k) - lower_bound(L, in, k) + o.saw_delta;
      bool defined = acc[L.raw_count(k)] > 0.0 && shifted_mean != 0.0;
      w[k] = defined ? raw_std(L, acc, k) / shifted_mean : 0.0;
      cv_total += w[k];
    }
    for (int k = 0; k < K; ++k) w[k] = cv_total != 0.0 ? in.base[k] * K * w[k] / cv_total : 0.0;
  } else if (o.method == kSaMrpo) {
    for (int k = 0; k < K; ++k) {
      double lo = lower_bound(L, in, k), span = upper_bound(L, in, k) - lo;
      double sat = 0.0;
      if (acc[L.raw_count(k)] > 0.0 && span > 0.0) {
        sat = fmin(fmax((raw_mean(L, acc, k) - lo) / span, 0.0), 1.0);
      }
      w[k] = in.base[k] * pow(1.0 - sat, o.sa_gamma);
    }
  } else {
    for (int k = 0; k < K; ++k) w[k] = in.base[k];
  }
}

// `scratch` holds 2K doubles.
DARA_HD void finalize(const Options& o, const AccumulatorLayout& L, const FinalizeInputs& in,
                      const FinalizeOutputs& out, double* scratch) {
  const int K = L.K, C = L.C;
  const double* acc = in.acc;
  const double groups = acc[L.groups()];
  double* density = scratch;
  double* w = scratch + K;
  for (int k = 0; k < K; ++k) {
    density[k] = groups > 0.0 ? acc[L.active(k)] / groups : 0.0;
    out.density[k] = static_cast<float>(density[k]);
    out.active_groups[k] = static_cast<int64_t>(acc[L.active(k)]);
    out.energy[k] = static_cast<float>(acc[L.energy(k)]);
  }
  *out.num_groups = static_cast<int64_t>(groups);
  *out.informative_groups = static_cast<int64_t>(acc[L.informative_groups()]);
  *out.sum_informative_groups = static_cast<int64_t>(acc[L.sum_informative_groups()]);
  *out.conflict_groups = static_cast<int64_t>(acc[L.conflict_groups()]);

  if (o.group_weighted()) {
    for (int k = 0; k < K; ++k) {
      out.weights[k] = static_cast<float>(groups > 0.0 ? acc[L.group_weight(k)] / groups : 0.0);
      out.weighted_energy[k] = static_cast<float>(acc[L.cross(k, k)]);
      out.combine[k] = 1.0;
    }
  } else if (o.one_column()) {
    method_weights(o, L, in, density, w);
    for (int k = 0; k < K; ++k) {
      out.weights[k] = static_cast<float>(w[k]);
      out.weighted_energy[k] = static_cast<float>(w[k] * w[k] * acc[L.energy(k)]);
    }
    out.combine[0] = 1.0;
  } else {
    // Reward k's part of s_j is u_k A_jk + v_k [A_jk]_+ (docs/spec.md#aggregation):
    // w_k A_jk, or A_jk + (w_k - 1) [A_jk]_+ under positive calibration, with
    // b_k in place of a DARA weight w_k where pi_k = 0.
    method_weights(o, L, in, density, w);
    const bool positive = o.positive_parts();
    if (positive) out.combine[0] = 1.0;
    for (int k = 0; k < K; ++k) {
      const double applied = o.method == kDara && density[k] == 0.0 ? in.base[k] : w[k];
      const double u = positive ? 1.0 : applied, v = positive ? applied - 1.0 : 0.0;
      if (positive) {
        out.combine[1 + k] = v;
      } else {
        out.combine[k] = u;
      }
      // sum_j (u A + v [A]_+)^2, where sum_j A [A]_+ = sum_j [A]_+^2.
      const double positive_energy = positive ? acc[L.cross(1 + k, 1 + k)] : 0.0;
      out.weights[k] = static_cast<float>(w[k]);
      out.weighted_energy[k] = static_cast<float>(u * u * acc[L.energy(k)] + (2.0 * u * v + v * v) * positive_energy);
    }
  }

  double sum = 0.0, sum_sq = 0.0, token_sum = 0.0, token_sum_sq = 0.0;
  for (int c = 0; c < C; ++c) {
    sum += out.combine[c] * acc[L.signal(c)];
    token_sum += out.combine[c] * acc[L.token_signal(c)];
    for (int d = 0; d < C; ++d) {
      double cd = out.combine[c] * out.combine[d];
      sum_sq += cd * acc[L.cross(c, d)];
      token_sum_sq += cd * acc[L.token_cross(c, d)];
    }
  }

  double mean, std, shift = 0.0, scale = 1.0;
  if (o.batch_norm == kTokenNorm) {
    double total = acc[L.token_total()];
    mean = total > 0.0 ? token_sum / total : 0.0;
    double var = total > 1.0 ? fmax(token_sum_sq - total * mean * mean, 0.0) / (total - 1.0) : 0.0;
    std = sqrt(var);
    shift = mean;
    scale = 1.0 / sqrt(var + o.bn_eps);
  } else {
    double n = acc[L.rows()];
    mean = n > 0.0 ? sum / n : 0.0;
    std = n >= 2.0 ? sqrt(fmax(sum_sq - n * mean * mean, 0.0) / (n - 1.0)) : 0.0;
    if (o.batch_norm == kResponseNorm) {
      shift = mean;
      scale = 1.0 / (std + o.bn_eps);
    }
  }
  *out.batch_mean = static_cast<float>(mean);
  *out.batch_std = static_cast<float>(std);
  out.shift_scale[0] = shift;
  out.shift_scale[1] = scale;
}

}  // namespace dara
