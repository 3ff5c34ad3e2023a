"""Tools that test the compiler itself.

* `generator` - random, well-formed tile programs with their own torch reference;
* `difftest`  - runs them on the CPU backend (the reference semantics) and on CUDA,
  compares, shrinks what disagrees and saves it as a regression test;
* `sanitize`  - NVIDIA compute-sanitizer over course, suite and generated kernels;
* `fuzz_inputs` - bad input: mutated course kernels and wrong calls must give
  TileLabErrors (no crash, hang, raw traceback or silently wrong result).
"""
