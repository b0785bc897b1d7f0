// Finalize: K-sized formulas from the (possibly all-reduced) accumulators to
// densities, weights (docs/spec.md#weights), the batch statistics
// (docs/spec.md#batch-normalisation) and the affine map that apply uses:
// Ahat = (s - shift) * scale.
#pragma once
#include <cmath>
#include <cstdint>

#include "host_device.h"
#include "wire.h"

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

// Writes w_k (docs/spec.md#weights) into `w`.
DARA_HD void method_weights(const Options& o, const AccumulatorLayout& L, const FinalizeInputs& in,
                            const double* density, double* w) {
  const int K = L.K;
  const double* acc = in.acc;
  if (o.method == kDara) {
    double total = 0.0;
    int present = 0;
    for (int k = 0; k < K; ++k) {
      if (density[k] > 0.0) {
        total += pow(fmax(density[k], o.density_floor), -o.alpha);
        ++present;
      }
    }
    for (int k = 0; k < K; ++k) {
      w[k] = density[k] > 0.0 ? in.base[k] * pow(fmax(density[k], o.density_floor), -o.alpha) / (total / present) : 0.0;
    }
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

  if (o.group_weighted()) {
    for (int k = 0; k < K; ++k) {
      out.weights[k] = static_cast<float>(groups > 0.0 ? acc[L.group_weight(k)] / groups : 0.0);
      out.weighted_energy[k] = static_cast<float>(acc[L.cross(k, k)]);
      out.combine[k] = 1.0;
    }
  } else {
    method_weights(o, L, in, density, w);
    for (int k = 0; k < K; ++k) {
      out.weights[k] = static_cast<float>(w[k]);
      out.weighted_energy[k] = static_cast<float>(w[k] * w[k] * acc[L.energy(k)]);
    }
    if (o.combined_column()) {
      out.combine[0] = 1.0;
    } else {
      for (int k = 0; k < K; ++k) out.combine[k] = w[k];
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
