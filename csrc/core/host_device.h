// Lets the core formulas compile both into the CPU extension and into .cu files.
#pragma once
#if defined(__CUDACC__)
#define DARA_HD __host__ __device__ __forceinline__
#else
#define DARA_HD inline
#endif
