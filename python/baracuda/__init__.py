"""baracuda: CUDA kernels with plans, SKUs and precision guarantees (contract: docs/python-api.md).

``baracuda._C`` is the native module; ``baracuda.functional`` exposes every elementwise op under
its torch name (it needs PyTorch only when an op is called).
"""
from . import _C
from . import functional

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
