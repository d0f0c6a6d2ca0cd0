/* hostdev.h — ST_HD marks an inline function of a core header that the CUDA backend compiles for
 * the device as well (core/rng.h's Philox, core/half.h's bf16 rounding): one definition, so what a
 * GPU draws and rounds is the CPU's bit for bit. Empty in C. */
#ifndef ST_CORE_HOSTDEV_H
#define ST_CORE_HOSTDEV_H

#ifdef __CUDACC__
#define ST_HD __host__ __device__
#else
#define ST_HD
#endif

#endif
