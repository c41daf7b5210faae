"""baracuda: CUDA kernels with plans, SKUs and precision guarantees (contract: docs/python-api.md).

``baracuda._C`` is the native module; ``baracuda.functional`` exposes every family's ops under
their torch names (it needs PyTorch only when an op is called).
"""
# PyTorch first, when installed: _C links the system cuBLASLt, and with that loaded first a later
# `import torch` (which brings its own pip-bundled cuBLAS) crashed (segfault, H100, torch 2.11).
try:
    import torch  # noqa: F401
except ImportError:
    pass
from . import _C  # noqa: E402
from . import functional  # noqa: E402

__version__ = getattr(_C, "__version__", "0.1.0")


def ops():
    """One dict per row of include/baracuda/ops/elementwise_ops.def."""
    return _C.ops()


def coverage():
    """Rows {family, op, direction, dtype, backend} of every plan select() accepts (sm_90)."""
    return _C.coverage()


def device_info():
    """{name, sm, num_sms, runtime_version, driver_version} of the current CUDA device."""
    return _C.device_info()


__all__ = ["functional", "ops", "coverage", "device_info", "__version__"]
