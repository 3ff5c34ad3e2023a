"""Shared test settings: a private compile cache, and GPU tests skipped without a GPU."""

import os
import tempfile

import pytest

# Tests compile many kernels; keep their cache out of the user's cache directory.
os.environ.setdefault("TILELAB_CACHE_DIR", tempfile.mkdtemp(prefix="tilelab-test-cache-"))


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
