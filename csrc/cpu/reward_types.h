// The reward dtypes the CPU kernel takes. The two passes are instantiated for
// each in a file of their own (accumulate_cpu.cpp, apply_cpu.cpp), so a build
// compiles them in parallel; the headers declare them extern.
#pragma once
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#define DARA_REWARD_TYPES(X) X(float) X(double) X(c10::Half) X(c10::BFloat16)
