"""Code generation for each target: `cpu` (LLVM through TVM) and `cuda`."""
