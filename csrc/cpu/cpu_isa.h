// The row and group loops run in the widest instruction set the CPU has:
// each chunk's work is compiled twice, for x86-64-v3 (AVX2, FMA) and for the
// baseline the package is built for, and the machine picks one at the first
// call. `flatten` pulls every callee of the chunk into that copy, so the whole
// loop is compiled for the wide instruction set. The build passes
// -ffp-contract=off, so no multiply-add is fused in either copy and both
// give bitwise equal results. DARA_CPU_ISA=baseline forces the baseline copy
// (the tests compare the two).
#pragma once
#include <cstdlib>
#include <cstring>

namespace dara {

#if defined(__x86_64__) && defined(__GNUC__)
#define DARA_WIDE_ISA 1

template <typename F>
__attribute__((target("arch=x86-64-v3"), flatten)) void run_wide(const F& f) {
  f();
}

template <typename F>
__attribute__((flatten)) void run_baseline(const F& f) {
  f();
}

inline bool wide_isa_available() {
  static const bool available = [] {
    const char* forced = std::getenv("DARA_CPU_ISA");
    if (forced && std::strcmp(forced, "baseline") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("x86-64-v3") != 0;
  }();
  return available;
}

template <typename F>
void with_cpu_isa(const F& f) {
  if (wide_isa_available()) {
    run_wide(f);
  } else {
    run_baseline(f);
  }
}

// Loop::run(args...) as a function of its own, once per instruction set. The
// vectoriser handles some loops only there: inlined into a chunk's function,
// it loses track of which arrays may overlap and leaves the loop scalar.
template <typename Loop, typename... Args>
__attribute__((noinline, target("arch=x86-64-v3"))) void run_loop_wide(Args... args) {
  Loop::run(args...);
}

template <typename Loop, typename... Args>
__attribute__((noinline)) void run_loop_baseline(Args... args) {
  Loop::run(args...);
}

template <typename Loop, typename... Args>
void run_loop(Args... args) {
  if (wide_isa_available()) {
    run_loop_wide<Loop>(args...);
  } else {
    run_loop_baseline<Loop>(args...);
  }
}
#else
template <typename F>
void with_cpu_isa(const F& f) {
  f();
}

template <typename Loop, typename... Args>
void run_loop(Args... args) {
  Loop::run(args...);
}
#endif

}  // namespace dara
