"""Runnable course kernels: one script per kernel, each with a PyTorch reference.

Run one with `python examples/softmax.py --device cpu`; tests import the kernels
from here (`from examples.softmax import softmax_kernel, reference`).
"""
