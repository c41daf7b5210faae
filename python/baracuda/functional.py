"""Every elementwise op of baracuda under its torch name (contract: docs/python-api.md).

The functions are generated from ``_C.ops()`` (one row of elementwise_ops.def each): a generic
wrapper per row, plus a small table of torch-signature overrides (div's rounding_mode, clamp,
lerp, rrelu, the gated activations, prelu, nan_to_num, logit, polygamma, cast and the
generators). ``<name>_backward`` exists for every differentiable row. Outputs are torch tensors
allocated on the inputs' device; kernels run on ``torch.cuda.current_stream()``.
"""
import builtins
import functools
import inspect
import math
import numbers

from . import _C
from ._autograd import (OPS, CastFunction, EwFunction, GatedFunction, cast_raw, current_stream, dl, gated_backward,
                        grad_indices, halves, launch, needs_inputs, needs_output, philox_seed, require_torch, run_backward,
                        torch)

__all__ = []
_Tensor = torch.Tensor if torch is not None else None
_elementwise = _C.elementwise

# Keyword names of the tensor inputs (torch's), by row; the default is by arity.
_TENSOR_NAMES = {
    1: ("input",), 2: ("input", "other"), 3: ("input", "tensor1", "tensor2"),
    "where": ("condition", "input", "other"), "masked_fill": ("input", "mask"),
    "lerp": ("input", "end", "weight"), "lerp_scalar": ("input", "end"), "clamp": ("input", "min", "max"),
    "prelu": ("input", "weight"), "pow": ("input", "exponent"), "ldexp": ("input", "other"),
}


# ---- per-row spec ---------------------------------------------------------------------------------
class _Spec:
    def __init__(self, row):
        self.row = row
        self.name = row["name"]
        self.nin = row["nin"]
        self.params = row["params"]
        self.pnames = [p["name"] for p in self.params]
        self.tnames = _TENSOR_NAMES.get(self.name, _TENSOR_NAMES.get(self.nin, ()))
        self.defaults = [p["default"] for p in self.params]
        self.differentiable = row["bw"] != "none"
        # The output dtype of _fast_forward: None = the inputs' dtype.
        self.out_dtype = torch.bool if torch is not None and row["out"] == "bool" else None

    @functools.cached_property
    def fast(self):
        """Dtypes that _fast_forward takes: those the op accepts, for rows with no bool input and
        an output of the inputs' dtype or bool (the general path promotes nothing for them)."""
        if self.row["bool_inputs"] or self.row["out"] not in ("same", "bool"):
            return frozenset()
        return frozenset(self.fw)

    def bool_input(self, i):
        return (self.row["bool_inputs"] >> i) & 1

    @functools.cached_property
    def fw(self):
        return {getattr(torch, n) for n in self.row["fw_dtypes"] if hasattr(torch, n)}

    @functools.cached_property
    def bw(self):
        return {getattr(torch, n) for n in self.row["bw_dtypes"] if hasattr(torch, n)}


_SPECS = {name: _Spec(row) for name, row in OPS.items()}


def _param_value(s, i, v):
    p = s.params[i]
    if isinstance(v, str):
        if not p["choices"] or v not in p["choices"]:
            raise ValueError(f"{s.name}: parameter '{p['name']}' expected one of {p['choices']}, got {v!r}")
        return float(p["choices"].index(v))
    if torch is not None and isinstance(v, torch.Tensor):
        v = v.item()
    if v is None:
        return float(p["default"])
    if isinstance(v, complex):
        raise TypeError(f"{s.name}: parameter '{p['name']}' must be real, got {v!r}")
    return float(v)


def _params(s, positional, kw):
    """Table-ordered float params from positional values and keywords (torch names)."""
    if len(positional) > len(s.params):
        raise TypeError(f"{s.name}() takes {s.nin + len(s.params)} positional arguments but "
                        f"{s.nin + len(positional)} were given")
    vals = [p["default"] for p in s.params]
    for i, v in enumerate(positional):
        vals[i] = _param_value(s, i, v)
    for k, v in kw.items():
        if k not in s.pnames:
            raise TypeError(f"{s.name}() got an unexpected keyword argument '{k}'")
        i = s.pnames.index(k)
        vals[i] = _param_value(s, i, v)
    return vals


# ---- type promotion (torch.result_type over tensors and Python scalars) ----------------------------
def _scalar_dtype(v):
    if isinstance(v, bool):
        return torch.bool
    if isinstance(v, numbers.Integral):
        return torch.int64
    if isinstance(v, complex):
        return torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
    return torch.get_default_dtype()


def _promote(a, b):
    return b if a is None else (a if b is None else torch.promote_types(a, b))


def _to_complex(t):
    return {torch.float64: torch.complex128, torch.float16: getattr(torch, "complex32", torch.complex64)}.get(
        t, torch.complex64)


def _combine(higher, lower):  # c10's combine_categories
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return _to_complex(higher) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher == torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def result_type(*vals):
    """torch.result_type generalised to any number of tensors / Python scalars."""
    dim = zero = wrapped = None
    for v in vals:
        if isinstance(v, torch.Tensor):
            if v.dim() > 0:
                dim = _promote(dim, v.dtype)
            else:
                zero = _promote(zero, v.dtype)
        elif v is not None:
            wrapped = _promote(wrapped, _scalar_dtype(v))
    return _combine(dim, _combine(zero, wrapped))


# ---- tensor plumbing -------------------------------------------------------------------------------
def _to_torch(vals):
    """Converts foreign DLPack arrays (CuPy, JAX) to torch; returns (vals, converter back)."""
    back = None
    out = []
    for v in vals:
        if v is not None and not isinstance(v, (torch.Tensor, numbers.Number)) and hasattr(v, "__dlpack__"):
            if back is None:
                back = _from_dlpack_of(v)
            v = torch.from_dlpack(v)
        out.append(v)
    return out, back


def _from_dlpack_of(v):
    """The from_dlpack of `v`'s framework (cupy.from_dlpack, jax.numpy.from_dlpack, ...)."""
    import importlib
    root = type(v).__module__.split(".")[0]
    mod = importlib.import_module("jax.numpy" if root in ("jax", "jaxlib") else root)
    for path in (("from_dlpack",), ("numpy", "from_dlpack"), ("dlpack", "from_dlpack")):
        f = mod
        try:
            for p in path:
                f = getattr(f, p)
            return f
        except AttributeError:
            continue
    return None


def _device_of(name, vals):
    """The CUDA device of the first CUDA tensor among `vals`."""
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    if not tensors:
        raise TypeError(f"baracuda.functional.{name}: expected at least one tensor argument")
    for t in tensors:
        if t.device.type == "cuda":
            return t.device
    raise RuntimeError(f"baracuda.functional.{name}: tensors must be on a CUDA device, got {tensors[0].device}")


def _same_device(name, args, device):
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.device != device:
            if a.dim() == 0 and a.device.type == "cpu":  # CPU scalars tensors are allowed, as in torch
                args[i] = a.to(device)
            else:
                raise RuntimeError(f"baracuda.functional.{name}: expected all tensors on {device}, but input {i} "
                                   f"is on {a.device}")


def _scalar(v, dtype, device):
    """A Python scalar as a 0-dim tensor of `dtype` (written by baracuda's fill where it can)."""
    if (not isinstance(v, complex) and dtype in _SPECS["fill"].fw and builtins.abs(v) <= 2 ** 53):
        t = torch.empty((), dtype=dtype, device=device)
        launch("fill", False, [], [t], [float(v)], device)
        return t
    return torch.full((), v, dtype=dtype, device=device)


def cast(input, dtype, saturate=False, *, out=None):
    """``input.to(dtype)`` through baracuda's cast (fp8 targets saturate when saturate=True)."""
    require_torch()
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    (input,), back = _to_torch([input])
    _device_of("cast", [input])
    if out is not None:
        launch("cast", False, [input], [out], [1.0 if saturate else 0.0], input.device)
        return out
    if (torch.is_grad_enabled() and input.requires_grad and input.dtype.is_floating_point
            and dtype.is_floating_point):
        res = CastFunction.apply(input, dtype, saturate)
    else:
        res = cast_raw(input, dtype, saturate)
    return back(res) if back else res


def _broadcast(shapes):
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, v in enumerate(s):
            d = rank - len(s) + i
            if v == out[d] or v == 1:
                continue
            if out[d] != 1:
                return None  # the library reports the mismatch
            out[d] = v
    return out


def _ew(name, args, params, out=None, dtype=None):
    """Forward of a table op on its nin inputs (tensors, foreign arrays or Python scalars)."""
    require_torch()
    s = _SPECS[name]
    args, back = _to_torch(args)
    device = _device_of(name, args)
    _same_device(name, args, device)
    vpos = [i for i in range(len(args)) if not s.bool_input(i)]
    ct = dtype or result_type(*[args[i] for i in vpos])
    if ct not in s.fw and not (ct.is_floating_point or ct.is_complex) and torch.get_default_dtype() in s.fw:
        ct = torch.get_default_dtype()  # integer inputs to float-only ops
    for i, a in enumerate(args):
        want = torch.bool if s.bool_input(i) else ct
        if not isinstance(a, torch.Tensor):
            args[i] = _scalar(a, want, device)
        elif a.dtype != want and want in s.fw and not s.bool_input(i):
            args[i] = cast(a, want)
    shape = _broadcast([a.shape for a in args]) or list(args[0].shape)
    grad = s.row["bw"] != "none" and torch.is_grad_enabled() and any(a.requires_grad for a in args)
    if grad:
        if out is not None:
            raise RuntimeError(f"{name}: out= arguments don't support automatic differentiation")
        if ct not in s.bw:
            raise RuntimeError(f"{name}: an input requires grad, but the backward supports "
                               f"{s.row['bw_dtypes']}, got {str(ct).replace('torch.', '')}")
        res = EwFunction.apply(name, params, shape, *args)
    else:
        if out is None:
            out = torch.empty(shape, dtype=torch.bool if s.row["out"] == "bool" else ct, device=device)
        launch(name, False, args, [out], params, device)
        res = out
    return back(res) if back else res


# ---- generic wrappers ------------------------------------------------------------------------------
def _signature(s, extra=(), kwonly=("out",)):
    P = inspect.Parameter
    ps = [P(n, P.POSITIONAL_OR_KEYWORD) for n in s.tnames]
    for p in s.params:
        d = p["choices"][0] if p["choices"] else p["default"]
        ps.append(P(p["name"], P.POSITIONAL_OR_KEYWORD, default=d))
    ps += [P(n, P.KEYWORD_ONLY, default=None) for n in kwonly]
    return inspect.Signature(ps + list(extra))


def _export(name, fn, doc=None, sig=None):
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    if doc:
        fn.__doc__ = doc
    if sig is not None:
        fn.__signature__ = sig
    globals()[name] = fn
    __all__.append(name)
    return fn


def _split(s, args, kw):
    """Tensor inputs (positionally or by torch keyword) and the remaining positional params."""
    tensors = list(args[:s.nin])
    for n in s.tnames[len(tensors):]:
        if n not in kw:
            raise TypeError(f"{s.name}() missing required argument '{n}'")
        tensors.append(kw.pop(n))
    return tensors, args[s.nin:]


def _fast_forward(s, args):
    """The common call -- torch CUDA tensors of one dtype the op accepts, on one device, no
    gradient to record, default parameters, no out= -- straight to the kernel: the result is the
    general path's (same dtype, shape, contiguous output), without its promotion and conversion
    steps. None when the call is not of that kind (the general path then handles it)."""
    a0 = args[0]
    if type(a0) is not _Tensor:
        return None
    dt = a0.dtype
    if dt not in s.fast:
        return None
    dev = a0.get_device()
    shape = a0.shape
    grad = a0.requires_grad
    for a in args[1:]:
        if type(a) is not _Tensor or a.dtype is not dt or a.get_device() != dev:
            return None
        grad = grad or a.requires_grad
        if shape is not None and a.shape != shape:
            shape = None
    if dev < 0 or (grad and s.differentiable and torch.is_grad_enabled()):
        return None
    odt = s.out_dtype or dt
    if shape is not None and a0.is_contiguous():
        # empty_like is torch's cheapest allocation from Python (1.8 us against new_empty's 2.5 and
        # torch.empty's 4.5 on the H100 host); for a contiguous a0 of the output's shape it is the same tensor.
        out = torch.empty_like(a0, dtype=odt)
    else:
        shape = shape if shape is not None else _broadcast([a.shape for a in args])
        if shape is None:
            return None  # the general path reports the mismatch
        out = a0.new_empty(shape, dtype=odt)
    _elementwise(s.name, False, [dl(a) for a in args], [dl(out)], s.defaults, current_stream(dev), None)
    return out


def _make_forward(name):
    s = _SPECS[name]

    def fn(*args, out=None, inplace=False, **kw):
        if not kw and out is None and not inplace and len(args) == s.nin:
            res = _fast_forward(s, args)
            if res is not None:
                return res
        tensors, rest = _split(s, args, kw)
        params = _params(s, rest, kw)
        if inplace:
            out = tensors[0]
        return _ew(name, tensors, params, out)

    row = s.row
    doc = (f"baracuda elementwise op '{name}' ({row['group']}): inputs {', '.join(s.tnames) or 'none'}; "
           f"params {', '.join(s.pnames) or 'none'}; dtypes {', '.join(row['fw_dtypes'])}; "
           f"differentiable: {row['bw'] != 'none'}.")
    P = inspect.Parameter
    return _export(name, fn, doc, _signature(s, [P("inplace", P.KEYWORD_ONLY, default=False)]))


def _backward_call(name, grad_output, inputs, output, params):
    """Runs `name`'s backward plan. `inputs` = the forward inputs (their shapes are the gradients'
    shapes; passed to the kernel if the row's bw needs them), `output` = the forward output."""
    require_torch()
    s = _SPECS[name]
    row = s.row
    inputs = list(inputs or [])
    vals, back = _to_torch([grad_output, *inputs] + ([output] if output is not None else []))
    device = _device_of(name + "_backward", vals)
    _same_device(name + "_backward", vals, device)
    grad_output = vals[0]
    inputs = vals[1:1 + len(inputs)]
    output = vals[-1] if output is not None else None
    for k, v in enumerate(inputs):
        if not isinstance(v, torch.Tensor):
            inputs[k] = _scalar(v, torch.bool if s.bool_input(k) else grad_output.dtype, device)
    in_shapes = [inputs[i].shape if i < len(inputs) else grad_output.shape for i in range(row["nin"])]
    saved = (inputs if needs_inputs(row) else []) + ([output] if needs_output(row) else [])
    grads = run_backward(name, params, grad_output, saved, in_shapes)
    if back:
        grads = [back(g) for g in grads]
    return grads[0] if len(grads) == 1 else tuple(grads)


def _make_backward(name):
    s = _SPECS[name]
    row = s.row
    # ATen order: grad_output, the inputs (also for "dy" rows: they give the gradients' shapes),
    # the forward result where the backward needs it, then the params.
    inames = [("self" if n == "input" else n) for n in s.tnames] if row["bw"] != "out" else []
    tnames = inames + (["output"] if needs_output(row) else [])

    def fn(grad_output, *args, **kw):
        tensors = list(args[:len(tnames)])
        for n in tnames[len(tensors):]:
            if n not in kw:
                raise TypeError(f"{name}_backward() missing required argument '{n}'")
            tensors.append(kw.pop(n))
        params = _params(s, args[len(tnames):], kw)
        output = tensors[len(inames)] if needs_output(row) else None
        return _backward_call(name, grad_output, tensors[:len(inames)], output, params)

    P = inspect.Parameter
    sig = inspect.Signature([P("grad_output", P.POSITIONAL_OR_KEYWORD)] +
                            [P(n, P.POSITIONAL_OR_KEYWORD) for n in tnames] +
                            [P(p["name"], P.POSITIONAL_OR_KEYWORD,
                               default=p["choices"][0] if p["choices"] else p["default"]) for p in s.params])
    ng = len(grad_indices(row))
    doc = (f"Backward of '{name}' (ATen order): returns "
           f"{'grad_input' if ng == 1 else f'a tuple of {ng} gradients (inputs {grad_indices(row)})'}.")
    return _export(name + "_backward", fn, doc, sig)


# ---- torch-signature overrides -----------------------------------------------------------------
_GATED = ("glu", "reglu", "geglu", "swiglu")
_GENERATORS = [n for n, r in OPS.items() if r["nin"] == 0]
_SPECIAL = set(_GATED) | {"cast"} | set(_GENERATORS)


def div(input, other, *, rounding_mode=None, out=None):
    """torch.div: rounding_mode None -> div, 'trunc' -> div_trunc, 'floor' -> div_floor."""
    names = {None: "div", "trunc": "div_trunc", "floor": "div_floor"}
    if rounding_mode not in names:
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                         f"'{rounding_mode}'")
    return _ew(names[rounding_mode], [input, other], [], out)


def floor_divide(input, other, *, out=None):
    return _ew("div_floor", [input, other], [], out)


def clamp(input, min=None, max=None, *, out=None):
    """torch.clamp: scalar bounds -> clamp_scalar, tensor bounds -> clamp (ternary)."""
    require_torch()
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    if not isinstance(min, torch.Tensor) and not isinstance(max, torch.Tensor):
        ct = result_type(input, min, max)
        lo = -math.inf if min is None else min
        hi = math.inf if max is None else max
        return _ew("clamp_scalar", [input], [float(lo), float(hi)], out, dtype=ct)
    if min is None or max is None:  # one tensor bound
        ct = result_type(input, min, max)
        if not (ct.is_floating_point or ct.is_complex):
            return _ew("maximum" if max is None else "minimum", [input, min if max is None else max], [], out)
        min = -math.inf if min is None else min
        max = math.inf if max is None else max
    return _ew("clamp", [input, min, max], [], out)


def clamp_min(input, min, *, out=None):
    return clamp(input, min=min, out=out)


def clamp_max(input, max, *, out=None):
    return clamp(input, max=max, out=out)


def lerp(input, end, weight, *, out=None):
    """torch.lerp: float weight -> lerp_scalar, tensor weight -> lerp."""
    require_torch()
    if isinstance(weight, torch.Tensor) or hasattr(weight, "__dlpack__"):
        return _ew("lerp", [input, end, weight], [], out)
    return _ew("lerp_scalar", [input, end], [float(weight)], out)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False, *, generator=None, seed=None,
          offset=0):
    """F.rrelu. training=False: slope (lower + upper) / 2 (the rrelu_eval row). training=True (the
    rrelu_train row): each element x <= 0 takes its own slope ~ U(lower, upper), as torch's
    rrelu_with_noise; the slope is drawn in the kernel from Philox4x32-10 keyed by `seed` at
    counter block `offset` and the element's index in the input's logical order, so the same
    (seed, offset) gives the same slopes whatever the strides, and the backward regenerates them
    (no noise tensor is stored). Without `seed` the key (< 2^53) is drawn from `generator`
    (torch's default generator when None): torch.manual_seed makes it reproducible. The values
    are not torch's (a different random stream); their distribution is."""
    if not training:
        return _ew("rrelu_eval", [input], [float(lower), float(upper)], input if inplace else None)
    if seed is None:
        seed = philox_seed(generator, 1 << 53)
    return _ew("rrelu_train", [input], [float(lower), float(upper), float(seed), float(offset)],
               input if inplace else None)


def prelu(input, weight):
    """F.prelu: weight has 1 or input.size(1) elements and broadcasts over dim 1."""
    return _ew("prelu", [input, _prelu_weight(input, weight)], [])


def _prelu_weight(input, weight):
    require_torch()
    if isinstance(weight, torch.Tensor) and (weight.numel() == 1 or input.dim() < 2):
        return weight.reshape(())
    if isinstance(weight, torch.Tensor):
        return weight.reshape([-1] + [1] * (input.dim() - 2))
    return weight


def prelu_backward(grad_output, self, weight):
    """(grad_input, grad_weight); grad_weight has weight's shape."""
    gi, gw = _backward_call("prelu", grad_output, [self, _prelu_weight(self, weight)], None, [])
    return gi, gw.reshape(weight.shape)


def nan_to_num(input, nan=0.0, posinf=None, neginf=None, *, out=None):
    """torch.nan_to_num: posinf/neginf None -> the dtype's largest/lowest finite value."""
    require_torch()
    if isinstance(input, torch.Tensor) and not (input.dtype.is_floating_point or input.dtype.is_complex):
        return cast(input, input.dtype, out=out)  # integers and bools are returned as a copy
    return _ew("nan_to_num", [input], _nan_to_num_params(nan, posinf, neginf), out)


def _nan_to_num_params(nan, posinf, neginf):
    return [float(0.0 if nan is None else nan), math.inf if posinf is None else float(posinf),
            -math.inf if neginf is None else float(neginf)]


def nan_to_num_backward(grad_output, self, nan=0.0, posinf=None, neginf=None):
    return _backward_call("nan_to_num", grad_output, [self], None, _nan_to_num_params(nan, posinf, neginf))


def logit(input, eps=None, *, out=None):
    """torch.logit: eps None -> no clamping."""
    return _ew("logit", [input], [-1.0 if eps is None else float(eps)], out)


def logit_backward(grad_output, self, eps=None):
    return _backward_call("logit", grad_output, [self], None, [-1.0 if eps is None else float(eps)])


def polygamma(n, input, *, out=None):
    """torch.polygamma(n, input)."""
    return _ew("polygamma", [input], [float(n)], out)


def _make_gated(name):
    s = _SPECS[name]

    def fn(input, dim=-1, *args, out=None, **kw):
        require_torch()
        params = _params(s, args, kw)
        (x,), back = _to_torch([input])
        _device_of(name, [x])
        if not (x.dtype.is_floating_point or x.dtype.is_complex) and torch.get_default_dtype() in s.fw:
            x = cast(x, torch.get_default_dtype())
        if torch.is_grad_enabled() and x.requires_grad:
            if out is not None:
                raise RuntimeError(f"{name}: out= arguments don't support automatic differentiation")
            if x.dtype not in s.bw:
                raise RuntimeError(f"{name}: an input requires grad, but the backward supports "
                                   f"{s.row['bw_dtypes']}, got {str(x.dtype).replace('torch.', '')}")
            res = GatedFunction.apply(name, params, dim, x)
        else:
            a, b, _ = halves(name, x, dim)
            res = out if out is not None else torch.empty(a.shape, dtype=x.dtype, device=x.device)
            launch(name, False, [a, b], [res], params, x.device)
        return back(res) if back else res

    def bw(grad_output, self, dim=-1, *args, **kw):
        require_torch()
        return gated_backward(name, _params(s, args, kw), grad_output, self, dim)

    P = inspect.Parameter
    extra = [P(p["name"], P.POSITIONAL_OR_KEYWORD, default=p["choices"][0] if p["choices"] else p["default"])
             for p in s.params]
    conv = "input * sigmoid(gate)" if name == "glu" else "act(first half) * second half"
    _export(name, fn, f"{name}(input, dim=-1): splits dim in halves; {conv}.",
            inspect.Signature([P("input", P.POSITIONAL_OR_KEYWORD), P("dim", P.POSITIONAL_OR_KEYWORD, default=-1)]
                              + extra + [P("out", P.KEYWORD_ONLY, default=None)]))
    _export(name + "_backward", bw, f"{name}_backward(grad_output, self, dim=-1): grad_input (self's shape).",
            inspect.Signature([P("grad_output", P.POSITIONAL_OR_KEYWORD), P("self", P.POSITIONAL_OR_KEYWORD),
                               P("dim", P.POSITIONAL_OR_KEYWORD, default=-1)] + extra))


# ---- generators -------------------------------------------------------------------------------------
def _gen(name, shape, params, dtype, device, out=None):
    require_torch()
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device="cuda" if device is None else device)
    _device_of(name, [out])
    if out.numel() == 0:
        return out
    launch(name, False, [], [out], [float(p) for p in params], out.device)
    return out


def _size(size):
    if len(size) == 1 and not isinstance(size[0], numbers.Integral):
        size = size[0]
    return tuple(size) if not isinstance(size, numbers.Integral) else (size,)


def fill(shape, value, dtype=None, *, device=None, out=None):
    """A tensor of `shape` filled with `value` (dtype inferred like torch.full)."""
    require_torch()
    dtype = dtype or _scalar_dtype(value)
    if isinstance(value, complex):
        if out is None:
            return torch.full(_size([shape]), value, dtype=dtype, device=device or "cuda")
        return out.fill_(value)
    return _gen("fill", _size([shape]), [value], dtype, device, out)


def full(size, fill_value, *, dtype=None, device=None, out=None):
    return fill(size, fill_value, dtype, device=device, out=out)


def arange(start, end=None, step=1, *, dtype=None, device=None, out=None):
    """torch.arange(start, end, step) / torch.arange(end)."""
    require_torch()
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if dtype is None:
        dtype = torch.int64 if all(isinstance(v, numbers.Integral) for v in (start, end, step)) \
            else torch.get_default_dtype()
    n = max(0, math.ceil((end - start) / step))
    return _gen("arange", (n,), [start, step], dtype, device, out)


def linspace(start, end, steps, *, dtype=None, device=None, out=None):
    return _gen("linspace", (int(steps),), [start, end, steps], dtype or torch.get_default_dtype(), device, out)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, out=None):
    return _gen("logspace", (int(steps),), [start, end, steps, base], dtype or torch.get_default_dtype(),
                device, out)


def eye(n, m=None, *, dtype=None, device=None, out=None):
    m = n if m is None else m
    return _gen("eye", (n, m), [m], dtype or torch.get_default_dtype(), device, out)


# ---- build the namespace ----------------------------------------------------------------------------
# The overrides take the place of the generic wrappers of the same name (div, clamp, lerp, prelu, ...).
_OVERRIDES = {f.__name__: f for f in (div, floor_divide, clamp, clamp_min, clamp_max, lerp, rrelu, prelu,
                                      prelu_backward, nan_to_num, nan_to_num_backward, logit, logit_backward,
                                      polygamma, cast, fill, full, arange, linspace, logspace, eye)}
for _name in OPS:
    if _name in _GATED:
        _make_gated(_name)
        continue
    if _name not in _SPECIAL and _name not in _OVERRIDES:
        _make_forward(_name)
    if OPS[_name]["bw"] != "none" and _name + "_backward" not in _OVERRIDES:
        _make_backward(_name)
for _name, _fn in _OVERRIDES.items():
    _export(_name, _fn)

# A few torch aliases.
for _alias, _target in {"true_divide": "div", "divide": "div", "multiply": "mul", "subtract": "sub",
                        "negative": "neg", "absolute": "abs", "clip": "clamp", "arctan2": "atan2",
                        "fix": "trunc", "not_equal": "ne", "greater": "gt", "greater_equal": "ge",
                        "less": "lt", "less_equal": "le", "arcsin": "asin", "arccos": "acos",
                        "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh"}.items():
    globals()[_alias] = globals()[_target]
    __all__.append(_alias)

# The other families (one module each, under their torch names; each module defines __all__).
import importlib as _importlib

_FAMILY_MODULES = ("norm", "gemm", "index", "loss", "quant", "ctc", "gguf")
_mod_name = _mod = _fname = None
for _mod_name in _FAMILY_MODULES:
    _mod = _importlib.import_module("." + _mod_name, __package__)
    for _fname in _mod.__all__:
        globals()[_fname] = getattr(_mod, _fname)
        __all__.append(_fname)

__all__ = sorted(set(__all__))
del _name, _fn, _alias, _target, _mod_name, _mod, _fname
