"""tilelab's own compiler passes, one idea per module.

Each pass is a TVM `prim_func_pass`; `tilelab.compile` lists them in order
per target, beside TVM's passes, and records the IR after each one.
"""
