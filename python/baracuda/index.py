"""Indexing, shape, embedding and segment ops under their torch names (JAX names for the segment
ops and ``lax_*`` for jax.lax's gather / scatter), with autograd.

Rows of ``_C.index_ops()`` (include/baracuda/ops/index_ops.def). Forward kernels: the mapped
copy (contiguous / permute / transpose copies, cat, stack, pad, flip, roll, tile, triu, tril,
slice writes), the gather (gather, take_along_dim, index_select, embedding, advanced indexing,
one_hot, lax_gather), the scatter (scatter, scatter_add, scatter_reduce, index_put, index_add,
lax_scatter, segment_sum / max / min / prod / mean), the select engine (nonzero, masked_select,
masked_scatter), the rows engine (embedding_bag fused, embedding_renorm_ for max_norm) and the
generate engine (tril_indices, triu_indices). meshgrid returns torch's expanded views (no copy;
``contiguous`` of one materialises it through the copy kernel). Backward passes reuse them:
gather's is a scatter_add, index_select's an index_add, segment_sum's a row gather, index's an
accumulating index_put, lax_gather's a lax_scatter_add; pad, embedding and embedding_bag have
backward plans of their own.

Out-of-range indices are never dereferenced. The kernels raise a device flag; this module reads
it after the call and raises ``IndexError`` (one host synchronization per call). Set
``baracuda.index.check_indices = "deferred"`` for torch's device-side assert semantics without the
synchronization: one sticky flag per device is copied to the host behind each call, and a later
checked call (or ``sync_errors()``) raises once it shows an error. ``check_indices = False`` skips
the check (out-of-range gathers then read zeros, scatters drop the element). JAX-style ops
(segment_*, lax_* in clip / fill mode) never fail by definition and never synchronize.

Scatter-style sums and products run with atomics unless ``deterministic=True`` is passed or
``torch.use_deterministic_algorithms(True)`` is on; then a stable sort of the destinations and
fixed-order reductions make the result bit-identical run to run (``index_sku`` says which ran).
Means (scatter_reduce's, segment_mean) and the 8/16-bit integer reductions always take the
sorted path; embedding's backward too, and embedding_bag's in f16 / bf16.

Sizes that depend on the data (nonzero, argwhere, masked_select, and the bool masks of advanced
indexing) synchronize once, as torch does: the plan's count pass writes the count to a device
scalar, Python reads it and allocates the exact output, and the write pass reuses the counts
left in the workspace. ``nonzero_static`` takes a size bound instead and never synchronizes.
"""
from . import _C
from ._autograd import check_flag, current_stream, dl, error_flag, require_torch, sync_errors, torch

__all__ = ["contiguous", "permute_copy", "transpose_copy", "cat", "concat", "concatenate", "stack", "split", "chunk",
           "pad", "flip", "roll", "rot90", "tile", "repeat", "expand", "expand_copy", "repeat_interleave", "triu", "tril", "slice_scatter", "slice_write_",
           "diagonal", "diag_embed", "diag", "gather", "take_along_dim", "take", "put", "index_select", "scatter",
           "scatter_add", "scatter_reduce", "index_copy", "index_fill", "index_add", "index", "index_put", "one_hot",
           "nonzero", "nonzero_static", "argwhere", "masked_select", "masked_scatter",
           "dynamic_slice", "dynamic_update_slice", "lax_gather", "lax_scatter", "lax_scatter_add",
           "lax_scatter_mul", "lax_scatter_min", "lax_scatter_max",
           "embedding", "embedding_bag", "embedding_renorm_", "meshgrid", "tril_indices", "triu_indices",
           "segment_sum", "segment_max", "segment_min", "segment_prod", "segment_mean", "sync_errors"]

# An extension built before this family existed has no index bindings: the other families must
# still import (functional.py imports every family), and the calls here then fail clearly.
INDEX_OPS = {row["name"]: row for row in _C.index_ops()} if hasattr(_C, "index_ops") else {}

check_indices = True  # True, "deferred" or False (see the module docstring)


# ---- launch helpers ----------------------------------------------------------------------------
def _deterministic(flag):
    if flag is not None:
        return bool(flag)
    return torch.are_deterministic_algorithms_enabled()


def _export(tensors):
    """DLPack capsules are single-use: export afresh for every _C call."""
    out = {}
    for k, v in tensors.items():
        if v is None:
            continue
        out[k] = [dl(t) for t in v] if isinstance(v, (list, tuple)) else dl(v)
    return out


_LINEARIZED = ("index", "index_put", "lax_gather", "lax_scatter")  # their plans linearize indices into workspace


def _workspace(op, tensors, params, backward, deterministic, device):
    """The plan's workspace for these tensors (None when it needs none). Only plans that can
    need one are asked (asking costs a plan selection)."""
    engine = INDEX_OPS[op]["engine"]
    if not (engine in ("scatter", "select") or op in _LINEARIZED or (op == "embedding" and backward)
            or op == "embedding_renorm" or (op == "embedding_bag" and backward)):
        return None
    n = _C.index_workspace_size(op, backward, _export(tensors), params, deterministic)
    return torch.empty(n, dtype=torch.uint8, device=device) if n else None




def _run(op, tensors, params=None, backward=False, deterministic=False, check=True):
    """Runs one plan on torch's current stream; checks the out-of-range flag of ops that report
    (the table's `flag` column) unless `check` is False (JAX's modes never fail)."""
    if not INDEX_OPS:
        raise RuntimeError("baracuda._C has no index bindings: rebuild the extension (python/src/index_bindings.cpp)")
    params = params or {}
    out = tensors["out"]
    device = out.device
    flag = None
    mode = check_indices if INDEX_OPS[op]["flag"] and check else False
    if mode:
        flag = error_flag(mode, device)
        tensors = dict(tensors, error=flag)
    ws = _workspace(op, tensors, params, backward, deterministic, device)
    _C.index(op, backward, _export(tensors), params, current_stream(device), dl(ws) if ws is not None else None,
             deterministic)
    check_flag(mode, flag, op, lambda: f"baracuda.functional.{op}: index out of range (the output may be "
                                       "partially written; inputs are untouched)")
    return out


def index_sku(op, tensors, params=None, backward=False, deterministic=False):
    """The plan's SKU and the kernel variant it would launch for these tensors."""
    return _C.index_sku(op, backward, _export(tensors), params or {}, deterministic)


def _check_cuda(name, *ts):
    for x in ts:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"baracuda.functional.{name}: expected a tensor, got {type(x).__name__}")
        if x.device.type != "cuda":
            raise RuntimeError(f"baracuda.functional.{name}: tensors must be on a CUDA device, got {x.device}")


def _check_index(name, index):
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index, got {index.dtype}")


def _wrap_dim(dim, ndim):
    r = max(ndim, 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


def _grad_mode(*ts):
    return torch.is_grad_enabled() and any(t is not None and isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in ts)


# ---- raw forward ops -----------------------------------------------------------------------------
def _copy_into(out, x):
    if out.numel():
        _run("copy", {"x": x, "out": out})
    return out


def _contiguous(x):
    return _copy_into(torch.empty(x.shape, dtype=x.dtype, device=x.device), x)


def _gather(x, dim, index):
    out = torch.empty(index.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("gather", {"x": x, "index": index, "out": out}, {"dim": dim})
    return out


def _scatter_add(x, dim, index, src, deterministic):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("scatter_add", {"x": x, "index": index, "src": src, "out": out}, {"dim": dim},
             deterministic=deterministic)
    return out


def _index_select(x, dim, index):
    shape = list(x.shape)
    shape[dim] = index.numel()
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("index_select", {"x": x, "index": index.reshape(-1), "out": out}, {"dim": dim})
    return out


def _assign(op, x, dim, index, src, deterministic):
    """scatter / index_copy into a copy of x (src may be an expanded scalar)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run(op, {"x": x, "index": index if op == "scatter" else index.reshape(-1), "src": src, "out": out},
             {"dim": dim}, deterministic=deterministic)
    return out


def _scalar(value, dtype, device):
    """A 0-d tensor of `value` in `dtype`, through a cast (torch has no fill kernel for fp8)."""
    return torch.tensor(value, device=device).to(dtype)


def _filled(x, dim, index, value, deterministic):
    """index_fill: index_copy from the value expanded (stride 0) to the source's shape."""
    shape = list(x.shape)
    shape[dim] = index.numel()
    src = _scalar(value, x.dtype, x.device).expand(shape)
    return _assign("index_copy", x, dim, index, src, deterministic)


def _index_add(x, dim, index, src, deterministic):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("index_add", {"x": x, "index": index.reshape(-1), "src": src, "out": out}, {"dim": dim},
             deterministic=deterministic)
    return out


def _segment(op, data, ids, num_segments, deterministic):
    out = torch.empty((num_segments,) + tuple(data.shape[1:]), dtype=data.dtype, device=data.device)
    if out.numel():
        _run(op, {"x": data, "index": ids, "out": out}, {"num_segments": num_segments}, deterministic=deterministic)
    return out


def _pad_pairs(name, x, pad):
    """torch's pad tuple (last dim first) -> (before, after) for every dim in order."""
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.dim():
        raise RuntimeError(f"{name}: Padding length must be divisible by 2 and at most 2 * input.dim() "
                           f"({2 * x.dim()}), got {len(pad)}")
    pairs = [0] * (2 * x.dim())
    for i in range(len(pad) // 2):
        d = x.dim() - 1 - i
        pairs[2 * d], pairs[2 * d + 1] = pad[2 * i], pad[2 * i + 1]
    return pairs


def _pad_fw(x, pairs, mode, value):
    shape = [x.shape[d] + pairs[2 * d] + pairs[2 * d + 1] for d in range(x.dim())]
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("pad", {"x": x, "out": out}, {"pads": pairs, "mode": mode, "value": float(value)})
    return out


def _pad_bw(grad, shape, pairs, mode):
    gin = torch.empty(shape, dtype=grad.dtype, device=grad.device)
    if gin.numel():
        _run("pad", {"x": grad, "out": gin}, {"pads": pairs, "mode": mode}, backward=True)
    return gin


def _mapped(op, x, params):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run(op, {"x": x, "out": out}, params)
    return out


def _embedding_bw(grad, ids, num_weights, padding_idx, scale_grad_by_freq=False):
    gw = torch.empty((num_weights, grad.shape[-1]), dtype=grad.dtype, device=grad.device)
    if gw.numel():
        _run("embedding", {"x": grad, "index": ids, "out": gw},
             {"padding_idx": padding_idx, "scale_grad_by_freq": bool(scale_grad_by_freq)}, backward=True)
    return gw


def _renorm_(weight, ids, max_norm, norm_type):
    """torch.embedding_renorm_ on weight's storage (no autograd, as torch's no_grad helper)."""
    if ids.numel() and weight.numel():
        _run("embedding_renorm", {"index": ids, "out": weight.detach()},
             {"max_norm": float(max_norm), "norm_type": float(norm_type)})
    return weight


def _bag_tensors(ids, offsets, psw):
    t = {"index": ids}
    if offsets is not None:
        t["offsets"] = offsets
    if psw is not None:
        t["per_sample_weights"] = psw
    return t


def _bag_params(mode, include_last_offset, padding_idx, scale_grad_by_freq=False):
    return {"mode": mode, "include_last_offset": bool(include_last_offset), "padding_idx": int(padding_idx),
            "scale_grad_by_freq": bool(scale_grad_by_freq)}


def _embedding_bag_fw(weight, ids, offsets, psw, mode, include_last_offset, padding_idx):
    """The fused forward: (out [bags, D], max_indices [bags, D] for max, else None)."""
    bags = ids.shape[0] if ids.dim() == 2 else offsets.shape[0] - (1 if include_last_offset else 0)
    out = torch.empty((bags, weight.shape[1]), dtype=weight.dtype, device=weight.device)
    max_idx = torch.empty((bags, weight.shape[1]), dtype=ids.dtype, device=weight.device) if mode == "max" else None
    if out.numel():
        t = dict(_bag_tensors(ids, offsets, psw), x=weight, out=out)
        if max_idx is not None:
            t["max_indices"] = max_idx
        _run("embedding_bag", t, _bag_params(mode, include_last_offset, padding_idx))
    return out, max_idx


def _embedding_bag_bw(g, shape, weight, ids, offsets, psw, max_idx, mode, include_last_offset, padding_idx,
                      scale_grad_by_freq, deterministic, want_weight, want_psw):
    """(grad_weight or None, grad_per_sample_weights or None) from one backward plan; `weight` is
    read only for the per-sample weights' gradient."""
    gw = torch.empty(shape, dtype=g.dtype, device=g.device) if want_weight else None
    gpsw = torch.empty(psw.shape, dtype=g.dtype, device=g.device) if want_psw else None
    t = dict(_bag_tensors(ids, offsets, psw), x=g)
    if max_idx is not None:
        t["max_indices"] = max_idx
    run_w = gw is not None and gw.numel() > 0
    run_p = gpsw is not None and gpsw.numel() > 0
    if run_w:
        t["out"] = gw
    if run_p:
        t["grad_per_sample_weights"] = gpsw
        t["weight"] = weight
    if run_w or run_p:
        _run("embedding_bag", t, _bag_params(mode, include_last_offset, padding_idx, scale_grad_by_freq),
             backward=True, deterministic=deterministic)
    return gw, gpsw


# ---- autograd --------------------------------------------------------------------------------------
if torch is not None:
    from torch.autograd.function import once_differentiable

    class _CopyFunction(torch.autograd.Function):
        """out = x viewed through a permutation (identity for contiguous)."""

        @staticmethod
        def forward(ctx, x, dims):
            ctx.dims = dims
            return _contiguous(x.permute(dims) if dims is not None else x)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            if ctx.dims is None:
                return g, None
            inv = [0] * len(ctx.dims)
            for i, d in enumerate(ctx.dims):
                inv[d] = i
            return _contiguous(g.permute(inv)), None

    class _CatFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, dim, stacked, *xs):
            ctx.dim, ctx.stacked = dim, stacked
            ctx.sizes = [x.shape[dim] if not stacked else 1 for x in xs]
            if stacked:
                shape = list(xs[0].shape)
                shape.insert(dim, len(xs))
            else:
                shape = list(xs[0].shape)
                shape[dim] = sum(ctx.sizes)
            out = torch.empty(shape, dtype=xs[0].dtype, device=xs[0].device)
            if out.numel():
                _run("stack" if stacked else "cat", {"inputs": list(xs), "out": out}, {"dim": dim})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            grads, off = [], 0
            for n in ctx.sizes:
                piece = g.narrow(ctx.dim, off, n)
                grads.append(piece.squeeze(ctx.dim) if ctx.stacked else piece)
                off += n
            return (None, None) + tuple(grads)

    class _PadFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, pairs, mode, value):
            ctx.pairs, ctx.mode, ctx.shape = pairs, mode, tuple(x.shape)
            return _pad_fw(x, pairs, mode, value)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            return _pad_bw(g, ctx.shape, ctx.pairs, ctx.mode), None, None, None

    class _MappedFunction(torch.autograd.Function):
        """flip / roll / triu / tril: the backward is the same map (inverted for roll)."""

        @staticmethod
        def forward(ctx, x, op, params, back_params):
            ctx.op, ctx.back = op, back_params
            return _mapped(op, x, params)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            return _mapped(ctx.op, g, ctx.back), None, None, None

    class _RepeatInterleaveFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, repeats, dim):
            ctx.repeats, ctx.dim, ctx.shape = repeats, dim, tuple(x.shape)
            shape = list(x.shape)
            shape[dim] *= repeats
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
            if out.numel():
                _run("repeat_interleave", {"x": x, "out": out}, {"repeats": repeats, "dim": dim})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            # Sum each run of `repeats` copies: g viewed as [..., n, repeats, ...].
            shape = list(ctx.shape)
            shape.insert(ctx.dim + 1, ctx.repeats)
            if not g.numel():
                return torch.zeros(ctx.shape, dtype=g.dtype, device=g.device), None, None
            return g.reshape(shape).sum(ctx.dim + 1), None, None

    class _TileFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, reps):
            ctx.reps, ctx.shape = reps, tuple(x.shape)
            shape = [s * r for s, r in zip(x.shape, reps)]
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
            if out.numel():
                _run("tile", {"x": x, "out": out}, {"repeats": list(reps)})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            # Sum over the repetitions: g viewed as [r0, s0, r1, s1, ...].
            view = []
            for r, s in zip(ctx.reps, ctx.shape):
                view += [r, s]
            g = g.reshape(view).sum(dim=tuple(range(0, 2 * len(ctx.reps), 2))) if g.numel() else \
                torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return g, None

    class _GatherFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.shape, ctx.det = dim, tuple(x.shape), deterministic
            return _gather(x, dim, index)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            zeros = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return _scatter_add(zeros, ctx.dim, index, g, ctx.det), None, None, None

    class _IndexSelectFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.shape, ctx.det = dim, tuple(x.shape), deterministic
            return _index_select(x, dim, index)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            zeros = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return _index_add(zeros, ctx.dim, index, g, ctx.det), None, None, None

    class _ScatterAddFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, src, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.src_shape = dim, tuple(src.shape)
            return _scatter_add(x, dim, index, src, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            gsrc = None
            if ctx.needs_input_grad[3]:
                part = _gather(g, ctx.dim, index)
                if tuple(part.shape) == ctx.src_shape:
                    gsrc = part
                else:  # src larger than index: the rest received nothing
                    gsrc = torch.zeros(ctx.src_shape, dtype=g.dtype, device=g.device)
                    gsrc[tuple(slice(0, s) for s in part.shape)] = part
            return g, None, None, gsrc, None

    class _DiagEmbedFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, offset, d1, d2):
            ctx.args = (offset, d1, d2)
            return _diag_embed(x, offset, d1, d2)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            return _contiguous(torch.diagonal(g, *ctx.args)), None, None, None

    class _ScatterFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, src, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.src_shape, ctx.det = dim, tuple(src.shape), deterministic
            return _assign("scatter", x, dim, index, src, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            zero = torch.zeros((), dtype=g.dtype, device=g.device).expand(index.shape)
            gx = _assign("scatter", g, ctx.dim, index, zero, ctx.det) if ctx.needs_input_grad[0] else None
            gsrc = None
            if ctx.needs_input_grad[3]:
                part = _gather(g, ctx.dim, index)
                gsrc = part
                if tuple(part.shape) != ctx.src_shape:  # src larger than index: the rest received nothing
                    gsrc = torch.zeros(ctx.src_shape, dtype=g.dtype, device=g.device)
                    gsrc[tuple(slice(0, s) for s in part.shape)] = part
            return gx, None, None, gsrc, None

    class _IndexCopyFunction(torch.autograd.Function):
        """index_copy (src given) and index_fill (src None: a constant)."""

        @staticmethod
        def forward(ctx, x, dim, index, src, value, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.det = dim, deterministic
            if src is None:
                return _filled(x, dim, index, value, deterministic)
            return _assign("index_copy", x, dim, index, src, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            gx = _filled(g, ctx.dim, index, 0, ctx.det) if ctx.needs_input_grad[0] else None
            gsrc = _index_select(g, ctx.dim, index) if ctx.needs_input_grad[3] else None
            return gx, None, None, gsrc, None, None

    class _IndexAddFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, src, alpha, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.alpha = dim, alpha
            return _index_add(x, dim, index, src if alpha == 1 else src * alpha, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            gsrc = None
            if ctx.needs_input_grad[3]:
                gsrc = _index_select(g, ctx.dim, index)
                if ctx.alpha != 1:
                    gsrc = gsrc * ctx.alpha
            return g, None, None, gsrc, None, None

    class _EmbeddingFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, ids, weight, padding_idx, scale_grad_by_freq=False):
            ctx.save_for_backward(ids)
            ctx.n, ctx.padding_idx, ctx.scale = weight.shape[0], padding_idx, scale_grad_by_freq
            out = torch.empty(tuple(ids.shape) + (weight.shape[1],), dtype=weight.dtype, device=weight.device)
            if out.numel():
                _run("embedding", {"x": weight, "index": ids, "out": out}, {"padding_idx": padding_idx})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (ids,) = ctx.saved_tensors
            return None, _embedding_bw(g, ids, ctx.n, ctx.padding_idx, ctx.scale), None, None

    class _EmbeddingBagFunction(torch.autograd.Function):
        """The fused embedding_bag: forward and backward plans of the rows engine."""

        @staticmethod
        def forward(ctx, weight, psw, ids, offsets, mode, include_last_offset, padding_idx, scale_grad_by_freq,
                    deterministic):
            out, max_idx = _embedding_bag_fw(weight, ids, offsets, psw, mode, include_last_offset, padding_idx)
            want_psw = psw is not None and ctx.needs_input_grad[1]
            ctx.save_for_backward(weight if want_psw else None, ids, offsets, psw, max_idx)
            ctx.shape = tuple(weight.shape)
            ctx.args = (mode, include_last_offset, padding_idx, scale_grad_by_freq, deterministic)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            weight, ids, offsets, psw, max_idx = ctx.saved_tensors
            mode, last, pad, scale, det = ctx.args
            want_w = ctx.needs_input_grad[0]
            want_psw = psw is not None and ctx.needs_input_grad[1]
            gw, gpsw = _embedding_bag_bw(g, ctx.shape, weight, ids, offsets, psw, max_idx, mode, last, pad, scale, det,
                                         want_w, want_psw)
            return gw, gpsw, None, None, None, None, None, None, None

    class _SegmentSumFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, data, ids, num_segments, deterministic):
            ctx.save_for_backward(ids)
            return _segment("segment_sum", data, ids, num_segments, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (ids,) = ctx.saved_tensors
            return _rows_of(g, ids), None, None, None

    class _SegmentExtremumFunction(torch.autograd.Function):
        """segment_max / segment_min. Tie rule (forward and backward agree): every element equal
        to its segment's extremum is an arg-extremum, and the segment's gradient is split equally
        among them (torch's scatter_reduce amax/amin and JAX's segment_max/min do the same)."""

        @staticmethod
        def forward(ctx, data, ids, num_segments, deterministic, op):
            y = _segment(op, data, ids, num_segments, deterministic)
            ctx.save_for_backward(data, ids, y)
            ctx.num_segments, ctx.det = num_segments, deterministic
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            data, ids, y = ctx.saved_tensors
            hit = (data == _rows_of(y, ids)).to(g.dtype)
            count = _segment("segment_sum", hit, ids, ctx.num_segments, True).clamp_min(1)
            return hit * _rows_of(g / count, ids), None, None, None, None
else:  # pragma: no cover
    _CopyFunction = None


def _rows_of(t, ids):
    """t[ids] along dim 0, zero rows for ids outside [0, len(t)) (JAX drops those segment ids)."""
    shape = (ids.numel(),) + tuple(t.shape[1:])
    out = torch.empty(shape, dtype=t.dtype, device=t.device)
    if out.numel():
        # No error flag: out-of-range ids read zeros by design here.
        _C.index("index_select", False, _export({"x": t, "index": ids, "out": out}), {"dim": 0},
                 current_stream(t.device), None, False)
    return out


# ---- public functions ----------------------------------------------------------------------------
def contiguous(input):
    """A contiguous copy of any strided view (torch.Tensor.contiguous, always copying)."""
    require_torch()
    _check_cuda("contiguous", input)
    if _grad_mode(input):
        return _CopyFunction.apply(input, None)
    return _contiguous(input)


def permute_copy(input, dims):
    """torch.permute_copy: the permuted view materialised (tiled transpose when the innermost
    axis changes)."""
    require_torch()
    _check_cuda("permute_copy", input)
    dims = [_wrap_dim(int(d), input.dim()) for d in dims]
    if sorted(dims) != list(range(input.dim())):
        raise RuntimeError(f"permute_copy: dims {dims} is not a permutation of {input.dim()} dims")
    if _grad_mode(input):
        return _CopyFunction.apply(input, tuple(dims))
    return _contiguous(input.permute(dims))


def transpose_copy(input, dim0, dim1):
    dims = list(range(input.dim()))
    a, b = _wrap_dim(dim0, input.dim()), _wrap_dim(dim1, input.dim())
    dims[a], dims[b] = dims[b], dims[a]
    return permute_copy(input, dims)


def cat(tensors, dim=0, *, out=None):
    require_torch()
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    _check_cuda("cat", *tensors)
    # torch skips legacy empty 1-d tensors of shape [0]
    ref = next((t for t in tensors if not (t.dim() == 1 and t.numel() == 0)), tensors[0])
    tensors = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0 and ref.dim() != 1)]
    dim = _wrap_dim(dim, ref.dim())
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    tensors = [t.to(dtype) for t in tensors]
    for i, t in enumerate(tensors):
        if t.dim() != ref.dim() or any(t.shape[d] != ref.shape[d] for d in range(ref.dim()) if d != dim):
            raise RuntimeError(f"cat(): Sizes of tensors must match except in dimension {dim}. Expected "
                               f"{list(ref.shape)} but got {list(t.shape)} for tensor number {i} in the list.")
    if out is None and _grad_mode(*tensors):
        return _CatFunction.apply(dim, False, *tensors)
    res = _CatFunction.forward(_Ctx(), dim, False, *tensors)
    if out is not None:
        out.copy_(res)
        return out
    return res


concat = concatenate = cat


def stack(tensors, dim=0, *, out=None):
    require_torch()
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    _check_cuda("stack", *tensors)
    dim = _wrap_dim(dim, tensors[0].dim() + 1)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    tensors = [t.to(dtype) for t in tensors]
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                               f"entry 0 and {list(t.shape)} at entry {i}")
    if out is None and _grad_mode(*tensors):
        return _CatFunction.apply(dim, True, *tensors)
    res = _CatFunction.forward(_Ctx(), dim, True, *tensors)
    if out is not None:
        out.copy_(res)
        return out
    return res


class _Ctx:
    """Stands in for an autograd context when a Function's forward runs without autograd."""

    def save_for_backward(self, *ts):
        pass


def pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad: constant (negative pads crop), reflect, replicate, circular, on
    any number of trailing dims."""
    require_torch()
    _check_cuda("pad", input)
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode '{mode}' is not supported")
    if mode != "constant" and value not in (None, 0):
        raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument.")
    pairs = _pad_pairs("pad", input, pad)
    value = 0.0 if value is None else value
    if _grad_mode(input) and input.dtype.is_floating_point:
        return _PadFunction.apply(input, pairs, mode, value)
    return _pad_fw(input, pairs, mode, value)


def flip(input, dims):
    require_torch()
    _check_cuda("flip", input)
    dims = [_wrap_dim(int(d), input.dim()) for d in ([dims] if isinstance(dims, int) else dims)]
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"flip: dims has duplicates: {dims}")
    params = {"flip_dims": dims}
    if _grad_mode(input):
        return _MappedFunction.apply(input, "flip", params, params)
    return _mapped("flip", input, params)


def roll(input, shifts, dims=None):
    require_torch()
    _check_cuda("roll", input)
    shifts = [shifts] if isinstance(shifts, int) else [int(s) for s in shifts]
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError("roll: shifts must be a single value when dims is not given")
        flat = input.reshape(-1)
        return roll(flat, shifts, [0]).view(input.shape)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(dims) != len(shifts):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    per = [0] * input.dim()
    for s, d in zip(shifts, dims):
        per[_wrap_dim(d, input.dim())] += s
    params, back = {"shifts": per}, {"shifts": [-s for s in per]}
    if _grad_mode(input):
        return _MappedFunction.apply(input, "roll", params, back)
    return _mapped("roll", input, params)


def split(tensor, split_size_or_sections, dim=0):
    """torch.split: views, no copy (nothing to launch)."""
    return torch.split(tensor, split_size_or_sections, dim)


def chunk(input, chunks, dim=0):
    """torch.chunk: views, no copy."""
    return torch.chunk(input, chunks, dim)


def rot90(input, k=1, dims=(0, 1)):
    """torch.rot90: one mapped copy (a flip of a transposed view)."""
    require_torch()
    _check_cuda("rot90", input)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    d0, d1 = _wrap_dim(dims[0], input.dim()), _wrap_dim(dims[1], input.dim())
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 0:
        return contiguous(input)
    if k == 2:
        return flip(input, (d0, d1))
    # k = 1: flip(d1) then swap = flip of the swapped view along d0; k = 3: along d1.
    return flip(input.transpose(d0, d1), (d0,) if k == 1 else (d1,))


def repeat_interleave(input, repeats, dim=None, *, output_size=None):
    """torch.repeat_interleave. An integer count is one mapped copy; a tensor of counts gathers
    rows through index_select (the index is built with torch.repeat_interleave on an arange)."""
    require_torch()
    _check_cuda("repeat_interleave", input)
    if dim is None:
        input, dim = input.reshape(-1), 0
    dim = _wrap_dim(dim, input.dim())
    if isinstance(repeats, torch.Tensor) and repeats.numel() == 1:
        repeats = int(repeats.item())
    if isinstance(repeats, torch.Tensor):
        index = torch.repeat_interleave(torch.arange(input.shape[dim], device=input.device), repeats.to(input.device),
                                        output_size=output_size)
        return index_select(input, dim, index)
    repeats = int(repeats)
    if repeats < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    if _grad_mode(input):
        return _RepeatInterleaveFunction.apply(input, repeats, dim)
    return _RepeatInterleaveFunction.forward(_Ctx(), input, repeats, dim)


def tile(input, dims):
    require_torch()
    _check_cuda("tile", input)
    dims = [int(d) for d in dims]
    if len(dims) < input.dim():
        dims = [1] * (input.dim() - len(dims)) + dims
    x = input.reshape((1,) * (len(dims) - input.dim()) + tuple(input.shape))
    if _grad_mode(input):
        return _TileFunction.apply(x, tuple(dims))
    return _TileFunction.forward(_Ctx(), x, tuple(dims))



def _sizes(args):
    """torch's *sizes convention: ints, or one list / tuple / torch.Size."""
    if len(args) == 1 and isinstance(args[0], (list, tuple, torch.Size)):
        args = tuple(args[0])
    return [int(d) for d in args]


def repeat(input, *sizes):
    """torch.Tensor.repeat: tile with as many repeats as dims or more (no implicit leading 1s for
    the input's own dims, unlike torch.tile, which pads the repeats)."""
    require_torch()
    sizes = _sizes(sizes)
    if len(sizes) < input.dim():
        raise RuntimeError("repeat: Number of dimensions of repeat dims can not be smaller than number of "
                           f"dimensions of tensor (got {len(sizes)} repeat dims for a {input.dim()}-D tensor)")
    return tile(input, sizes)


def expand(input, *sizes):
    """torch.Tensor.expand: a view (stride 0 along the expanded dims, -1 keeps a size); nothing is
    copied, as torch's. ``expand_copy`` materialises it."""
    require_torch()
    return input.expand(_sizes(sizes))


def expand_copy(input, size):
    """torch.expand_copy: the expanded view copied by the copy kernel (differentiable: the gradient
    sums over the expanded dims through torch's expand)."""
    return contiguous(expand(input, size))

def _tri(op, input, diagonal):
    require_torch()
    _check_cuda(op, input)
    if input.dim() < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions")
    params = {"diagonal": int(diagonal)}
    if _grad_mode(input):
        return _MappedFunction.apply(input, op, params, params)
    return _mapped(op, input, params)


def triu(input, diagonal=0):
    return _tri("triu", input, diagonal)


def tril(input, diagonal=0):
    return _tri("tril", input, diagonal)


def slice_write_(dst, src, dim=0, start=None, end=None):
    """dst[..., start:end, ...] = src along `dim`, in place (the KV-cache write); no autograd.
    `src` broadcasts to the slice (expand, stride 0)."""
    require_torch()
    _check_cuda("slice_write_", dst, src)
    dim = _wrap_dim(dim, dst.dim())
    view = dst[(slice(None),) * dim + (slice(start, end),)]
    _copy_into(view, src.to(dst.dtype).expand(view.shape))
    return dst


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """torch.slice_scatter (out of place): input with input[..., start:end:step, ...] = src."""
    require_torch()
    _check_cuda("slice_scatter", input, src)
    dim = _wrap_dim(dim, input.dim())
    index = (slice(None),) * dim + (slice(start, end, step),)
    if _grad_mode(input, src):  # compose differentiably through torch's autograd of views
        out = contiguous(input).clone()
        out[index] = src
        return out
    out = _contiguous(input)
    view = out[index]
    if tuple(view.shape) != tuple(src.shape):
        raise RuntimeError(f"slice_scatter: expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(view.shape)}")
    _copy_into(view, src.to(out.dtype))
    return out


def _diag_embed(x, offset, d1, d2):
    n = x.shape[-1] + abs(offset)
    shape = list(x.shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, n)
    out = torch.zeros(shape, dtype=x.dtype, device=x.device)
    view = torch.diagonal(out, offset, d1, d2)  # a strided view of out: one copy writes it
    if view.numel():
        _copy_into(view, x)
    return out


def diagonal(input, offset=0, dim1=0, dim2=1):
    """torch.diagonal, materialised (torch returns a view; this is its contiguous copy)."""
    return contiguous(torch.diagonal(input, offset, dim1, dim2))


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    require_torch()
    _check_cuda("diag_embed", input)
    r = input.dim() + 1
    d1, d2 = _wrap_dim(dim1, r), _wrap_dim(dim2, r)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if _grad_mode(input):
        return _DiagEmbedFunction.apply(input, offset, d1, d2)
    return _diag_embed(input, offset, d1, d2)


def diag(input, diagonal=0):
    """torch.diag: a 1-D input becomes a matrix with it on `diagonal`, a 2-D input gives that
    diagonal."""
    if input.dim() == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.dim() != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + str(input.dim()) + "D")
    return contiguous(torch.diagonal(input, diagonal))


def gather(input, dim, index, *, sparse_grad=False, out=None, deterministic=None):
    require_torch()
    _check_cuda("gather", input, index)
    _check_index("gather", index)
    if sparse_grad:
        raise NotImplementedError("gather: sparse_grad is not supported")
    dim = _wrap_dim(dim, input.dim())
    x, idx = (input.reshape(1), index.reshape(1)) if input.dim() == 0 else (input, index)
    if idx.dim() != x.dim():
        raise RuntimeError("gather(): Index tensor must have the same number of dimensions as input tensor")
    det = _deterministic(deterministic)
    if out is None and _grad_mode(input):
        res = _GatherFunction.apply(x, dim, idx, det)
    else:
        res = _gather(x.detach(), dim, idx)
    res = res.reshape(index.shape) if input.dim() == 0 else res
    if out is not None:
        out.copy_(res)
        return out
    return res


def take_along_dim(input, indices, dim=None, *, out=None):
    require_torch()
    _check_cuda("take_along_dim", input, indices)
    _check_index("take_along_dim", indices)
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1), out=out)
    dim = _wrap_dim(dim, input.dim())
    if input.dim() != indices.dim():
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same number of dimensions")
    # Broadcast every dim but `dim` (expand: stride 0, no copy).
    xs, js = list(input.shape), list(indices.shape)
    for d in range(input.dim()):
        if d == dim:
            continue
        n = max(xs[d], js[d]) if 1 in (xs[d], js[d]) else xs[d]
        if xs[d] != js[d] and 1 not in (xs[d], js[d]):
            raise RuntimeError(f"take_along_dim: shapes {list(input.shape)} and {list(indices.shape)} do not "
                               f"broadcast at dim {d}")
        xs[d] = js[d] = n
    js[dim] = indices.shape[dim]
    xs[dim] = input.shape[dim]
    return gather(input.expand(xs), dim, indices.expand(js), out=out)


def index_select(input, dim, index, *, out=None, deterministic=None):
    require_torch()
    _check_cuda("index_select", input, index)
    _check_index("index_select", index)
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    x = input.reshape(1) if input.dim() == 0 else input
    dim = _wrap_dim(dim, x.dim())
    idx = index.reshape(-1)
    if out is None and _grad_mode(input):
        res = _IndexSelectFunction.apply(x, dim, idx, _deterministic(deterministic))
    else:
        res = _index_select(x.detach(), dim, idx)
    res = res.reshape(()) if input.dim() == 0 else res
    if out is not None:
        out.copy_(res)
        return out
    return res


def scatter_add(input, dim, index, src, *, deterministic=None):
    require_torch()
    _check_cuda("scatter_add", input, index, src)
    _check_index("scatter_add", index)
    dim = _wrap_dim(dim, input.dim())
    src = src.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, src):
        return _ScatterAddFunction.apply(input, dim, index, src, det)
    return _scatter_add(input, dim, index, src, det)


def scatter(input, dim, index, src=None, value=None, *, reduce=None, deterministic=None):
    """torch.scatter (src tensor or scalar value). Duplicate indices: unspecified winner, or the
    last one in index order with deterministic=True."""
    require_torch()
    _check_cuda("scatter", input, index)
    _check_index("scatter", index)
    if src is not None and not isinstance(src, torch.Tensor):
        src, value = None, src
    if reduce is not None:  # torch's legacy reduce argument: add / multiply, self included
        if reduce not in ("add", "multiply"):
            raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
        source = src if src is not None else _scalar(value, input.dtype, input.device).expand(index.shape)
        if reduce == "add":
            return scatter_add(input, dim, index, source, deterministic=deterministic)
        return scatter_reduce(input, dim, index, source, "prod", deterministic=deterministic)
    dim = _wrap_dim(dim, input.dim())
    if src is None:
        if value is None:
            raise TypeError("scatter() needs src or value")
        src = _scalar(value, input.dtype, input.device).expand(index.shape)
    src = src.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, src):
        return _ScatterFunction.apply(input, dim, index, src, det)
    return _assign("scatter", input, dim, index, src, det)


def index_copy(input, dim, index, source, *, deterministic=None):
    """torch.index_copy. Duplicate indices: unspecified winner, or the last one in index order
    with deterministic=True."""
    require_torch()
    _check_cuda("index_copy", input, index, source)
    _check_index("index_copy", index)
    if index.dim() > 1:
        raise IndexError("index_copy_(): Index should have dimension 1 or 0")
    dim = _wrap_dim(dim, input.dim())
    source = source.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, source):
        return _IndexCopyFunction.apply(input, dim, index.reshape(-1), source, None, det)
    return _assign("index_copy", input, dim, index.reshape(-1), source, det)


def index_fill(input, dim, index, value):
    """torch.index_fill (a scalar value)."""
    require_torch()
    _check_cuda("index_fill", input, index)
    _check_index("index_fill", index)
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError("index_fill_ only supports a 0-dimensional value tensor")
        value = value.item()
    dim = _wrap_dim(dim, max(input.dim(), 1))
    x = input.reshape(1) if input.dim() == 0 else input
    if _grad_mode(input):
        res = _IndexCopyFunction.apply(x, dim, index.reshape(-1), None, value, False)
    else:
        res = _filled(x, dim, index.reshape(-1), value, False)
    return res.reshape(()) if input.dim() == 0 else res


def index_add(input, dim, index, source, *, alpha=1, deterministic=None):
    require_torch()
    _check_cuda("index_add", input, index, source)
    _check_index("index_add", index)
    if index.dim() > 1:
        raise IndexError("index_add_(): Index is supposed to be a vector")
    dim = _wrap_dim(dim, input.dim())
    source = source.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, source):
        return _IndexAddFunction.apply(input, dim, index.reshape(-1), source, alpha, det)
    return _index_add(input, dim, index.reshape(-1), source if alpha == 1 else source * alpha, det)


def _padding_idx(padding_idx, n, what="Padding_idx"):
    """torch's normalization: None -> -1, a negative value counts from the end."""
    if padding_idx is None:
        return -1
    if not -n <= padding_idx < n:
        raise AssertionError(f"{what} must be within num_embeddings")
    return padding_idx % n


def embedding_renorm_(input, indices, max_norm, norm_type):
    """torch.embedding_renorm_: every row of `input` (the [N, D] table, updated in place) that
    `indices` reference and whose norm_type-norm exceeds max_norm is scaled by
    max_norm / (norm + 1e-7), each row once (deterministic). Norms of |x| for every p (torch's
    CUDA kernel drops the |.| for p other than 1 and 2; its CPU one keeps it). Returns input."""
    require_torch()
    _check_cuda("embedding_renorm_", input, indices)
    _check_index("embedding_renorm_", indices)
    if input.dim() != 2:
        raise RuntimeError(f"embedding_renorm_: 'self' must be 2-D, got {input.dim()}-D")
    return _renorm_(input, indices, max_norm, norm_type)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """torch.nn.functional.embedding (dense gradient, sorted and deterministic backward). max_norm
    rescales the referenced rows of weight in place first (embedding_renorm_, as torch);
    scale_grad_by_freq divides each row's gradient by its id's count in input."""
    require_torch()
    _check_cuda("embedding", input, weight)
    _check_index("embedding", input)
    if sparse:
        raise NotImplementedError("embedding: sparse gradients are not supported")
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    padding_idx = _padding_idx(padding_idx, weight.shape[0])
    if max_norm is not None:
        _renorm_(weight, input, max_norm, norm_type)
    if _grad_mode(weight):
        return _EmbeddingFunction.apply(input, weight, padding_idx, bool(scale_grad_by_freq))
    return _EmbeddingFunction.forward(_Ctx(), input, weight.detach(), padding_idx, bool(scale_grad_by_freq))


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None, *,
                  deterministic=None):
    """torch.nn.functional.embedding_bag (sum, mean, max), one fused kernel: each bag's rows are
    read once (16-byte vectors) and reduced in f32 (f64 for f64) in id order, no [L, D]
    intermediate. Bags from offsets (1-D input; torch's CUDA semantics: the first bag starts at 0,
    the last ends at len(input)) or the rows of a 2-D input (include_last_offset is ignored there,
    as torch does); ids equal to padding_idx are left out (and out of mean's count); empty bags
    give zeros. max returns torch's first maximum per feature and routes the gradient to it.
    Backward: atomics for f32 / f64; for f16 / bf16 (whose own atomics would round every add),
    with deterministic=True, torch.use_deterministic_algorithms or scale_grad_by_freq, a stable
    sort of the ids and one ordered f32 / f64 sum per row (bit-identical run to run); the
    per-sample weights get their gradient too. max_norm rescales the referenced rows of weight
    in place first (embedding_renorm_)."""
    require_torch()
    _check_cuda("embedding_bag", input, weight)
    _check_index("embedding_bag", input)
    if weight.dim() != 2:
        raise RuntimeError("embedding_bag: 'weight' must be 2-D")
    if sparse:
        raise NotImplementedError("embedding_bag: sparse gradients are not supported")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, got {mode}")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if per_sample_weights is not None:
        _check_cuda("embedding_bag", per_sample_weights)
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: If per_sample_weights ({list(per_sample_weights.shape)}) is not None, "
                             f"then it must have the same shape as the input ({list(input.shape)})")
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}')")
        per_sample_weights = per_sample_weights.to(weight.dtype)
    ids = input
    if ids.dim() == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             f"fixed length sequences. However, found offsets of type {type(offsets).__name__}")
        # torch turns 2-D input into offsets arange(0, numel, n) and sets include_last_offset =
        # False: one bag a row whatever the flag says (the plan takes 2-D ids natively).
        include_last_offset = False
    elif ids.dim() == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        _check_cuda("embedding_bag", offsets)
        if offsets.dim() != 1:
            raise ValueError("offsets has to be a 1D Tensor")
        _check_index("embedding_bag", offsets)
        if offsets.dtype != ids.dtype:  # torch promotes both to the wider type
            ids, offsets = ids.long(), offsets.long()
        if include_last_offset and offsets.shape[0] < 1:
            raise RuntimeError("include_last_offset: numBags should be at least 1")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {ids.dim()}")
    padding_idx = _padding_idx(padding_idx, weight.shape[0], "padding_idx")
    if max_norm is not None:
        _renorm_(weight, ids, max_norm, norm_type)
    det = _deterministic(deterministic)
    args = (ids, offsets, mode, bool(include_last_offset), padding_idx, bool(scale_grad_by_freq), det)
    if _grad_mode(weight, per_sample_weights):
        return _EmbeddingBagFunction.apply(weight, per_sample_weights, *args)
    psw = per_sample_weights.detach() if per_sample_weights is not None else None
    return _embedding_bag_fw(weight.detach(), ids, offsets, psw, mode, bool(include_last_offset), padding_idx)[0]


def _tri_size(row, col, offset):
    """ATen's get_tril_size: the elements of tril(ones(row, col), offset)."""
    if row == 0 or col == 0:
        return 0
    first = min(col, 1 + offset) if offset > 0 else int(row + offset > 0)
    last = max(0, min(col, row + offset))
    rows_all = max(0, min(row, row + offset))
    rows_trapezoid = last - first + 1
    size = (first + last) * rows_trapezoid >> 1
    if rows_all - rows_trapezoid > 0:
        size += (rows_all - rows_trapezoid) * col
    return size


def _tri_indices(op, row, col, offset, dtype, device):
    require_torch()
    row, col, offset = int(row), int(col), int(offset)
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    dtype = torch.long if dtype is None else dtype
    if dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"baracuda.functional.{op}: dtype expected torch.int32 or torch.int64, got {dtype}")
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if device.type != "cuda":
        raise RuntimeError(f"baracuda.functional.{op}: device must be a CUDA device, got {device}")
    n = _tri_size(row, col, offset) if op == "tril_indices" else row * col - _tri_size(row, col, offset - 1)
    out = torch.empty((2, n), dtype=dtype, device=device)
    if n:
        _run(op, {"out": out}, {"row": row, "col": col, "offset": offset})
    return out


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None, pin_memory=False):
    """torch.tril_indices: [2, n] row and column indices of the lower triangle (below the
    offset-th diagonal included), in row-major order; one kernel, n from the sizes (no
    synchronization). dtype int64 (default) or int32; device: the current CUDA device by default."""
    return _tri_indices("tril_indices", row, col, offset, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None, pin_memory=False):
    """torch.triu_indices: as tril_indices, for the upper triangle (on and above the offset-th
    diagonal)."""
    return _tri_indices("triu_indices", row, col, offset, dtype, device)


def meshgrid(*tensors, indexing=None):
    """torch.meshgrid: each 0-D or 1-D input viewed along its own dim and expanded to the grid
    (torch returns expanded views too: nothing is copied; ``contiguous`` of a grid copies it with
    the copy kernel). indexing "ij" (the default) or "xy" (the first two dims swapped).
    Differentiable through torch's view ops."""
    require_torch()
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("torch.meshgrid: Expected at least one tensor in the list")
    indexing = "ij" if indexing is None else indexing
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"torch.meshgrid: expected tensors, got {type(t).__name__}")
        if t.dim() > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.dim()}-D")
        if t.dtype != tensors[0].dtype:
            raise RuntimeError("torch.meshgrid: Expected all tensors in the tensor list to have the same dtype")
        if t.device != tensors[0].device:
            raise RuntimeError("torch.meshgrid: Expected all tensors in the tensor list to have the same device")
    ts = list(tensors)
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = [t.numel() for t in ts]
    grids = [t.reshape([-1 if j == i else 1 for j in range(len(ts))]).expand(shape) for i, t in enumerate(ts)]
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def _segment_args(name, data, segment_ids, num_segments):
    _check_cuda(name, data, segment_ids)
    _check_index(name, segment_ids)
    if segment_ids.dim() != 1 or data.dim() < 1 or segment_ids.shape[0] != data.shape[0]:
        raise ValueError(f"{name}: segment_ids expected 1-d with data.shape[0]={data.shape[0] if data.dim() else 0} "
                         f"entries, got shape {list(segment_ids.shape)}")
    if num_segments is None:  # JAX: max(ids) + 1 (a host read, as in JAX without jit)
        num_segments = int(segment_ids.max().item()) + 1 if segment_ids.numel() else 0
    return int(num_segments)


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                *, deterministic=None):
    """jax.ops.segment_sum: ids outside [0, num_segments) are dropped."""
    require_torch()
    n = _segment_args("segment_sum", data, segment_ids, num_segments)
    det = _deterministic(deterministic)
    if _grad_mode(data):
        return _SegmentSumFunction.apply(data, segment_ids, n, det)
    return _segment("segment_sum", data, segment_ids, n, det)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                *, deterministic=None):
    """jax.ops.segment_max: empty segments are -inf (the dtype's lowest integer); NaN wins."""
    require_torch()
    n = _segment_args("segment_max", data, segment_ids, num_segments)
    det = _deterministic(deterministic)
    if _grad_mode(data):
        return _SegmentExtremumFunction.apply(data, segment_ids, n, det, "segment_max")
    return _segment("segment_max", data, segment_ids, n, det)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                *, deterministic=None):
    """jax.ops.segment_min: empty segments are +inf (the dtype's largest integer); NaN wins."""
    require_torch()
    n = _segment_args("segment_min", data, segment_ids, num_segments)
    det = _deterministic(deterministic)
    if _grad_mode(data):
        return _SegmentExtremumFunction.apply(data, segment_ids, n, det, "segment_min")
    return _segment("segment_min", data, segment_ids, n, det)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                 *, deterministic=None):
    """jax.ops.segment_prod: empty segments are 1; ids outside [0, num_segments) are dropped.
    Differentiable with torch's scatter_reduce prod rule (zeros handled exactly; JAX itself has no
    gradient here unless the ids are unique)."""
    require_torch()
    n = _segment_args("segment_prod", data, segment_ids, num_segments)
    det = _deterministic(deterministic)
    if _grad_mode(data):
        return _SegmentProdFunction.apply(data, segment_ids, n, det)
    return _segment("segment_prod", data, segment_ids, n, det)


def segment_mean(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                 *, deterministic=None):
    """The mean of each segment (segment_sum / max(count, 1): empty segments are 0, as the JAX
    idiom). Always the sorted path: the run of equal ids is the count; deterministic. Integer
    means round toward -inf (torch's scatter_reduce)."""
    require_torch()
    n = _segment_args("segment_mean", data, segment_ids, num_segments)
    if _grad_mode(data):
        return _SegmentMeanFunction.apply(data, segment_ids, n)
    return _segment("segment_mean", data, segment_ids, n, True)


# ---- scatter_reduce ---------------------------------------------------------------------------------
_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce(x, dim, index, src, reduce, include_self, deterministic):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("scatter_reduce", {"x": x, "index": index, "src": src, "out": out},
             {"dim": dim, "reduce": reduce, "include_self": bool(include_self)}, deterministic=deterministic)
    return out


def _zero_at(g, dim, index, deterministic):
    """g with every position the index names set to zero (a scatter of a broadcast zero)."""
    zero = torch.zeros((), dtype=g.dtype, device=g.device).expand(index.shape)
    return _assign("scatter", g, dim, index, zero, deterministic)


def _pad_to(part, shape):
    """A gradient of index's shape placed in a zero tensor of the source's (larger) shape."""
    if tuple(part.shape) == tuple(shape):
        return part
    full = torch.zeros(shape, dtype=part.dtype, device=part.device)
    full[tuple(slice(0, s) for s in part.shape)] = part
    return full


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True, deterministic=None):
    """torch.scatter_reduce (sum, prod, mean, amax, amin; include_self). Sums and products are
    atomic unless deterministic (then sorted, bit-stable); mean always takes the sorted path;
    amax / amin are atomic and order-independent (NaN wins). The backward follows torch's rules:
    amax / amin ties share the gradient evenly, prod handles zeros exactly."""
    require_torch()
    _check_cuda("scatter_reduce", input, index, src)
    _check_index("scatter_reduce", index)
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    dim = _wrap_dim(dim, input.dim())
    src = src.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, src):
        return _ScatterReduceFunction.apply(input, dim, index, src, reduce, bool(include_self), det)
    return _scatter_reduce(input.detach(), dim, index, src.detach(), reduce, include_self, det)


# ---- advanced indexing (index, index_put, take, put) ---------------------------------------------------
class _Adv:
    """torch's advanced indexing lowered to the plans' leading-dims form: x.permute(perm) puts
    the indexed dims first; `tensors` (one per indexed dim) are broadcast to one shape B; the
    result has `shape` (B in place of adjacent indexed dims, else in front), and
    result.permute(kperm) is its [*B, *other dims] view the kernels write."""

    def __init__(self, perm, tensors, shape, kperm):
        self.perm, self.tensors, self.shape, self.kperm = perm, tensors, shape, kperm


def _prepare_indices(name, x, indices):
    if indices is None or isinstance(indices, torch.Tensor):
        indices = (indices,)
    idx = []
    for i in indices:
        if i is None:
            idx.append(None)
            continue
        if not isinstance(i, torch.Tensor):
            i = torch.as_tensor(i, device=x.device)
        if i.dtype in (torch.bool, torch.uint8):
            if i.dim() == 0:
                raise NotImplementedError(f"{name}: a 0-d boolean index is not supported")
            at = len(idx)
            for d in range(i.dim()):
                if at + d >= x.dim() or i.shape[d] != x.shape[at + d]:
                    raise IndexError(f"The shape of the mask {list(i.shape)} at index {d} does not match the shape "
                                     f"of the indexed tensor {list(x.shape)} at index {at + d}")
            idx.extend(nonzero(i.to(torch.bool)).unbind(1))  # one synchronization, as torch
        elif i.dtype in (torch.int32, torch.int64):
            idx.append(i)
        else:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if len(idx) > x.dim():
        raise IndexError(f"too many indices for tensor of dimension {x.dim()} (got {len(idx)})")
    idx += [None] * (x.dim() - len(idx))
    dims = [d for d, i in enumerate(idx) if i is not None]
    if not dims:
        return None
    ts = [idx[d] for d in dims]
    _check_cuda(name, *ts)
    it = torch.int32 if all(t.dtype == torch.int32 for t in ts) else torch.int64
    ts = [t.to(it) for t in ts]
    b = tuple(torch.broadcast_shapes(*[t.shape for t in ts]))
    ts = [t.expand(b) for t in ts]
    rest = [d for d in range(x.dim()) if idx[d] is None]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    pre = dims[0] if adjacent else 0  # other dims before the index dims in the result
    shape = tuple(x.shape[d] for d in rest[:pre]) + b + tuple(x.shape[d] for d in rest[pre:])
    nb = len(b)
    kperm = list(range(pre, pre + nb)) + list(range(pre)) + list(range(pre + nb, len(shape)))
    return _Adv(dims + rest, ts, shape, kperm)


def _index_fw(x, adv):
    out = torch.empty(adv.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("index", {"x": x.permute(adv.perm), "indices": adv.tensors, "out": out.permute(adv.kperm)})
    return out


def _values_view(values, adv, dtype):
    """values broadcast to the indexed result's shape, in the kernels' [*B, *other] order."""
    v = values.to(dtype)
    while v.dim() > len(adv.shape) and v.shape[0] == 1:
        v = v.squeeze(0)
    try:
        v = v.expand(adv.shape)
    except RuntimeError:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(adv.shape)}") from None
    return v.permute(adv.kperm)


def _index_put_fw(x, adv, values, accumulate, deterministic):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("index_put", {"x": x.permute(adv.perm), "indices": adv.tensors, "src": _values_view(values, adv, x.dtype),
                           "out": out.permute(adv.perm)}, {"accumulate": bool(accumulate)},
             deterministic=deterministic)
    return out


def index(input, indices):
    """torch advanced indexing read, input[indices] (aten::index): a tuple of index tensors
    (int32 / int64; negative values count from the end), None for a full dim, bool masks (their
    nonzero(), one synchronization). Adjacent indexed dims keep their place in the result, others
    move to the front, as torch. Differentiable (the backward is an accumulating index_put)."""
    require_torch()
    _check_cuda("index", input)
    adv = _prepare_indices("index", input, indices)
    if adv is None:
        return contiguous(input)
    if _grad_mode(input):
        return _IndexFunction.apply(input, adv, _deterministic(None))
    return _index_fw(input.detach(), adv)


def index_put(input, indices, values, accumulate=False, *, deterministic=None):
    """torch.index_put (out of place): input[indices] = values (broadcast), or += with
    accumulate. Duplicates without accumulate: an unspecified one lands, or the last in index
    order when deterministic. Differentiable in input and values."""
    require_torch()
    _check_cuda("index_put", input, values)
    adv = _prepare_indices("index_put", input, indices)
    det = _deterministic(deterministic)
    if adv is None:
        return contiguous(input + values if accumulate else values.to(input.dtype).expand(input.shape))
    if _grad_mode(input, values):
        return _IndexPutFunction.apply(input, values, adv, bool(accumulate), det)
    return _index_put_fw(input.detach(), adv, values.detach(), accumulate, det)


def take(input, index):
    """torch.take: input viewed as 1-D, negative indices wrap (in the kernel); differentiable."""
    require_torch()
    _check_cuda("take", input, index)
    _check_index("take", index)
    return globals()["index"](input.reshape(-1), (index.reshape(-1),)).view(index.shape)


def put(input, index, source, accumulate=False, *, deterministic=None):
    """torch.put (out of place): input viewed as 1-D, negative indices wrap; accumulate sums
    duplicates. Differentiable through index_put."""
    require_torch()
    _check_cuda("put", input, index, source)
    _check_index("put", index)
    if source.numel() != index.numel():
        raise RuntimeError(f"put_(): Expected source and index to have the same number of elements, but got "
                           f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    r = index_put(input.reshape(-1), (index.reshape(-1),), source.reshape(-1), accumulate,
                  deterministic=deterministic)
    return r.view(input.shape)


def one_hot(tensor, num_classes=-1):
    """torch.nn.functional.one_hot: int64 [*, num_classes], one kernel writing every element once;
    classes outside [0, num_classes) raise IndexError (device flag). num_classes=-1 reads
    max + 1 on the host first (a synchronization, as torch)."""
    require_torch()
    _check_cuda("one_hot", tensor)
    if tensor.dtype != torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    out = torch.empty(tuple(tensor.shape) + (int(num_classes),), dtype=torch.int64, device=tensor.device)
    if out.numel():
        _run("one_hot", {"index": tensor, "out": out})
    return out


# ---- nonzero / masked_select / masked_scatter -----------------------------------------------------------
def _select_exact(op, tensors, out_shape, out_dtype):
    """The count-then-write protocol: the plan's count phase writes the count on the device, one
    host read sizes the output exactly (torch.nonzero synchronizes the same way), and the write
    phase reuses the tile counts left in the same workspace."""
    device = tensors["x"].device
    count = torch.empty(1, dtype=torch.int64, device=device)
    counting = dict(tensors, count=count)
    params = {"phase": "count", "max_count": 0}
    ws = _workspace(op, counting, params, False, False, device)
    stream = current_stream(device)
    wsd = dl(ws) if ws is not None else None
    _C.index(op, False, _export(counting), params, stream, wsd, False)
    k = int(count.item())
    out = torch.empty(out_shape(k), dtype=out_dtype, device=device)
    if k:
        _C.index(op, False, _export(dict(tensors, out=out)), {"phase": "write"}, stream,
                 dl(ws) if ws is not None else None, False)
    return out


def nonzero(input, *, as_tuple=False):
    """torch.nonzero: int64 [count, input.dim()] coordinates in row-major order (floats: -0 is
    zero, NaN is not). One host synchronization for the count, as torch."""
    require_torch()
    _check_cuda("nonzero", input)
    x = input.detach()
    out = _select_exact("nonzero", {"x": x}, lambda k: (k, x.dim()), torch.int64)
    return tuple(out.unbind(1)) if as_tuple else out


def argwhere(input):
    """torch.argwhere / jnp.argwhere: nonzero's coordinates."""
    return nonzero(input)


def nonzero_static(input, *, size, fill_value=-1):
    """torch.nonzero_static: [size, input.dim()], rows past the count filled with fill_value;
    no host synchronization (jnp.nonzero(size=...) likewise)."""
    require_torch()
    _check_cuda("nonzero_static", input)
    out = torch.empty((int(size), input.dim()), dtype=torch.int64, device=input.device)
    if out.numel() or input.numel():
        _run("nonzero", {"x": input.detach(), "out": out}, {"fill_index": int(fill_value)})
    return out


def _masked_select(x, m):
    return _select_exact("masked_select", {"x": x, "mask": m}, lambda k: (k,), x.dtype)


def _masked_scatter(x, m, source):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        try:
            _run("masked_scatter", {"x": x, "mask": m, "src": source, "out": out})
        except IndexError:
            raise IndexError("masked_scatter: Number of elements of source < number of ones in mask") from None
    return out


def masked_select(input, mask):
    """torch.masked_select (input and mask broadcast): the selected elements, row-major, 1-D.
    One host synchronization for the count, as torch. Differentiable."""
    require_torch()
    _check_cuda("masked_select", input, mask)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    x, m = torch.broadcast_tensors(input, mask)
    if _grad_mode(input):
        return _MaskedSelectFunction.apply(input, m, tuple(x.shape))
    return _masked_select(x.detach(), m)


def masked_scatter(input, mask, source):
    """torch.masked_scatter (out of place): input's masked elements, in row-major order, take
    source's first elements (any shape, read row-major; too few raise IndexError).
    Differentiable in input and source."""
    require_torch()
    _check_cuda("masked_scatter", input, mask, source)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_: expected BoolTensor for mask, got {mask.dtype}")
    if source.dtype != input.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got {input.dtype} "
                           f"and {source.dtype}")
    x, m = torch.broadcast_tensors(input, mask)
    if _grad_mode(input, source):
        return _MaskedScatterFunction.apply(x, m, source)
    return _masked_scatter(x.detach(), m, source.detach())


# ---- jax.lax gather / scatter, dynamic_slice ----------------------------------------------------------------
def _dn(dimension_numbers, names):
    """Dimension-number fields from a jax namedtuple (or anything with those attributes) or a dict."""
    if isinstance(dimension_numbers, dict):
        return [tuple(int(v) for v in dimension_numbers.get(n, ())) for n in names]
    return [tuple(int(v) for v in getattr(dimension_numbers, n, ())) for n in names]


def _lax_mode(mode):
    name = getattr(mode, "name", mode)  # a jax.lax.GatherScatterMode or a string
    name = None if name is None else str(name).lower()
    if name in (None, "fill", "drop", "fill_or_drop"):
        return "fill"
    if name in ("clip", "promise_in_bounds"):  # promise_in_bounds: any in-bounds behaviour is right
        return "clip"
    raise ValueError(f"lax: mode expected 'clip', 'fill' / 'drop' or 'promise_in_bounds', got {mode!r}")


def _lax_fill(dtype, fill_value):
    """JAX's default gather fill: NaN for inexact types, the lowest signed / highest unsigned
    integer, True for booleans."""
    if fill_value is not None:
        return float(fill_value)
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return 1.0
    info = torch.iinfo(dtype)
    return float(info.max if info.min == 0 else info.min)


def _gather_shape(operand, indices, offset_dims, collapsed, slice_sizes):
    batch = list(indices.shape[:-1]) if indices.dim() else []
    rank = len(batch) + len(offset_dims)
    sizes = [slice_sizes[d] for d in range(operand.dim()) if d not in collapsed]
    shape, b, s = [], 0, 0
    for i in range(rank):
        if i in offset_dims and s < len(sizes):
            shape.append(sizes[s])
            s += 1
        elif b < len(batch):
            shape.append(batch[b])
            b += 1
        else:
            raise TypeError(f"lax_gather: offset_dims {list(offset_dims)} do not fit operand {list(operand.shape)} "
                            f"and indices {list(indices.shape)}")
    return shape


def _lax_gather(operand, indices, gdims, slice_sizes, mode, fill):
    offset_dims, collapsed, start_index_map = gdims
    out = torch.empty(_gather_shape(operand, indices, offset_dims, collapsed, slice_sizes), dtype=operand.dtype,
                      device=operand.device)
    if out.numel():
        _run("lax_gather", {"x": operand, "index": indices, "out": out},
             {"offset_dims": list(offset_dims), "collapsed_slice_dims": list(collapsed),
              "start_index_map": list(start_index_map), "slice_sizes": [int(v) for v in slice_sizes],
              "mode": mode, "value": fill}, check=False)
    return out


def _lax_scatter(operand, indices, updates, sdims, reduce, mode, deterministic):
    window, inserted, s2o = sdims
    out = torch.empty(operand.shape, dtype=operand.dtype, device=operand.device)
    if out.numel():
        _run("lax_scatter", {"x": operand, "index": indices, "src": updates.to(operand.dtype), "out": out},
             {"update_window_dims": list(window), "inserted_window_dims": list(inserted),
              "scatter_dims_to_operand_dims": list(s2o), "reduce": reduce, "mode": mode},
             deterministic=deterministic, check=False)
    return out


def _lax_index(name, t):
    _check_cuda(name, t)
    if t.dtype not in (torch.int32, torch.int64):
        t = t.to(torch.int64 if t.element_size() > 4 or t.dtype == torch.uint32 else torch.int32)
    return t


def _lax_batching(name, operand, idx, ob, ib, sizes=None):
    """Operand batching dims (JAX's operand_batching_dims / *_indices_batching_dims) lowered as
    StableHLO defines them: operand dim ob[k] takes the coordinate of index batch dim ib[k], i.e.
    an iota over that dim appended to every index vector, with ob[k] added to the index map and to
    the collapsed (inserted) dims. One extra small index tensor; the kernels stay unchanged.
    Returns (the extended indices, the operand dims the iotas map to)."""
    if len(ob) != len(ib):
        raise ValueError(f"{name}: operand_batching_dims {list(ob)} and the indices batching dims {list(ib)} "
                         f"expected of equal length")
    batch_shape = idx.shape[:-1]
    cols = []
    for o, i in zip(ob, ib):
        if not 0 <= o < operand.dim() or not 0 <= i < len(batch_shape):
            raise ValueError(f"{name}: batching dims pair ({o}, {i}) expected an operand dim in [0, {operand.dim()}) "
                             f"and an indices batch dim in [0, {len(batch_shape)})")
        if operand.shape[o] != batch_shape[i]:
            raise ValueError(f"{name}: operand batching dim {o} of size {operand.shape[o]} expected the size of "
                             f"indices batch dim {i}, {batch_shape[i]}")
        if sizes is not None and sizes[o] != 1:
            raise ValueError(f"{name}: slice_sizes[{o}] expected 1 for an operand batching dim, got {sizes[o]}")
        view = [1] * len(batch_shape)
        view[i] = batch_shape[i]
        cols.append(torch.arange(batch_shape[i], device=idx.device, dtype=idx.dtype).view(view).expand(batch_shape))
    return torch.cat([idx] + [c.unsqueeze(-1) for c in cols], -1), tuple(ob)


def lax_gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
               indices_are_sorted=False, mode=None, fill_value=None):
    """jax.lax.gather on torch tensors: dimension_numbers a jax.lax.GatherDimensionNumbers (or a
    dict of offset_dims, collapsed_slice_dims, start_index_map, and optionally operand_batching_dims /
    start_indices_batching_dims), index vectors along the last dim of start_indices, mode clip or
    fill (JAX's default; fill_value defaults as JAX's).
    Differentiable in the operand (the transpose is lax_scatter_add, as JAX's)."""
    require_torch()
    _check_cuda("lax_gather", operand)
    offs, coll, sim, ob, ib = _dn(dimension_numbers, ("offset_dims", "collapsed_slice_dims", "start_index_map",
                                                      "operand_batching_dims", "start_indices_batching_dims"))
    idx = _lax_index("lax_gather", start_indices)
    m = _lax_mode(mode)
    fill = _lax_fill(operand.dtype, fill_value)
    sizes = [int(v) for v in slice_sizes]
    if ob or ib:
        idx, extra = _lax_batching("lax_gather", operand, idx, ob, ib, sizes)
        sim, coll = sim + extra, tuple(sorted(coll + extra))
    if _grad_mode(operand):
        return _LaxGatherFunction.apply(operand, idx, (offs, coll, sim), sizes, m, fill)
    return _lax_gather(operand.detach(), idx, (offs, coll, sim), sizes, m, fill)


def _lax_scatter_public(name, reduce, operand, scatter_indices, updates, dimension_numbers, mode, deterministic):
    require_torch()
    _check_cuda(name, operand, updates)
    win, ins, s2o, ob, ib = _dn(dimension_numbers, ("update_window_dims", "inserted_window_dims",
                                                    "scatter_dims_to_operand_dims", "operand_batching_dims",
                                                    "scatter_indices_batching_dims"))
    idx = _lax_index(name, scatter_indices)
    if ob or ib:
        idx, extra = _lax_batching(name, operand, idx, ob, ib)
        s2o, ins = s2o + extra, tuple(sorted(ins + extra))
    m = _lax_mode(mode)
    det = _deterministic(deterministic)
    if _grad_mode(operand, updates):
        if reduce not in ("none", "sum"):
            raise NotImplementedError(f"{name}: no gradient (JAX's needs unique indices); detach the inputs")
        return _LaxScatterFunction.apply(operand, idx, updates, (win, ins, s2o), reduce, m, det)
    return _lax_scatter(operand.detach(), idx, updates.detach(), (win, ins, s2o), reduce, m, det)


def lax_scatter(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
                unique_indices=False, mode=None, deterministic=None):
    """jax.lax.scatter (replacement) on torch tensors; dimension_numbers a
    jax.lax.ScatterDimensionNumbers or a dict (update_window_dims, inserted_window_dims,
    scatter_dims_to_operand_dims). Duplicates: an unspecified update lands, or the last one in
    index order when deterministic. mode fill drops windows not wholly inside; clip clamps."""
    return _lax_scatter_public("lax_scatter", "none", operand, scatter_indices, updates, dimension_numbers, mode,
                               deterministic)


def lax_scatter_add(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
                    unique_indices=False, mode=None, deterministic=None):
    """jax.lax.scatter_add (atomic, or sorted and bit-stable when deterministic)."""
    return _lax_scatter_public("lax_scatter_add", "sum", operand, scatter_indices, updates, dimension_numbers, mode,
                               deterministic)


def lax_scatter_mul(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
                    unique_indices=False, mode=None, deterministic=None):
    """jax.lax.scatter_mul (no autograd)."""
    return _lax_scatter_public("lax_scatter_mul", "prod", operand, scatter_indices, updates, dimension_numbers, mode,
                               deterministic)


def lax_scatter_min(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
                    unique_indices=False, mode=None, deterministic=None):
    """jax.lax.scatter_min (order-independent; NaN wins; no autograd)."""
    return _lax_scatter_public("lax_scatter_min", "amin", operand, scatter_indices, updates, dimension_numbers, mode,
                               deterministic)


def lax_scatter_max(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
                    unique_indices=False, mode=None, deterministic=None):
    """jax.lax.scatter_max (order-independent; NaN wins; no autograd)."""
    return _lax_scatter_public("lax_scatter_max", "amax", operand, scatter_indices, updates, dimension_numbers, mode,
                               deterministic)


def _device_starts(operand, start_indices):
    """start_indices as one int tensor on the operand's device when any of them lives on a
    device (jax.lax's traced starts), else None (plain integers: the host path)."""
    if isinstance(start_indices, torch.Tensor):
        t = start_indices
    elif any(isinstance(s, torch.Tensor) for s in start_indices):
        t = torch.stack([torch.as_tensor(s, device=operand.device).reshape(()) for s in start_indices])
    else:
        return None
    if t.dim() != 1 or t.shape[0] != operand.dim():
        raise TypeError(f"dynamic slice: start_indices expected {operand.dim()} values, got shape {list(t.shape)}")
    t = _lax_index("dynamic_slice", t.to(operand.device))
    # JAX adds the dim size to a negative start once (lax._dynamic_slice_indices); the kernel clamps.
    dims = torch.tensor(list(operand.shape), dtype=t.dtype).to(operand.device)
    return torch.where(t < 0, t + dims, t)


def _starts(operand, start_indices, sizes):
    """JAX's handling of host starts: a negative one counts from the end once, then each is
    clamped to [0, dim - size]."""
    starts = [int(s) for s in start_indices]
    if len(starts) != operand.dim():
        raise TypeError(f"dynamic slice: start_indices expected {operand.dim()} values, got {len(starts)}")
    starts = [s + operand.shape[d] if s < 0 else s for d, s in enumerate(starts)]
    return [min(max(s, 0), operand.shape[d] - sizes[d]) for d, s in enumerate(starts)]


def dynamic_slice(operand, start_indices, slice_sizes):
    """jax.lax.dynamic_slice. Starts on the device (a tensor, or a list holding tensors) are read
    by the kernel and clamped there (a lax_gather in clip mode: no host synchronization); host
    integers make one strided copy of the clamped window."""
    require_torch()
    _check_cuda("dynamic_slice", operand)
    sizes = [int(n) for n in slice_sizes]
    if len(sizes) != operand.dim() or any(n < 0 or n > operand.shape[d] for d, n in enumerate(sizes)):
        raise TypeError(f"dynamic_slice: slice_sizes {sizes} must fit operand shape {list(operand.shape)}")
    starts = _device_starts(operand, start_indices)
    if starts is not None:
        r = tuple(range(operand.dim()))
        return lax_gather(operand, starts, {"offset_dims": r, "collapsed_slice_dims": (), "start_index_map": r},
                          sizes, mode="clip")
    view = operand
    for d, s in enumerate(_starts(operand, start_indices, sizes)):
        view = view.narrow(d, s, sizes[d])
    return contiguous(view)


def dynamic_update_slice(operand, update, start_indices):
    """jax.lax.dynamic_update_slice: a copy of operand with the clamped window replaced. Device
    starts: a lax_scatter in clip mode (differentiable, no synchronization); host integers: two
    copies (no autograd)."""
    require_torch()
    _check_cuda("dynamic_update_slice", operand, update)
    if update.dim() != operand.dim() or any(update.shape[d] > operand.shape[d] for d in range(operand.dim())):
        raise TypeError(f"dynamic_update_slice: update shape {list(update.shape)} must fit operand shape "
                        f"{list(operand.shape)}")
    starts = _device_starts(operand, start_indices)
    if starts is not None:
        r = tuple(range(operand.dim()))
        return lax_scatter(operand, starts, update.to(operand.dtype),
                           {"update_window_dims": r, "inserted_window_dims": (), "scatter_dims_to_operand_dims": r},
                           mode="clip")
    out = _contiguous(operand.detach())
    view = out
    for d, s in enumerate(_starts(operand, start_indices, list(update.shape))):
        view = view.narrow(d, s, update.shape[d])
    if view.numel():
        _copy_into(view, update.detach().to(out.dtype))
    return out


# ---- autograd of the ops above ---------------------------------------------------------------------------------
if torch is not None:

    class _ScatterReduceFunction(torch.autograd.Function):
        """torch's scatter_reduce_backward, composed from this family's gather / scatter_add /
        scatter / scatter_reduce and torch's elementwise ops."""

        @staticmethod
        def forward(ctx, x, dim, index, src, reduce, include_self, det):
            y = _scatter_reduce(x, dim, index, src, reduce, include_self, det)
            ctx.save_for_backward(x, index, src, y)
            ctx.dim, ctx.reduce, ctx.include_self, ctx.det = dim, reduce, include_self, det
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            x, index, src, y = ctx.saved_tensors
            dim, red, inc, det = ctx.dim, ctx.reduce, ctx.include_self, ctx.det
            s = src[tuple(slice(0, n) for n in index.shape)]  # the part of src the index reaches
            gather_ = lambda t: _gather(t, dim, index)  # noqa: E731
            add_ = lambda base, part: _scatter_add(base, dim, index, part, det)  # noqa: E731
            if red == "sum":
                gx, gs = g, gather_(g)
            elif red == "mean":
                base = torch.ones_like(g) if inc else torch.zeros_like(g)
                n = add_(base, torch.ones((), dtype=g.dtype, device=g.device).expand(index.shape)).clamp_min(1)
                gx, gs = g / n, gather_(g) / gather_(n)
            elif red == "prod":
                one = torch.ones((), dtype=x.dtype, device=x.device)
                masked_x = torch.where(x == 0, one, x)
                gx = g * _scatter_reduce(masked_x, dim, index, s, "prod", inc, det) / masked_x
                s_zero = s == 0
                zeros_hit = gather_(add_(torch.zeros_like(x), s_zero.to(x.dtype)))
                single = s_zero & (zeros_hit == 1)  # the only zero of its destination
                masked_s_result = _scatter_reduce(x, dim, index, torch.where(single, one, s), "prod", inc, det)
                gs = torch.where(single, gather_(g * masked_s_result), gather_(g * y) / torch.where(s_zero, one, s))
            else:  # amax / amin: the gradient is shared evenly among every element equal to the result
                value = gather_(y)
                x_is = (x == y).to(g.dtype)
                s_is = (s == value).to(g.dtype)
                gd = g / add_(x_is, s_is)
                gx, gs = x_is * gd, s_is * gather_(gd)
            if not inc:
                gx = _zero_at(gx, dim, index, det)
            return gx, None, None, _pad_to(gs, src.shape), None, None, None

    class _SegmentProdFunction(torch.autograd.Function):
        """segment_prod: torch's scatter_reduce prod rule over rows (exact with zeros)."""

        @staticmethod
        def forward(ctx, data, ids, num_segments, det):
            y = _segment("segment_prod", data, ids, num_segments, det)
            ctx.save_for_backward(data, ids, y)
            ctx.n, ctx.det = num_segments, det
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            data, ids, y = ctx.saved_tensors
            one = torch.ones((), dtype=data.dtype, device=data.device)
            zero = data == 0
            zeros_hit = _rows_of(_segment("segment_sum", zero.to(data.dtype), ids, ctx.n, True), ids)
            single = zero & (zeros_hit == 1)
            masked_result = _segment("segment_prod", torch.where(single, one, data), ids, ctx.n, ctx.det)
            gd = torch.where(single, _rows_of(g * masked_result, ids),
                             _rows_of(g * y, ids) / torch.where(zero, one, data))
            return gd, None, None, None

    class _SegmentMeanFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, data, ids, num_segments):
            ctx.save_for_backward(ids)
            ctx.n, ctx.dtype = num_segments, data.dtype
            return _segment("segment_mean", data, ids, num_segments, True)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (ids,) = ctx.saved_tensors
            ones = torch.ones((), dtype=g.dtype, device=g.device).expand(ids.shape[0])
            count = _segment("segment_sum", ones, ids, ctx.n, True).clamp_min(1)
            return _rows_of(g / count.view((-1,) + (1,) * (g.dim() - 1)), ids), None, None

    class _IndexFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, adv, det):
            ctx.adv, ctx.shape, ctx.dtype, ctx.det = adv, tuple(x.shape), x.dtype, det
            return _index_fw(x, adv)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            zeros = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return _index_put_fw(zeros, ctx.adv, g, True, ctx.det), None, None

    class _IndexPutFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, values, adv, accumulate, det):
            ctx.adv, ctx.accumulate, ctx.det, ctx.vshape = adv, accumulate, det, tuple(values.shape)
            return _index_put_fw(x, adv, values, accumulate, det)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            adv = ctx.adv
            gx = gv = None
            if ctx.needs_input_grad[0]:
                gx = g if ctx.accumulate else _index_put_fw(g, adv, torch.zeros((), dtype=g.dtype, device=g.device),
                                                            False, ctx.det)
            if ctx.needs_input_grad[1]:
                part = _index_fw(g, adv)
                vs = list(ctx.vshape)
                while len(vs) > part.dim() and vs[0] == 1:
                    vs = vs[1:]
                gv = part.sum_to_size(vs).reshape(ctx.vshape)
            return gx, gv, None, None, None

    class _MaskedSelectFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, m, shape):
            ctx.save_for_backward(m)
            ctx.in_shape = tuple(x.shape)
            return _masked_select(x.expand(shape), m)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (m,) = ctx.saved_tensors
            gx = _masked_scatter(torch.zeros(m.shape, dtype=g.dtype, device=g.device), m, g)
            return gx.sum_to_size(ctx.in_shape), None, None

    class _MaskedScatterFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, m, source):
            ctx.save_for_backward(m)
            ctx.src_shape = tuple(source.shape)
            return _masked_scatter(x, m, source)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (m,) = ctx.saved_tensors
            zero = torch.zeros((), dtype=g.dtype, device=g.device).expand(max(g.numel(), 1))
            gx = _masked_scatter(g, m, zero) if ctx.needs_input_grad[0] else None
            gs = None
            if ctx.needs_input_grad[2]:
                part = _masked_select(g, m)
                n = 1
                for v in ctx.src_shape:
                    n *= v
                flat = torch.zeros(n, dtype=g.dtype, device=g.device)
                flat[:part.numel()] = part
                gs = flat.view(ctx.src_shape)
            return gx, None, gs

    class _LaxGatherFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, operand, idx, gdims, sizes, mode, fill):
            ctx.save_for_backward(idx)
            ctx.gdims, ctx.mode, ctx.shape = gdims, mode, tuple(operand.shape)
            return _lax_gather(operand, idx, gdims, sizes, mode, fill)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (idx,) = ctx.saved_tensors
            zeros = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return _lax_scatter(zeros, idx, g, ctx.gdims, "sum", ctx.mode, _deterministic(None)), None, None, None, \
                None, None

    class _LaxScatterFunction(torch.autograd.Function):
        """lax.scatter (none) and scatter_add: JAX's transpose rules."""

        @staticmethod
        def forward(ctx, operand, idx, updates, sdims, reduce, mode, det):
            ctx.save_for_backward(idx)
            ctx.sdims, ctx.reduce, ctx.mode, ctx.det, ctx.ushape = sdims, reduce, mode, det, tuple(updates.shape)
            return _lax_scatter(operand, idx, updates, sdims, reduce, mode, det)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (idx,) = ctx.saved_tensors
            win, ins, s2o = ctx.sdims
            go = gu = None
            if ctx.needs_input_grad[0]:
                if ctx.reduce == "sum":
                    go = g
                else:  # the replaced windows receive nothing
                    zero = torch.zeros((), dtype=g.dtype, device=g.device).expand(ctx.ushape)
                    go = _lax_scatter(g, idx, zero, ctx.sdims, "none", ctx.mode, ctx.det)
            if ctx.needs_input_grad[2]:
                sizes, w = [], 0
                for d in range(g.dim()):
                    if d in ins:
                        sizes.append(1)
                    else:
                        sizes.append(ctx.ushape[win[w]])
                        w += 1
                gu = _lax_gather(g, idx, (win, ins, s2o), sizes, ctx.mode, 0.0)
            return go, None, gu, None, None, None, None
