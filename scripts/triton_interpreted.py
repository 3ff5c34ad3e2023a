"""Triton references on a CPU: what scripts/tilelang_examples.py changes in Triton's interpreter.

Many of TileLang's examples check their kernels against Triton kernels (their own, or
flash-linear-attention's). Without a GPU those run in Triton's interpreter
(TRITON_INTERPRET=1), which runs a kernel's Python with numpy standing in for the
compiler. Five things keep it from computing such references as a GPU would; `install()`
changes each, for the runner's process only:

* autotuning: the interpreter has no driver to time configurations with, and every
  configuration computes the same reference, so an autotuned kernel runs in the first
  configuration its pruning leaves, untimed;
* libdevice: its functions (`exp2`, `fast_expf`, ...) are stubs a GPU backend fills in;
  they become their `tl.math` twins;
* builtins under names of their own: the interpreter patches the `triton.language`
  module a kernel sees, so `exp = tl.exp` at a module's top (flash-linear-attention's
  helpers) escapes it and refuses to run ("Did you forget to add @triton.jit ?");
* a loop over a loaded count (`for i in range(NS)`, TileLang's NSA benchmark): Triton
  3.5's interpreter takes the value's index with `int()` of a one-element array, which
  numpy 2 refuses (3.7 squeezes the array first, as here);
* bfloat16: numpy has no bfloat16, and the interpreter keeps its bit patterns as uint16
  and computes on those as integers (a product of two bfloat16 tensors, or `tl.dot` of
  them, is garbage). Here a bfloat16 value is a float32 holding a bfloat16 number: each
  bfloat16 result is rounded (to nearest, ties to even) as the interpreter makes it, as a
  GPU rounds each bfloat16 operation, and loads and stores read and write the uint16 bit
  patterns.

Each is written against the interpreter of Triton 3.5 and 3.7 (the versions the
compatibility table's rows ran with).
"""

from __future__ import annotations

import os

import numpy as np


def install() -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("FLA_CACHE_RESULTS", "0")  # its disk cache wants a driver too
    try:
        from triton.runtime import autotuner  # noqa: F401
    except ImportError:  # the example will say that it needs Triton
        return
    _first_configuration_untimed()
    _libdevice_as_math()
    _completed_language_patch()
    _bfloat16_as_float32()


def _first_configuration_untimed():
    from triton.runtime import autotuner

    prune = autotuner.Autotuner.prune_configs

    def first_configuration(self, kwargs):
        return prune(self, kwargs)[:1]

    def untimed(kernel_call, quantiles=None, **_options):
        return [1.0, 1.0, 1.0] if quantiles else 1.0

    autotuner.Autotuner.prune_configs = first_configuration
    autotuner.Autotuner.do_bench = property(lambda self: untimed)


def _libdevice_as_math():
    """Plain functions serve: the interpreter runs the kernel's Python, with `tl.math`
    patched while it runs (as flash-linear-attention's own helpers are without
    FLA_USE_FAST_OPS)."""
    import triton.language as tl
    from triton.language.extra import libdevice

    twins = {"exp2": "exp2", "fast_expf": "exp", "fast_logf": "log", "fast_log2f": "log2"}
    for name, twin in twins.items():
        setattr(libdevice, name,
                lambda x, _twin=twin: getattr(tl.math, _twin)(x.to(tl.float32)))


def _completed_language_patch():
    """Such names get the interpreter's semantics the first time a kernel of their module
    runs (`_patch_lang` is called with each kernel before it runs); so does a tensor's
    index (`range(NS)`)."""
    import triton.language as tl
    from triton.runtime import interpreter

    patch_lang, semantic = interpreter._patch_lang, interpreter.interpreter_semantic

    def patch_lang_completed(fn):
        scope = patch_lang(fn)
        tl.core.tensor.__index__ = lambda self: int(self.handle.data.squeeze())
        names = fn.__globals__
        for name, value in list(names.items()):
            if tl.core.is_builtin(value):
                names[name] = lambda *args, _builtin=value, **kwargs: _builtin(
                    *args, **{k: v for k, v in kwargs.items() if k != "_semantic"},
                    _semantic=semantic)
        return scope

    interpreter._patch_lang = patch_lang_completed


# ---------------------------------------------------------------- bfloat16


def bfloat16_bits(values: np.ndarray, toward_zero: bool = False) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest even, or toward zero), as uint16 bit
    patterns; NaN stays a quiet NaN."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)  # of the values' shape
    if not toward_zero:
        bits = bits + (0x7FFF + ((bits >> 16) & 1)).astype(np.uint32)
    rounded = (bits >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def bfloat16_values(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns as float32 values (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _bfloat16_as_float32():
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    Handle = interpreter.TensorHandle

    def is_bf16(dtype) -> bool:
        return getattr(dtype, "scalar", dtype) == tl.bfloat16 or \
            getattr(dtype, "element_ty", None) == tl.bfloat16

    def rounded(values, toward_zero=False):
        return bfloat16_values(bfloat16_bits(values, toward_zero))

    get_np_dtype = interpreter._get_np_dtype

    def np_dtype(tt_dtype):
        if not isinstance(tt_dtype, tl.pointer_type) and is_bf16(tt_dtype):
            return np.dtype(np.float32)
        return get_np_dtype(tt_dtype)

    interpreter._get_np_dtype = np_dtype
    if hasattr(interpreter, "_validate_np_data_size"):  # 3.7 checks each handle's itemsize
        validate = interpreter._validate_np_data_size
        interpreter._validate_np_data_size = lambda data, dtype: (
            is_bf16(dtype) and data.dtype == np.float32) or validate(data, dtype)

    make_handle = Handle.__init__

    def bfloat16_numbers(self, *args, **kwargs):  # every value the interpreter makes
        make_handle(self, *args, **kwargs)
        if is_bf16(self.dtype) and self.data.dtype == np.float32:
            self.data = rounded(self.data)

    Handle.__init__ = bfloat16_numbers
    load, store = builder.create_masked_load, builder.create_masked_store
    cast, fp_to_fp, bitcast = builder.cast_impl, builder.create_fp_to_fp, builder.create_bitcast

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        if not is_bf16(ptrs.get_element_ty()):
            return load(self, ptrs, mask, other, *args, **kwargs)
        other_bits = np.zeros(ptrs.data.shape, np.uint16) if other is None else \
            np.broadcast_to(bfloat16_bits(other.data), ptrs.data.shape).copy()
        bits = interpreter._interpreter.load(ptrs.data, mask.data, other_bits, np.dtype(np.uint16))
        return Handle(bfloat16_values(bits), tl.bfloat16)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        if is_bf16(value.dtype):
            value = Handle(bfloat16_bits(value.data), tl.uint16)
        return store(self, ptrs, value, mask, *args, **kwargs)

    def cast_impl(self, src, dst_type):
        if is_bf16(dst_type):  # from an integer or float: the value (rounded as made)
            return Handle(src.data.astype(np.float32), tl.bfloat16)
        if is_bf16(src.dtype):  # the float32 it holds, cast on
            return cast(self, Handle(src.data, tl.float32), dst_type)
        return cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode=None, *args):
        toward_zero = "RTZ" in str(rounding_mode)
        if is_bf16(src.dtype):
            src = Handle(src.data, tl.float32)
            if dst_type.scalar == tl.float32:
                return src
        if is_bf16(dst_type):
            values = src.data if src.dtype == tl.float32 else \
                fp_to_fp(self, src, tl.float32, rounding_mode, *args).data
            return Handle(rounded(values, toward_zero), tl.bfloat16)
        return fp_to_fp(self, src, dst_type, rounding_mode, *args)

    def create_bitcast(self, src, dst_type):
        if is_bf16(src.dtype) and not is_bf16(dst_type):
            src = Handle(bfloat16_bits(src.data), tl.uint16)
        if is_bf16(dst_type) and not is_bf16(src.dtype):
            return Handle(bfloat16_values(bitcast(self, src, tl.uint16).data), tl.bfloat16)
        return bitcast(self, src, dst_type)

    def get_bf16(self, value):
        return Handle(np.array([value], np.float32), tl.bfloat16)

    builder.create_masked_load = create_masked_load
    builder.create_masked_store = create_masked_store
    builder.cast_impl, builder.create_fp_to_fp = cast_impl, create_fp_to_fp
    builder.create_bitcast, builder.get_bf16 = create_bitcast, get_bf16
