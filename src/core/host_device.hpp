#pragma once
// HEED_HOST_DEVICE: a function for host and device code alike (inline on the host, forced
// inline on both sides under nvcc), for the headers the kernels and the host share.

#if defined(__CUDACC__)
#define HEED_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define HEED_HOST_DEVICE inline
#endif
