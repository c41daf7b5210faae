"""The one skip rule of the GPU test modules: each calls ``skip_unless_ready(binding)`` before it
imports torch, and is skipped (visibly, with the reason) without torch, a CUDA device, an
importable baracuda, or the family's bindings in baracuda._C."""
import os

import pytest

SKIP_MSG = "GPU tests need a CUDA GPU and torch: skipped"
DEVICE = os.environ.get("BARACUDA_TEST_DEVICE", "cuda")


def probe(binding=None):
    """None when the tests can run, else why not."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        return f"import torch failed: {type(e).__name__}: {e}"
    if DEVICE == "cuda" and not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    try:
        import baracuda  # noqa: F401
        import baracuda.functional  # noqa: F401
        from baracuda import _C
    except Exception as e:
        return f"import baracuda failed: {type(e).__name__}: {e}"
    if binding and not hasattr(_C, binding):
        return f"baracuda._C has no {binding!r} binding"
    return None


def skip_unless_ready(binding=None):
    reason = probe(binding)
    if reason:
        pytest.skip(f"{SKIP_MSG} ({reason})", allow_module_level=True)
