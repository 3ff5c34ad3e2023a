// Does compute-sanitizer's racecheck order shared-memory accesses across a barrier when the
// same threads also hand turns over with `bar.arrive`?
//
// FlashAttention with two consumer warpgroups that take turns at the tensor cores
// (passes/pipeline_loops.py, tilelab.cuh's turn_wait / turn_pass) reports RAW hazards under
// racecheck between one warpgroup's stores of the output tile and the other's loads of it,
// although `bar.sync 1, 256` of all 256 consumer threads stands between them - and its
// results are right. This program is that pattern and nothing else: two warpgroups pass
// turns back and forth on named barriers 14 and 15 for a few iterations, then each thread
// writes its own row of a shared tile, all 256 meet at barrier 1, and each thread reads a
// row of the other warpgroup. Four ways to hand a turn over:
//
//   0  bar.arrive with the barrier's id in a register (as tilelab.cuh does)
//   1  bar.arrive with immediate ids (a warp-uniform branch picks the instruction)
//   2  no turns at all
//   3  bar.sync instead of bar.arrive: the one handing over waits for the other too
//
// The order of the tile's stores and loads is the same in all four: barrier 1. Each variant
// checks its results against variant 2's. Run on a Hopper GPU:
//
//   nvcc -arch=sm_90a -lineinfo -o /tmp/racecheck_bar_arrive scripts/racecheck_bar_arrive.cu
//   compute-sanitizer --tool racecheck --racecheck-report all /tmp/racecheck_bar_arrive 1
//
// On an H200 (CUDA 13.0's compute-sanitizer, 2026-12-06; this program before it compared
// results) variants 0 and 1 reported RAW hazards between the tile's stores and loads
// (thousands a launch), 2 and 3 none. So racecheck loses the order of barrier 1 once a thread
// has used bar.arrive: that is why `python -m tilelab.testing.sanitize` counts racecheck's
// reports apart in kernels that hand turns over (docs/RELIABILITY.md). synccheck (H100,
// 2026-12-07) flags variant 3 alone ("Divergent thread(s) in block", and stops the launch):
// it takes two bar.sync on one named barrier from different instructions for divergence.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

constexpr int kThreads = 256;  // two warpgroups; a third, idle one is launched as in the kernels
constexpr int kBlocks = 8;
constexpr int kIterations = 13;

__device__ __forceinline__ int warpgroup() { return threadIdx.x >> 7; }

// wait for this warpgroup's turn: barrier 14 + warpgroup, completed by the other's hand-over
template <int V> __device__ __forceinline__ void wait_turn() {
  if (V == 0) {
    asm volatile("bar.sync %0, 256;\n" :: "r"(14 + warpgroup()) : "memory");
  } else if (V == 1 || V == 3) {
    if (warpgroup()) asm volatile("bar.sync 15, 256;\n" ::: "memory");
    else asm volatile("bar.sync 14, 256;\n" ::: "memory");
  }
}

// hand the turn to the other warpgroup
template <int V> __device__ __forceinline__ void pass_turn() {
  if (V == 0) {
    asm volatile("bar.arrive %0, 256;\n" :: "r"(15 - warpgroup()) : "memory");
  } else if (V == 1) {
    if (warpgroup()) asm volatile("bar.arrive 14, 256;\n" ::: "memory");
    else asm volatile("bar.arrive 15, 256;\n" ::: "memory");
  } else if (V == 3) {
    if (warpgroup()) asm volatile("bar.sync 14, 256;\n" ::: "memory");
    else asm volatile("bar.sync 15, 256;\n" ::: "memory");
  }
}

__device__ __forceinline__ void both_warpgroups() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

template <int V> __global__ void turns_then_tile(float* out) {
  __shared__ float tile[kThreads * 4];
  if (threadIdx.x >= kThreads) return;
  float acc = threadIdx.x;
  both_warpgroups();
  if (warpgroup() == 1) wait_turn<V>();  // the first warpgroup goes first
  for (int i = 0; i < kIterations; ++i) {
    acc = acc * 1.0001f + i;  // the part done in turns (S = Q K^T in FlashAttention)
    pass_turn<V>();
    acc = acc * 0.9999f;      // the part done side by side (the softmax)
    wait_turn<V>();
    acc += 1.0f;              // in turns again (O += P V)
  }
  if (warpgroup() == 0) pass_turn<V>();  // for the second warpgroup's last wait
  both_warpgroups();
  for (int j = 0; j < 4; ++j) tile[threadIdx.x * 4 + j] = acc + j;  // each thread its row
  both_warpgroups();
  int other = (threadIdx.x + 128) % kThreads;  // a row the other warpgroup wrote
  float sum = 0;
  for (int j = 0; j < 4; ++j) sum += tile[other * 4 + j];
  out[blockIdx.x * kThreads + threadIdx.x] = sum;
}

int main(int argc, char** argv) {
  int only = argc > 1 ? atoi(argv[1]) : -1;
  const int n = kBlocks * kThreads;
  float *device_out, expected[n], got[n];
  cudaMalloc(&device_out, sizeof(expected));
  turns_then_tile<2><<<kBlocks, kThreads + 128>>>(device_out);
  cudaMemcpy(expected, device_out, sizeof(expected), cudaMemcpyDeviceToHost);
  int failures = 0;
  for (int v = 0; v < 4; ++v) {
    if (only >= 0 && v != only) continue;
    cudaMemset(device_out, 0, sizeof(got));
    if (v == 0) turns_then_tile<0><<<kBlocks, kThreads + 128>>>(device_out);
    if (v == 1) turns_then_tile<1><<<kBlocks, kThreads + 128>>>(device_out);
    if (v == 2) turns_then_tile<2><<<kBlocks, kThreads + 128>>>(device_out);
    if (v == 3) turns_then_tile<3><<<kBlocks, kThreads + 128>>>(device_out);
    cudaError_t err = cudaMemcpy(got, device_out, sizeof(got), cudaMemcpyDeviceToHost);
    bool same = err == cudaSuccess && memcmp(got, expected, sizeof(got)) == 0;
    printf("variant %d: %s, %s\n", v, cudaGetErrorString(err),
           same ? "results as without turns" : "RESULTS DIFFER");
    failures += !same;
  }
  cudaFree(device_out);
  return failures ? 1 : 0;
}
