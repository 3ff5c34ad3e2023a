"""Solutions to chapter 10's exercises. In the notebook: %load solutions/10_autotuning.py"""

SHARED_BUDGET = 48 * 1024


# Exercise 10.1: the candidates that fit in shared memory and are not wasted on small matrices
def gemm_configs(M, N, K):
    configs = []
    for block_m in (32, 64, 128):
        for block_n in (32, 64, 128):
            for block_k in (32, 64):
                for num_stages in (1, 2, 3):
                    stage_bytes = (block_m * block_k + block_k * block_n) * 2
                    fits = num_stages * stage_bytes <= SHARED_BUDGET
                    useful = (block_m == 32 or block_m // 2 < M) and \
                        (block_n == 32 or block_n // 2 < N)
                    if fits and useful:
                        configs.append({"block_m": block_m, "block_n": block_n,
                                        "block_k": block_k, "num_stages": num_stages})
    return configs


# Exercise 10.2: the fastest candidate whose output was correct
def pick_winner(rows):
    correct = [r for r in rows if r["status"] == "ok"]
    if not correct:
        return None
    return min(correct, key=lambda r: r["median_ms"])["config"]
