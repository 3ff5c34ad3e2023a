"""Run programs written for other tile languages: `tilelab.compat.tilelang.install()`."""
