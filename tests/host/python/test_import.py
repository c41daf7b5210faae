"""CPU-only smoke test of the Python package: needs neither a GPU nor PyTorch."""
import importlib.util

import numpy as np
import pytest

import baracuda
from baracuda import _C, functional

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _has_cuda():
    if not HAS_TORCH:
        return False
    import torch
    return torch.cuda.is_available()


def test_ops_table():
    ops = baracuda.ops()
    assert len(ops) > 100
    names = [o["name"] for o in ops]
    assert len(set(names)) == len(names)
    keys = {"name", "group", "nin", "bool_inputs", "params", "fw_dtypes", "out", "bw", "bw_dtypes", "grad_mask", "tol"}
    for o in ops:
        assert keys <= set(o)
        assert o["out"] in ("same", "bool", "cast") and o["bw"] in ("none", "dy", "in", "out", "inout")
        for p in o["params"]:
            assert {"name", "default", "choices"} <= set(p)
    gelu = next(o for o in ops if o["name"] == "gelu")
    assert gelu["params"][0]["choices"] == ["none", "tanh"]


def test_functional_namespace():
    for o in baracuda.ops():
        if o["name"] not in ("cast",) and o["nin"] > 0:
            assert callable(getattr(functional, o["name"]))
        if o["bw"] != "none":
            assert callable(getattr(functional, o["name"] + "_backward"))
    for torch_name in ("div", "floor_divide", "clamp", "lerp", "rrelu", "prelu", "glu", "swiglu", "nan_to_num",
                       "logit", "polygamma", "cast", "fill", "full", "arange", "linspace", "logspace", "eye"):
        assert callable(getattr(functional, torch_name))


def test_coverage_rows():
    rows = baracuda.coverage()
    assert rows and {"family", "op", "direction", "dtype", "backend"} <= set(rows[0])
    assert any(r["op"] == "cast" and "->" in r["dtype"] for r in rows)


def test_version():
    assert isinstance(baracuda.__version__, str) and baracuda.__version__


def test_native_errors_are_clear():
    with pytest.raises(RuntimeError, match="unknown elementwise op"):
        _C.elementwise("no_such_op", False, [], [], [], 0)
    a = np.ones(4, dtype=np.float32)
    out = np.empty(4, dtype=np.float32)
    with pytest.raises(RuntimeError, match="CUDA"):
        _C.elementwise("neg", False, [a], [out], [], 0)


@pytest.mark.skipif(HAS_TORCH, reason="checks the message given when PyTorch is missing")
def test_functional_without_torch():
    with pytest.raises(ImportError, match="PyTorch"):
        functional.add(1.0, 2.0)


@pytest.mark.skipif(not HAS_TORCH or _has_cuda(), reason="needs PyTorch and no GPU")
def test_functional_without_gpu():
    import torch
    with pytest.raises(RuntimeError, match="CUDA"):
        functional.add(torch.ones(2), torch.ones(2))
    with pytest.raises(RuntimeError):
        baracuda.device_info()
