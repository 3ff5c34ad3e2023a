// tilelab's device header: the few GPU instructions tilelab emits that plain
// CUDA C does not spell directly. Each function wraps one PTX instruction, so
// the generated kernel reads as a list of named steps and every instruction
// can be looked up in the PTX ISA manual under the same name.
#pragma once
// Headers cost compile time (nvcc parses cuda_fp16.h in about 0.05 s, cuda_bf16.h in 0.1 s,
// cooperative_groups.h in 0.6 s): each comes in where the generated code defines its switch
// (backends/cuda/__init__.py `cuda_source`).
#ifdef TILELAB_FP16
#include <cuda_fp16.h>
#endif
#ifdef TILELAB_BF16
#include <cuda_bf16.h>
#endif
#ifdef TILELAB_SYNC_GRID
#include <cooperative_groups.h>
#endif
#ifdef __CUDACC_RTC__  // NVRTC has no C library headers
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

// A TMA descriptor (CUtensorMap, from the driver's cuda.h): 128 opaque bytes that the host
// encodes (runtime/cuda.py) and passes by value as a `const __grid_constant__` parameter.
// NVRTC has no cuda.h: the same layout is declared here.
#ifdef __CUDACC_RTC__
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };
typedef struct CUtensorMap_st CUtensorMap;
#else
#include <cuda.h>
#endif

namespace tl {

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// ---- ldmatrix: eight 8x8 16-bit matrices' rows, one 16-byte row per lane address,
// land in registers in the layout mma.sync expects. .trans transposes each 8x8.
__device__ __forceinline__ void ldmatrix_x4(void* regs, const void* smem) {
  uint32_t* r = static_cast<uint32_t*>(regs);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(void* regs, const void* smem) {
  uint32_t* r = static_cast<uint32_t*>(regs);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2(void* regs, const void* smem) {
  uint32_t* r = static_cast<uint32_t*>(regs);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(void* regs, const void* smem) {
  uint32_t* r = static_cast<uint32_t*>(regs);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(smem)));
}

// ---- stmatrix (sm_90): ldmatrix's way back. Four 8x8 16-bit matrices go from registers
// to shared memory, each lane giving the address of one 16-byte row: lanes 8q..8q+7 the
// rows of matrix q, whose row r/4, columns 2(r%4) and +1 lane r holds in register q.
// The registers come as 8 of a fragment (pairs 0-1, 2-3, 4-5, 6-7 = matrices 0..3),
// 32-bit floats rounded to nearest here (cvt.rn, as a store of one element rounds) or
// already 16-bit.
__device__ __forceinline__ void stmatrix_x4(void* smem, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(smem_addr(smem)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  uint32_t packed;  // cvt.rn.f16x2.f32 d, a, b: a in the upper half, b in the lower
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}
__device__ __forceinline__ uint32_t pack_bfloat162(float lo, float hi) {
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}
__device__ __forceinline__ void stmatrix_x4_float_as_half(void* smem, const float* r) {
  stmatrix_x4(smem, pack_half2(r[0], r[1]), pack_half2(r[2], r[3]), pack_half2(r[4], r[5]),
              pack_half2(r[6], r[7]));
}
__device__ __forceinline__ void stmatrix_x4_float_as_bfloat16(void* smem, const float* r) {
  stmatrix_x4(smem, pack_bfloat162(r[0], r[1]), pack_bfloat162(r[2], r[3]),
              pack_bfloat162(r[4], r[5]), pack_bfloat162(r[6], r[7]));
}
__device__ __forceinline__ void stmatrix_x4_b16(void* smem, const void* regs) {
  // (16-bit registers: a pair is two halves, not one aligned word)
  const unsigned short* r = static_cast<const unsigned short*>(regs);
  stmatrix_x4(smem, r[0] | (uint32_t(r[1]) << 16), r[2] | (uint32_t(r[3]) << 16),
              r[4] | (uint32_t(r[5]) << 16), r[6] | (uint32_t(r[7]) << 16));
}

// ---- mma.sync m16n8k16: D = A(16x16) * B(16x8) + C, fp32 accumulators.
// a: 8 halves (4 registers), b: 4 halves (2 registers), c: 4 floats, in the PTX fragment order.
#ifdef TILELAB_FP16
__device__ __forceinline__ void mma_m16n8k16(float* c, const half* a, const half* b) {
  const uint32_t* A = reinterpret_cast<const uint32_t*>(a);
  const uint32_t* B = reinterpret_cast<const uint32_t*>(b);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));
}
#endif
#ifdef TILELAB_BF16
__device__ __forceinline__ void mma_m16n8k16(float* c, const __nv_bfloat16* a,
                                             const __nv_bfloat16* b) {
  const uint32_t* A = reinterpret_cast<const uint32_t*>(a);
  const uint32_t* B = reinterpret_cast<const uint32_t*>(b);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));
}
#endif

// ---- wgmma.mma_async (Hopper) runs asynchronously: its accumulators change without the
// compiler seeing it. An empty asm that reads and writes each register keeps the compiler's
// own reads and writes of them on the right side of wgmma.fence and wgmma.wait_group.
template <int N>
__device__ __forceinline__ void wgmma_fence_registers(float* regs) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(regs[i])::"memory");
}

// A read of registers that a loop's wgmma takes as operand A and never writes, placed after
// the loop (passes/keep_wgmma_operands.py): without a read after it, ptxas of CUDA 13.0 may
// give those registers to another value inside the loop. The store runs on a GPU of zero
// SMs only, that is never; ptxas cannot know that, so it keeps the registers.
template <int Words>
__device__ __forceinline__ void keep_registers(const void* regs) {
  const uint32_t* words = static_cast<const uint32_t*>(regs);
  uint32_t sms;
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(sms));
  if (sms == 0) {
#pragma unroll
    for (int i = 0; i < Words; ++i)
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(4 * i), "r"(words[i]) : "memory");
  }
}

// The tensor cores apply a descriptor's swizzle to the address bits, so a swizzled operand
// tile must start on a multiple of its swizzle pattern (8 rows of the swizzle width);
// anything else would be read permuted. Stop the kernel rather than compute garbage.
template <int Bytes>
__device__ __forceinline__ void wgmma_check_aligned(const void* tile) {
  if (smem_addr(tile) % Bytes != 0) __trap();
}

// ---- cp.async: copy global -> shared without passing through registers.
// When `in_bounds` is false the source is not read and the bytes become zero.
template <int Bytes>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool in_bounds) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  int src_bytes = in_bounds ? Bytes : 0;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
                 :: "r"(smem_addr(smem)), "l"(gmem), "n"(Bytes), "r"(src_bytes));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

// ---- mbarrier: a 64-bit counter in shared memory that completes a *phase* when the
// expected arrivals have come and the expected bytes have landed; threads wait on the
// phase's parity (0, 1, 0, ...). One thread initializes it for the whole block.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int arrivals) {
  if (threadIdx.x == 0)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(arrivals));
}
// make the initialized barriers visible to the TMA unit (async proxy) before any copy
__device__ __forceinline__ void mbar_init_fence() {
  if (threadIdx.x == 0) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// before the barrier's memory holds anything else (every thread is past its last wait)
__device__ __forceinline__ void mbar_inval(uint64_t* bar) {
  if (threadIdx.x == 0)
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}
// one arrival that also announces `bytes` more bytes for the current phase
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// the bytes of a coming TMA copy, without an arrival (a T.tma_copy: the program arrives)
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}

// one arrival per warp (lane 0, once the warp's lanes are past their reads): a consumer
// warp telling the producer that it is done with a slot (warp-specialized pipelines)
__device__ __forceinline__ void mbar_arrive_warp(uint64_t* bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}
// one arrival of the calling thread (every thread of a T.ws role arrives itself)
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}
// a barrier of one T.ws role's threads only (named barrier `id`, `threads` of them)
__device__ __forceinline__ void role_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
// a barrier of the first `threads` threads only (named barrier 1): the consumer
// warpgroups of a warp-specialized block, without its producer warpgroup
__device__ __forceinline__ void consumer_sync(int threads) {
  asm volatile("bar.sync 1, %0;\n" :: "r"(threads) : "memory");
}

// two consumer warpgroups taking turns at the tensor cores (passes/pipeline_loops.py,
// _take_turns): named barrier 14 + g is warpgroup g's turn. Each completes with 256
// threads: warpgroup g's 128 waiting for it and the other warpgroup's 128 handing it over.
__device__ __forceinline__ void turn_wait() {
  asm volatile("bar.sync %0, 256;\n" :: "r"(14 + (threadIdx.x >> 7)) : "memory");
}
__device__ __forceinline__ void turn_pass() {
  asm volatile("bar.arrive %0, 256;\n" :: "r"(15 - (threadIdx.x >> 7)) : "memory");
}
// before the loop the second warpgroup waits for the first's first hand-over; after it
// the first hands over once more, for the second's last wait
__device__ __forceinline__ void turn_first() { if (threadIdx.x >> 7) turn_wait(); }
__device__ __forceinline__ void turn_last() { if (!(threadIdx.x >> 7)) turn_pass(); }
// a rotated loop (pipeline_loops._rotated): the second warpgroup hands the first turn over
__device__ __forceinline__ void turn_start() { if (threadIdx.x >> 7) turn_pass(); }

// warp-specialized blocks: the producer warpgroup gives registers back, the consumer
// warpgroups take them (passes/specialize_warps.py); counts are per thread
template <int N> __device__ __forceinline__ void registers_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N));
}
template <int N> __device__ __forceinline__ void registers_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N));
}

// ---- TMA: the Tensor Memory Accelerator copies a box of a global tensor (described by a
// CUtensorMap) into shared memory, swizzled as the map says, zero-filling what lies
// outside the tensor; the barrier's phase completes when the bytes have landed.
// Coordinates are element indices, innermost dimension first.
__device__ __forceinline__ void tma_load(void* smem, const CUtensorMap& map, uint64_t* bar,
                                         int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n"
      :: "r"(smem_addr(smem)), "l"(&map), "r"(smem_addr(bar)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_load(void* smem, const CUtensorMap& map, uint64_t* bar,
                                         int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n"
      :: "r"(smem_addr(smem)), "l"(&map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_load(void* smem, const CUtensorMap& map, uint64_t* bar,
                                         int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
      :: "r"(smem_addr(smem)), "l"(&map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
         "r"(c3) : "memory");
}

// ---- clusters: blocks launched together on neighbouring SMs (`__cluster_dims__`), each
// of which may write into the others' shared memory (pipeline_loops.Cluster). A TMA copy
// with `.multicast::cluster` lands at the same shared address in every block of `mask`
// and completes its bytes on the mbarrier at the same address in each of them.
__device__ __forceinline__ int cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return (int)rank;
}
// every thread of every block of the cluster: what each did before (its mbarriers
// initialized) is visible to all before any goes on
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// mbar_arrive_warp at this block's barrier and at the one of the same address in the
// other block of a pair. The arrivals keep the default (CTA-scope) release: with
// `.release.cluster` each one waited for the warp's memory operations to be seen by the
// whole cluster, and FlashAttention ran at 0.59x of the kernel without clusters (H100).
__device__ __forceinline__ void mbar_arrive_warp_pair(uint64_t* bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    uint32_t local = smem_addr(bar), remote;
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(local) : "memory");
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                 : "=r"(remote) : "r"(local), "r"(cluster_rank() ^ 1));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" :: "r"(remote) : "memory");
  }
}
__device__ __forceinline__ void tma_load_multicast(void* smem, const CUtensorMap& map,
                                                   uint64_t* bar, unsigned short mask,
                                                   int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;\n"
      :: "r"(smem_addr(smem)), "l"(&map), "r"(smem_addr(bar)), "h"(mask), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_multicast(void* smem, const CUtensorMap& map,
                                                   uint64_t* bar, unsigned short mask,
                                                   int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;\n"
      :: "r"(smem_addr(smem)), "l"(&map), "r"(smem_addr(bar)), "h"(mask), "r"(c0), "r"(c1),
         "r"(c2) : "memory");
}
__device__ __forceinline__ void tma_load_multicast(void* smem, const CUtensorMap& map,
                                                   uint64_t* bar, unsigned short mask,
                                                   int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;\n"
      :: "r"(smem_addr(smem)), "l"(&map), "r"(smem_addr(bar)), "h"(mask), "r"(c0), "r"(c1),
         "r"(c2), "r"(c3) : "memory");
}

// The other way (passes/tma_stores.py): TMA reads a box from shared memory, as the map's
// swizzle lays it out, and writes it to the tensor, dropping what lies outside. One thread
// issues; the copies since the last commit form a bulk group, whose reads of shared memory
// `tma_store_wait_read` waits for (the tile may then be written again) and whose writes
// `tma_store_wait` waits for (a later store of the same place stays after them). The wait
// for the reads comes just before the barrier ahead of the tile's next write
// (passes/insert_barriers.py), and every thread runs it (those that issued nothing pass at
// once); it names the tiles TMA may still be reading, so that the shared-memory merge gives
// their bytes to no other tile before it.
__device__ __forceinline__ void tma_store(const CUtensorMap& map, void* smem, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
               :: "l"(&map), "r"(smem_addr(smem)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_store(const CUtensorMap& map, void* smem, int c0, int c1,
                                          int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
      :: "l"(&map), "r"(smem_addr(smem)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void tma_store(const CUtensorMap& map, void* smem, int c0, int c1,
                                          int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
      :: "l"(&map), "r"(smem_addr(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <typename... Tiles>
__device__ __forceinline__ void tma_store_wait_read(Tiles*...) {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// ---- integer negation that ptxas keeps (passes/keep_negations.py): ptxas of CUDA
// 12.9 to 13.3 folds a negation into sm_90's three-input min/max and drops it for
// the second operand; the identity byte permute after the negation stops the fold
template <typename T>
__device__ __forceinline__ T negate(T value) {
  int result;
  asm("{.reg .b32 t; neg.s32 t, %1; prmt.b32 %0, t, 0, 0x3210;}"
      : "=r"(result) : "r"(static_cast<int>(value)));
  return static_cast<T>(result);
}

// ---- block order (passes/heavy_blocks_first.py): a block index counted from the end. A
// call, so that TVM's simplifier keeps it one named value instead of folding `last - i`
// into every address (ptxas then needs more registers for the same kernel)
__device__ __forceinline__ int backwards(int last, int index) { return last - index; }

// ---- warp shuffles for reductions
template <typename T>
__device__ __forceinline__ T shfl_xor(T value, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, value, lane_mask);
}

// ---- the GPU's nanosecond clock, for instrumented builds (pipeline replay)
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

#ifdef TILELAB_SYNC_GRID
// ---- T.sync_grid: every thread of every block arrives before any goes on. The kernel
// is launched cooperatively (cuLaunchCooperativeKernel), which gives the grid the
// barrier's state and checks that all its blocks are resident at once.
__device__ __forceinline__ void sync_grid() { cooperative_groups::this_grid().sync(); }
#endif

}  // namespace tl
