// The resolved options as the kernels see them. The order of the packed
// vector is fixed by dara_kernels/options.py (AdvantageOptions.kernel_vector).
#pragma once
#include "host_device.h"

namespace dara {

enum Method : int {
  kGrpo = 0, kGdpo = 1, kStatic = 2, kDara = 3, kDvao = 4, kSaw = 5, kSaMrpo = 6, kGd2poHard = 7
};
enum BatchNorm : int { kNoBatchNorm = 0, kResponseNorm = 1, kTokenNorm = 2 };

constexpr int kNumOptions = 14;

struct Options {
  int method;
  double eps;
  bool unbiased;
  bool scale_by_std;
  int batch_norm;
  double bn_eps;
  bool nan_to_zero;
  double active_tol;
  double alpha;
  double density_floor;
  double saw_delta;
  double sa_gamma;
  bool apply_query_scale;
  bool singleton_verl;

  DARA_HD bool combined_column() const { return method == kGrpo; }
  DARA_HD bool group_weighted() const { return method == kDvao; }
  DARA_HD bool drops_conflicts() const { return method == kGd2poHard; }
};

DARA_HD Options options_from_vector(const double* v) {
  Options o;
  o.method = static_cast<int>(v[0]);
  o.eps = v[1];
  o.unbiased = v[2] != 0.0;
  o.scale_by_std = v[3] != 0.0;
  o.batch_norm = static_cast<int>(v[4]);
  o.bn_eps = v[5];
  o.nan_to_zero = v[6] != 0.0;
  o.active_tol = v[7];
  o.alpha = v[8];
  o.density_floor = v[9];
  o.saw_delta = v[10];
  o.sa_gamma = v[11];
  o.apply_query_scale = v[12] != 0.0;
  o.singleton_verl = v[13] != 0.0;
  return o;
}

}  // namespace dara
