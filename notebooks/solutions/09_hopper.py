"""Solutions to chapter 9's exercises. In the notebook: %load solutions/09_hopper.py"""

# Exercise 09.1: block_m = 128, block_n = 256, block_k = 64, 256 threads, policy FullRow
accumulator_registers = 128 * 256 // 256  # float32 values per thread: 128
wgmma_per_k16 = 1  # each warpgroup's 64 × 256 share is one m64n256k16 instruction
wgmma_per_iteration = 64 // 16  # block_k = 64, 16 at a time: 4

# Exercise 09.2: the same tiles, float16, MMAs in flight
ahead = 4 - 2  # num_stages - 2: the slot refilled is not read by a running MMA
shared_bytes = 4 * (128 * 64 + 64 * 256) * 2  # 196608
max_stages = 232448 // ((128 * 64 + 64 * 256) * 2)  # 4
