"""pytest configuration of baracuda's GPU conformance tests (see README.md)."""
import os
import sys

# JAX (interop test) must not preallocate most of the GPU before the torch tests run.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# The test modules import their shared helpers (elementwise_common.py) from this folder, whatever
# pytest's --import-mode.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: tensors past 2^31 elements (run by default; -m 'not slow' skips)")
    config.addinivalue_line("markers", "sanitizer: the quick compute-sanitizer subset (-m sanitizer or -k sanitizer)")


def pytest_report_header(config):
    if os.environ.get("BARACUDA_TEST_DEVICE", "cuda") != "cuda":
        return None
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        import baracuda
        info = baracuda.device_info()
        return f"baracuda device: {info['name']} (sm_{info['sm']}, {info['num_sms']} SMs)"
    except Exception:
        return None
