#!/usr/bin/env python3
"""sgemm_rate.py - single-precision GEMM rate of OpenBLAS on one thread.

    python3 bench/sgemm_rate.py [--n 1024] [--repeat 20] [--threads 1]

What: the GFLOPS (2 n^3 floating-point operations per call, 10^9 per second)
of OpenBLAS's cblas_sgemm on n x n row-major matrices with one thread (or
--threads T of OpenBLAS's own), the
median of --repeat calls after one warm-up call: the CPU figure docs/boards.md
compares boards with. OpenBLAS picks its kernel family from the CPU, or from
OPENBLAS_CORETYPE (the tests pin Haswell): run it both ways, e.g.
`OPENBLAS_CORETYPE=Haswell python3 bench/sgemm_rate.py` and
`env -u OPENBLAS_CORETYPE python3 bench/sgemm_rate.py`.

How: ctypes on Debian's libopenblas.so.0 (libopenblas0-pthread, which the
trainer links); openblas_set_num_threads(T); the matrices are ctypes float
arrays. Prints the kernel family (openblas_get_corename) and the rate.
"""
import argparse
import ctypes
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_set_num_threads(a.threads)
    blas.openblas_get_corename.restype = ctypes.c_char_p
    n = a.n
    mat = ctypes.c_float * (n * n)
    x, y, z = mat(*([1.0] * (n * n))), mat(*([0.5] * (n * n))), mat()
    f = ctypes.c_float
    args = (101, 111, 111, n, n, n, f(1.0), x, n, y, n, f(0.0), z, n)
    blas.cblas_sgemm(*args)  # warm-up: page faults, packing buffers
    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        blas.cblas_sgemm(*args)
        times.append(time.perf_counter() - t0)
    gflops = 2.0 * n ** 3 / statistics.median(times) / 1e9
    print(f"OpenBLAS {blas.openblas_get_corename().decode()} kernels, {a.threads} thread(s), "
          f"sgemm n={n}: {gflops:.1f} GFLOPS (median of {a.repeat})")


if __name__ == "__main__":
    main()
