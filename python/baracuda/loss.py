"""Losses under their torch.nn.functional names and signatures, with autograd.

Rows of ``_C.loss_ops()`` (include/baracuda/ops/loss_ops.def): ``cross_entropy`` (class indices or
class probabilities; weight, ignore_index, label_smoothing) and ``nll_loss`` over a class axis
(dim 1, or 0 for an unbatched [C] input), and the pointwise losses ``mse_loss``, ``l1_loss``,
``smooth_l1_loss``, ``huber_loss``, ``binary_cross_entropy``, ``binary_cross_entropy_with_logits``,
``kl_div``, ``poisson_nll_loss``, ``gaussian_nll_loss``, ``soft_margin_loss``,
``hinge_embedding_loss``, ``margin_ranking_loss``, the losses over the last dim
``cosine_embedding_loss``, ``triplet_margin_loss``, ``multi_margin_loss``, ``multilabel_margin_loss``,
``multilabel_soft_margin_loss``, and the fused ``linear_cross_entropy``. Reductions none / mean / sum
(and kl_div's batchmean) are deterministic: per-row (or per-element) losses summed in a fixed order.

``linear_cross_entropy(input, weight, target)`` is ``cross_entropy(F.linear(input, weight), target)``
without the [N, V] logits: the tokens go in chunks whose logits live in a workspace slice (512 MiB by
default, ``chunk_tokens=`` overrides), and under autograd the same pass writes the gradients of
input and weight (mean/sum; the backward scales them by grad_output on the device). Memory is the
point: an LLM head's [8192, 128256] bf16 logits, their softmax and their gradient (several GiB in
torch eager) become one chunk.

cross_entropy reads each row of logits once (online max / sum of exp, 16-byte loads, a CTA per row
for LLM vocabularies). With autograd and a reduced loss (mean/sum) the forward is the fused kernel:
it writes the loss and the logits' gradient (for dy = 1) from one read of the logits. On Hopper a
row longer than one CTA holds (16384 16-bit classes) is spread over a thread-block cluster of up to
16 CTAs that keeps it in shared memory while the row's log-sum-exp is exchanged (so a 128k
vocabulary is read once from DRAM); shorter rows, and GPUs before sm_90, read the row a second time
while it is still in L2. The backward then scales that gradient in place by dy on the device, and
moves no bytes when dy is 1 (``loss.backward()``). Forward + backward thus cost one read and one
write of the logits, where torch materialises log_softmax and a dense one-hot gradient. The fused
backward consumes the saved gradient: a second backward through the
same graph (retain_graph) raises; set ``baracuda.loss.fused_autograd = False`` for that (or for
reduction='none', always): the forward then saves the log-sum-exp and the backward recomputes the
softmax from the logits (one more read). The same kernels serve [N, C], [N, C, d1, ...] (strided
class axis) and [C] inputs. ``cross_entropy_with_grad`` exposes the fused forward directly.

Out-of-range class targets (not ignore_index) are never read: their row's loss and gradient are
NaN, and this module checks the kernels' flag after the forward and raises ``IndexError`` (one
host synchronization per call, like the index family). ``baracuda.loss.check_targets =
"deferred"`` reports them as torch's device-side assert does, at a later checked call or at
``baracuda.functional.sync_errors()``, without synchronizing; ``False`` skips the check.

Outputs are torch tensors on the input's device; kernels run on ``torch.cuda.current_stream()``.
"""
import warnings

from . import _C
from ._autograd import check_flag, current_stream, dl, error_flag, require_torch, torch

__all__ = ["cross_entropy", "nll_loss", "cross_entropy_with_grad", "linear_cross_entropy", "mse_loss", "l1_loss",
           "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
           "poisson_nll_loss", "gaussian_nll_loss", "soft_margin_loss", "hinge_embedding_loss", "margin_ranking_loss",
           "cosine_embedding_loss", "triplet_margin_loss", "multi_margin_loss", "multilabel_margin_loss",
           "multilabel_soft_margin_loss"]

# An extension built before this family existed has no loss bindings: the other families must
# still import (functional.py imports every family), and the calls here then fail clearly.
LOSS_OPS = {row["name"]: row for row in _C.loss_ops()} if hasattr(_C, "loss_ops") else {}

check_targets = True  # True, "deferred" or False (see the module docstring)
fused_autograd = True


# ---- launch helpers ----------------------------------------------------------------------------
def _export(tensors):
    """DLPack capsules are single-use: export afresh for every _C call."""
    return {k: dl(v) for k, v in tensors.items() if v is not None}


def _run(op, backward, tensors, params, reduction, device, fused_grad=False, tf32=False):
    """Runs one plan on torch's current stream of `device` (workspace allocated when needed)."""
    if not LOSS_OPS:
        raise RuntimeError("baracuda._C has no loss bindings: rebuild the extension (python/src/loss_bindings.cpp)")
    tensors = {k: v for k, v in tensors.items() if v is not None}
    ws = None
    n = _C.loss_workspace_size(op, backward, _export(tensors), params, reduction, fused_grad, tf32)
    if n:
        ws = dl(torch.empty(n, dtype=torch.uint8, device=device))
    _C.loss(op, backward, _export(tensors), params, reduction, current_stream(device), ws, True, fused_grad, tf32)


def _check_cuda(name, *ts):
    for x in ts:
        if x is None:
            continue
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"baracuda.functional.{name}: expected a tensor, got {type(x).__name__}")
        if x.device.type != "cuda":
            raise RuntimeError(f"baracuda.functional.{name}: tensors must be on a CUDA device, got {x.device}")


def _reduction(size_average, reduce, reduction):
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction as _R
        return _R.legacy_get_string(size_average, reduce)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _loss_out(x, reduction, shape):
    return torch.empty(() if reduction != "none" else shape, dtype=x.dtype, device=x.device)


def _grad_mode(*ts):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


# ---- class losses (cross_entropy, nll_loss) ---------------------------------------------------------
def _row_shape(x):
    """The input's shape without the class dim (1, or 0 for an unbatched [C] input)."""
    s = list(x.shape)
    del s[1 if x.dim() >= 2 else 0]
    return s


def _class_inputs(op, input, target, weight):
    _check_cuda(op, input, target, weight)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating point input, got {input.dtype}")
    if input.dim() < 1:
        raise ValueError(f"{op}: expected an input of 1 or more dimensions, got a 0-dim tensor")
    probs = target.dtype.is_floating_point
    if probs:
        if op != "cross_entropy":
            raise RuntimeError(f"{op}: expected target of an integer dtype (class indices), got {target.dtype}")
        if target.shape != input.shape:
            raise RuntimeError(f"{op}: probability targets must have the input's shape {list(input.shape)}, got "
                               f"{list(target.shape)}")
        target = target.to(input.dtype)
    else:
        if target.dtype not in (torch.int32, torch.int64):
            target = target.to(torch.int64)
        if list(target.shape) != _row_shape(input):
            raise ValueError(f"{op}: Expected target size {tuple(_row_shape(input))}, got {tuple(target.shape)}")
    if weight is not None:
        c = input.shape[1 if input.dim() >= 2 else 0]
        if weight.dim() != 1 or weight.shape[0] != c:
            raise RuntimeError(f"{op}: weight tensor should be defined either for all {c} classes or no classes but "
                               f"got weight tensor of shape: {list(weight.shape)}")
        weight = weight.detach().to(input.dtype).contiguous()
    return target, weight, probs


def _class_fw(op, input, target, weight, reduction, ignore_index, smoothing, probs):
    """(loss, lse or None, total_weight or None)."""
    rows = _row_shape(input)
    out = _loss_out(input, reduction, rows)
    st = _stats_dtype(input)
    n_rows = 1
    for s in rows:
        n_rows *= s
    lse = torch.empty(n_rows, dtype=st, device=input.device) if op == "cross_entropy" else None
    tw = torch.empty((), dtype=st, device=input.device) if reduction != "none" and not probs else None
    mode = check_targets if not probs else False
    flag = error_flag(mode, input.device)
    params = {"ignore_index": float(ignore_index)}
    if op == "cross_entropy":
        params["label_smoothing"] = float(smoothing)
    _run(op, False, {"input": input, "target": target, "weight": weight, "out": out, "save_lse": lse,
                     "save_total_weight": tw, "error": flag}, params, reduction, input.device)
    check_flag(mode, flag, op, lambda: f"baracuda.functional.{op}: Target is out of bounds (a class index outside "
                                       f"[0, {input.shape[1 if input.dim() >= 2 else 0]}) that is not "
                                       f"ignore_index={ignore_index})")
    return out, lse, tw


def _class_bw(op, grad, input, target, weight, lse, tw, reduction, ignore_index, smoothing, probs, need_dtarget):
    dx = torch.empty_like(input)
    dt = torch.empty_like(input) if need_dtarget else None
    if input.numel():
        params = {"ignore_index": float(ignore_index)}
        if op == "cross_entropy":
            params["label_smoothing"] = float(smoothing)
        _run(op, True, {"dy": grad, "input": input, "target": target, "weight": weight, "lse": lse,
                        "total_weight": tw if reduction == "mean" and not probs else None, "grad_input": dx,
                        "grad_target": dt}, params, reduction, input.device)
    return dx, dt


if torch is not None:
    from torch.autograd.function import once_differentiable

    class ClassLossFunction(torch.autograd.Function):
        """cross_entropy / nll_loss. The backward recomputes softmax from the logits and the saved
        log-sum-exp (one read of the logits, one write of the gradient)."""

        @staticmethod
        def forward(ctx, op, reduction, ignore_index, smoothing, probs, input, target, weight):
            out, lse, tw = _class_fw(op, input, target, weight, reduction, ignore_index, smoothing, probs)
            ctx.save_for_backward(input, target, weight, lse, tw)
            ctx.op, ctx.reduction, ctx.ignore_index, ctx.smoothing, ctx.probs = (op, reduction, ignore_index,
                                                                                 smoothing, probs)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            input, target, weight, lse, tw = ctx.saved_tensors
            need_dt = ctx.probs and ctx.needs_input_grad[6]
            dx, dt = _class_bw(ctx.op, grad, input, target, weight, lse, tw, ctx.reduction, ctx.ignore_index,
                               ctx.smoothing, ctx.probs, need_dt)
            return (None, None, None, None, None, dx if ctx.needs_input_grad[5] else None, dt, None)
    class FusedCrossEntropyFunction(torch.autograd.Function):
        """cross_entropy with a reduced loss: the forward's fused kernel (the cluster kernel for long
        rows on sm_90) also writes the gradient for dy = 1; the backward scales it in place by dy
        (nothing moves when dy is 1)."""

        @staticmethod
        def forward(ctx, reduction, ignore_index, smoothing, input, target, weight):
            out, dx = _ce_fused(input, target, weight, ignore_index, reduction, smoothing, None, False)
            ctx.save_for_backward(dx)
            ctx.reduction, ctx.ignore_index, ctx.smoothing, ctx.consumed = reduction, ignore_index, smoothing, False
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            if ctx.consumed:
                raise RuntimeError("baracuda cross_entropy: the fused gradient was consumed by an earlier backward "
                                   "through this graph; set baracuda.loss.fused_autograd = False to backward twice")
            ctx.consumed = True
            (dx,) = ctx.saved_tensors
            if dx.numel():
                _run("cross_entropy", True, {"dy": grad, "grad_input": dx},
                     {"ignore_index": float(ctx.ignore_index), "label_smoothing": float(ctx.smoothing)},
                     ctx.reduction, dx.device, fused_grad=True)
            return None, None, None, dx if ctx.needs_input_grad[3] else None, None, None
else:  # pragma: no cover
    ClassLossFunction = FusedCrossEntropyFunction = None


def _class_loss(op, input, target, weight, reduction, ignore_index, smoothing):
    require_torch()
    target, weight, probs = _class_inputs(op, input, target, weight)
    if op == "cross_entropy" and not 0.0 <= float(smoothing) <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {smoothing}")
    if _grad_mode(input, target if probs else None):
        if (op == "cross_entropy" and fused_autograd and reduction != "none"
                and not (probs and target.requires_grad)):
            return FusedCrossEntropyFunction.apply(reduction, int(ignore_index), float(smoothing), input,
                                                   target.detach(), weight)
        return ClassLossFunction.apply(op, reduction, int(ignore_index), float(smoothing), probs, input, target,
                                       weight)
    return _class_fw(op, input, target, weight, reduction, ignore_index, smoothing, probs)[0]


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """torch.nn.functional.cross_entropy: class indices (int32/int64) or class probabilities (the
    input's shape) over dim 1 (dim 0 for a [C] input); weight [C]; mean with class-index targets
    divides by the sum of the weights of the non-ignored targets (NaN when there are none)."""
    return _class_loss("cross_entropy", input, target, weight, _reduction(size_average, reduce, reduction),
                       ignore_index, label_smoothing)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """torch.nn.functional.nll_loss over log-probabilities (class dim 1, or 0 for a [C] input)."""
    return _class_loss("nll_loss", input, target, weight, _reduction(size_average, reduce, reduction), ignore_index,
                       0.0)


def _ce_fused(input, target, weight, ignore_index, reduction, smoothing, grad_scale, inplace):
    """(loss, gradient) from the fused forward; the gradient is contiguous (the backward's rescale
    needs it so) unless written in place over `input`."""
    rows = _row_shape(input)
    out = _loss_out(input, reduction, rows)
    x = input.detach()
    dx = x if inplace else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    probs = target.dtype.is_floating_point
    mode = check_targets if not probs else False
    flag = error_flag(mode, input.device)
    _run("cross_entropy", False, {"input": x, "target": target, "weight": weight, "out": out, "dy": grad_scale,
                                  "grad_input": dx, "error": flag},
         {"ignore_index": float(ignore_index), "label_smoothing": float(smoothing)}, reduction, input.device,
         fused_grad=True)
    check_flag(mode, flag, "cross_entropy",
               lambda: f"baracuda.functional.cross_entropy: Target is out of bounds (a class index outside "
                       f"[0, {input.shape[1 if input.dim() >= 2 else 0]}) that is not ignore_index={ignore_index})")
    return out, dx


def cross_entropy_with_grad(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                            grad_scale=None, inplace=False):
    """(loss, grad_input) of cross_entropy from ONE fused forward: each row is read once (long rows
    on sm_90: a thread-block cluster holds the row on chip; otherwise the gradient pass re-reads it
    from L2). Class-index or probability targets. The gradient is d loss / d input times
    `grad_scale` (a tensor of the loss's shape, or None for 1), computed without autograd.
    ``inplace=True`` writes the gradient over `input` (the logits are not needed afterwards)."""
    require_torch()
    reduction = _reduction(None, None, reduction)
    target, weight, probs = _class_inputs("cross_entropy", input, target, weight)
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    return _ce_fused(input, target.detach(), weight, ignore_index, reduction, label_smoothing, grad_scale, inplace)


# ---- fused linear + cross-entropy ----------------------------------------------------------------
def _aligned(t):
    """Dense and 16-byte aligned (the plan's GEMMs are chosen for it): a copy only when needed."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _lce_params(ignore_index, smoothing, chunk_tokens):
    return {"ignore_index": float(ignore_index), "label_smoothing": float(smoothing),
            "chunk_tokens": float(chunk_tokens or 0)}


def _lce_tf32(x):
    if x.dtype != torch.float32:
        return False
    from .gemm import _tf32
    return _tf32()


def _lce_run(backward, x, w, t, cw, params, reduction, out=None, dy=None, gx=None, gw=None):
    mode = check_targets if not backward else False
    flag = error_flag(mode, x.device)
    _run("linear_cross_entropy", backward, {"input": x, "weight": w, "target": t, "class_weight": cw, "out": out,
                                            "dy": dy, "grad_input": gx, "grad_weight": gw, "error": flag},
         params, reduction, x.device, fused_grad=not backward and (gx is not None or gw is not None),
         tf32=_lce_tf32(x))
    check_flag(mode, flag, "linear_cross_entropy",
               lambda: f"baracuda.functional.linear_cross_entropy: Target is out of bounds (a class index "
                       f"outside [0, {w.shape[0]}) that is not ignore_index={int(params['ignore_index'])})")


def _rescale(g, grad, reduction):
    """g *= grad (one element) in place on the device; nothing moves when grad is 1 (cross_entropy's
    fused backward, which scales any contiguous tensor)."""
    if g is not None and g.numel():
        _run("cross_entropy", True, {"dy": grad, "grad_input": g}, {}, reduction, g.device, fused_grad=True)


if torch is not None:
    class LinearCrossEntropyFunction(torch.autograd.Function):
        """mean/sum: the forward runs the chunks once and also writes d input and d weight (for
        grad_output = 1); the backward scales them by grad_output. none: the forward computes the loss
        only and the backward runs the plan's backward (the chunks again, with dy per row)."""

        @staticmethod
        def forward(ctx, reduction, params, need_x, need_w, x, w, t, cw=None):
            out = _loss_out(x, reduction, [x.shape[0]])
            ctx.reduction, ctx.params, ctx.consumed = reduction, params, False
            if reduction == "none":
                _lce_run(False, x, w, t, cw, params, reduction, out=out)
                ctx.save_for_backward(x, w, t, cw)
                ctx.need = (need_x, need_w)
                return out
            gx = torch.empty_like(x) if need_x else None
            gw = torch.empty_like(w) if need_w else None
            _lce_run(False, x, w, t, cw, params, reduction, out=out, gx=gx, gw=gw)
            ctx.save_for_backward(gx, gw)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            if ctx.reduction == "none":
                x, w, t, cw = ctx.saved_tensors
                need_x, need_w = ctx.need
                gx = torch.empty_like(x) if need_x else None
                gw = torch.empty_like(w) if need_w else None
                if gx is not None or gw is not None:
                    _lce_run(True, x, w, t, cw, ctx.params, "none", dy=grad, gx=gx, gw=gw)
                return None, None, None, None, gx, gw, None, None
            if ctx.consumed:
                raise RuntimeError("baracuda linear_cross_entropy: the fused gradients were consumed by an earlier "
                                   "backward through this graph (the forward computes them once)")
            ctx.consumed = True
            gx, gw = ctx.saved_tensors
            _rescale(gx, grad, ctx.reduction)
            _rescale(gw, grad, ctx.reduction)
            return None, None, None, None, gx, gw, None, None
else:  # pragma: no cover
    LinearCrossEntropyFunction = None


def linear_cross_entropy(input, weight, target, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                         chunk_tokens=None, class_weight=None):
    """cross_entropy(F.linear(input, weight), target, weight=class_weight) without materialising
    the logits.

    input [..., H] (float32/float16/bfloat16/float64), weight [V, H] (nn.Linear's layout, the input's
    dtype), target [...] class indices; ignore_index, label_smoothing, reduction and class_weight
    ([V], the input's dtype; cross_entropy's ``weight``, no gradient) as cross_entropy's. The
    logits are rounded to the input's dtype before the softmax, as F.linear would. ``chunk_tokens``
    sets the tokens a chunk (default: the plan's choice, [T, V] logits within 512 MiB). With
    autograd, d input and d weight come from the same pass."""
    require_torch()
    reduction = _reduction(None, None, reduction)
    _check_cuda("linear_cross_entropy", input, weight, target)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"linear_cross_entropy: expected a floating point input, got {input.dtype}")
    if weight.dtype != input.dtype:
        raise RuntimeError(f"linear_cross_entropy: expected weight of the input's dtype {input.dtype}, got "
                           f"{weight.dtype}")
    if input.dim() < 1 or weight.dim() != 2 or weight.shape[1] != input.shape[-1]:
        raise RuntimeError(f"linear_cross_entropy: input {tuple(input.shape)} and weight {tuple(weight.shape)} "
                           "cannot be multiplied (weight expected [V, H] with H = input.shape[-1])")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise ValueError(f"linear_cross_entropy: Expected target size {tuple(input.shape[:-1])}, got "
                         f"{tuple(target.shape)}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if target.dtype not in (torch.int32, torch.int64):
        target = target.to(torch.int64)
    cw = None
    if class_weight is not None:
        _check_cuda("linear_cross_entropy", class_weight)
        if class_weight.dtype != input.dtype or tuple(class_weight.shape) != (weight.shape[0],):
            raise RuntimeError(f"linear_cross_entropy: class_weight expected [{weight.shape[0]}] of {input.dtype}, got "
                               f"{list(class_weight.shape)} of {class_weight.dtype}")
        cw = class_weight.detach().contiguous()
    lead = input.shape[:-1]
    x = _aligned(input.reshape(-1, input.shape[-1]))
    w = _aligned(weight)
    t = target.reshape(-1).detach()
    params = _lce_params(ignore_index, label_smoothing, chunk_tokens)
    if _grad_mode(input, weight):
        out = LinearCrossEntropyFunction.apply(reduction, params, x.requires_grad, w.requires_grad, x, w, t, cw)
    else:
        out = _loss_out(x, reduction, [x.shape[0]])
        _lce_run(False, x.detach(), w.detach(), t, cw, params, reduction, out=out)
    return out.reshape(lead) if reduction == "none" else out


# ---- pointwise losses -------------------------------------------------------------------------------
def _pw_fw(op, inputs, params, reduction):
    row = LOSS_OPS[op]
    x = inputs[0]
    shape = torch.broadcast_shapes(*[t.shape for t in inputs if t is not None])
    out = _loss_out(x, reduction, shape)
    tensors = {name: t for name, t in zip(row["inputs"], inputs)}
    tensors["out"] = out
    _run(op, False, tensors, params, reduction, x.device)
    return out


def _pw_bw(op, grad, inputs, params, reduction, wanted):
    """Gradients of the inputs named in `wanted` (table grad names), in table input order."""
    row = LOSS_OPS[op]
    x = inputs[0]
    tensors = {name: t for name, t in zip(row["inputs"], inputs)}
    tensors["dy"] = grad
    grads = {}
    for g in row["grads"]:
        if g in wanted:
            t = tensors[g]
            grads[g] = torch.empty(t.shape, dtype=x.dtype, device=x.device)
            tensors["grad_" + g] = grads[g]
    if grads and any(t.numel() for t in grads.values()):
        _run(op, True, tensors, params, reduction, x.device)
    return grads


if torch is not None:
    class PointwiseLossFunction(torch.autograd.Function):
        """Any pointwise row of loss_ops.def; inputs in table order (None for absent optional ones)."""

        @staticmethod
        def forward(ctx, op, reduction, params, *inputs):
            out = _pw_fw(op, inputs, params, reduction)
            ctx.save_for_backward(*[t if t is not None else torch.empty(0) for t in inputs])
            ctx.absent = [t is None for t in inputs]
            ctx.op, ctx.reduction, ctx.params = op, reduction, params
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            row = LOSS_OPS[ctx.op]
            inputs = [None if a else t for t, a in zip(ctx.saved_tensors, ctx.absent)]
            wanted = {name for i, name in enumerate(row["inputs"]) if ctx.needs_input_grad[3 + i]}
            grads = _pw_bw(ctx.op, grad, inputs, ctx.params, ctx.reduction, wanted)
            return (None, None, None, *[grads.get(name) for name in row["inputs"]])
else:  # pragma: no cover
    PointwiseLossFunction = None


def _pointwise(op, reduction, params, *inputs):
    """Casts every tensor input to the first one's dtype (autograd tracks the casts) and runs the
    forward (through autograd when an input requires grad)."""
    require_torch()
    _check_cuda(op, *inputs)
    x = inputs[0]
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating point input, got {x.dtype}")
    inputs = [t if t is None or t.dtype == x.dtype else t.to(x.dtype) for t in inputs]
    params = {k: float(v) for k, v in params.items()}
    if _grad_mode(*inputs):
        return PointwiseLossFunction.apply(op, reduction, params, *inputs)
    return _pw_fw(op, inputs, params, reduction)


def _warn_broadcast(name, input, target):
    if target.size() != input.size():
        warnings.warn(f"Using a target size ({target.size()}) that is different to the input size ({input.size()}). "
                      "This will likely lead to incorrect results due to broadcasting. Please ensure they have the "
                      "same size.", stacklevel=3)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.mse_loss: (input - target)^2 (broadcasting, as torch, with its warning)."""
    _warn_broadcast("mse_loss", input, target)
    return _pointwise("mse_loss", _reduction(size_average, reduce, reduction), {}, input, target)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.l1_loss: |input - target|."""
    _warn_broadcast("l1_loss", input, target)
    return _pointwise("l1_loss", _reduction(size_average, reduce, reduction), {}, input, target)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """torch.nn.functional.smooth_l1_loss (beta = 0 is l1_loss)."""
    _warn_broadcast("smooth_l1_loss", input, target)
    return _pointwise("smooth_l1_loss", _reduction(size_average, reduce, reduction), {"beta": beta}, input, target)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """torch.nn.functional.huber_loss."""
    _warn_broadcast("huber_loss", input, target)
    return _pointwise("huber_loss", _reduction(None, None, reduction), {"delta": delta}, input, target)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.binary_cross_entropy (log terms clamped at -100; weight broadcasts to the
    target's shape). Inputs outside [0, 1] give NaN where torch asserts on the device."""
    if target.size() != input.size():
        raise ValueError(f"Using a target size ({target.size()}) that is different to the input size "
                         f"({input.size()}) is deprecated. Please ensure they have the same size.")
    if weight is not None:
        weight = weight.expand(torch.broadcast_shapes(target.shape, weight.shape))
    return _pointwise("binary_cross_entropy", _reduction(size_average, reduce, reduction), {}, input, target,
                      weight.detach() if weight is not None else None)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """torch.nn.functional.binary_cross_entropy_with_logits (weight and pos_weight broadcast; they
    take no gradient)."""
    if target.size() != input.size():
        raise ValueError(f"Target size ({target.size()}) must be the same as input size ({input.size()})")
    return _pointwise("binary_cross_entropy_with_logits", _reduction(size_average, reduce, reduction), {}, input,
                      target, weight.detach() if weight is not None else None,
                      pos_weight.detach() if pos_weight is not None else None)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """torch.nn.functional.kl_div (input: log-probabilities; 'batchmean' divides the sum by
    input.size(0); 'mean' is the elementwise mean, with torch's warning)."""
    if size_average is not None or reduce is not None:
        reduction = _reduction(size_average, reduce, "mean")
    elif reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      stacklevel=2)
    elif reduction not in ("none", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return _pointwise("kl_div", reduction, {"log_target": 1.0 if log_target else 0.0}, input, target)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """torch.nn.functional.poisson_nll_loss."""
    return _pointwise("poisson_nll_loss", _reduction(size_average, reduce, reduction),
                      {"log_input": 1.0 if log_input else 0.0, "full": 1.0 if full else 0.0, "eps": eps}, input,
                      target)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """torch.nn.functional.gaussian_nll_loss: var of the input's shape, or one dim short / last dim
    1 (homoscedastic); var is clamped to eps (the gradient passes the clamp, as torch's no_grad
    clamp does)."""
    require_torch()
    if not isinstance(var, torch.Tensor):
        var = torch.full((), float(var), dtype=input.dtype, device=input.device)
    elif var.size() != input.size():
        if input.size()[:-1] == var.size():
            var = torch.unsqueeze(var, -1)
        elif input.size()[:-1] == var.size()[:-1] and var.size(-1) == 1:
            pass
        elif var.dim() != 0:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if torch.any(var < 0):
        raise ValueError("var has negative entry/entries")
    return _pointwise("gaussian_nll_loss", reduction, {"full": 1.0 if full else 0.0, "eps": eps}, input, target, var)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.soft_margin_loss: log(1 + exp(-target * input))."""
    return _pointwise("soft_margin_loss", _reduction(size_average, reduce, reduction), {}, input, target)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.hinge_embedding_loss."""
    return _pointwise("hinge_embedding_loss", _reduction(size_average, reduce, reduction), {"margin": margin}, input,
                      target)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.margin_ranking_loss: max(0, -target * (input1 - input2) + margin)."""
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {input1.size()}, input2: {input2.size()}, target: {target.size()} ")
    return _pointwise("margin_ranking_loss", _reduction(size_average, reduce, reduction), {"margin": margin}, input1,
                      input2, target)


# ---- losses over the last dim ------------------------------------------------------------------------
_INDEX_TARGETS = ("multi_margin_loss", "multilabel_margin_loss")  # class-index targets, checked


def _rows_fw(op, inputs, params, reduction, loss_shape):
    row = LOSS_OPS[op]
    x = inputs[0]
    out = _loss_out(x, reduction, loss_shape)
    tensors = {name: t for name, t in zip(row["inputs"], inputs)}
    tensors["out"] = out
    mode = check_targets if op in _INDEX_TARGETS else False
    flag = error_flag(mode, x.device)
    if flag is not None:
        tensors["error"] = flag
    _run(op, False, tensors, params, reduction, x.device)
    check_flag(mode, flag, op, lambda: f"baracuda.functional.{op}: target is out of bounds (a class index outside "
                                       f"[0, {x.shape[-1]}))")
    return out


if torch is not None:
    class RowsLossFunction(torch.autograd.Function):
        """Any rows op of loss_ops.def; inputs in table order (None for absent optional ones). The
        backward recomputes the row sums from the saved inputs."""

        @staticmethod
        def forward(ctx, op, reduction, params, loss_shape, *inputs):
            out = _rows_fw(op, inputs, params, reduction, loss_shape)
            ctx.save_for_backward(*[t if t is not None else torch.empty(0) for t in inputs])
            ctx.absent = [t is None for t in inputs]
            ctx.op, ctx.reduction, ctx.params = op, reduction, params
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            row = LOSS_OPS[ctx.op]
            inputs = [None if a else t for t, a in zip(ctx.saved_tensors, ctx.absent)]
            wanted = {name for i, name in enumerate(row["inputs"]) if ctx.needs_input_grad[4 + i]}
            grads = _pw_bw(ctx.op, grad, inputs, ctx.params, ctx.reduction, wanted)
            return (None, None, None, None, *[grads.get(name) for name in row["inputs"]])
else:  # pragma: no cover
    RowsLossFunction = None


# Which table inputs broadcast to [..., D] (loss_ops.def order; plan.cpp's rows_inputs): the others are
# a per-row target (cosine_embedding's +-1, multi_margin's class), multilabel_margin's labels (the
# input's shape) or multi_margin's [C] weight, none of which takes part in the broadcast.
_ROWS_ELEM = {"cosine_embedding_loss": (True, True, False), "triplet_margin_loss": (True, True, True),
              "multi_margin_loss": (True, False, False), "multilabel_margin_loss": (True, False),
              "multilabel_soft_margin_loss": (True, True, True)}


def _rows(op, reduction, params, inputs, floating):
    """inputs in table order; `floating`: which are cast to the first one's dtype (the others are
    class indices: int32/int64). The loss has the broadcast shape of the inputs that broadcast to
    [..., D] (_ROWS_ELEM) without the last dim."""
    require_torch()
    _check_cuda(op, *inputs)
    x = inputs[0]
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating point input, got {x.dtype}")
    cast = []
    for t, fl in zip(inputs, floating):
        if t is None:
            cast.append(None)
        elif fl:
            cast.append(t if t.dtype == x.dtype else t.to(x.dtype))
        else:
            cast.append(t.detach() if t.dtype in (torch.int32, torch.int64) else t.detach().to(torch.int64))
    shape = torch.broadcast_shapes(*[t.shape for t, el in zip(cast, _ROWS_ELEM[op]) if el and t is not None])
    loss_shape = list(shape[:-1])
    params = {k: float(v) for k, v in params.items()}
    if _grad_mode(*[t for t, fl in zip(cast, floating) if fl]):
        return RowsLossFunction.apply(op, reduction, params, loss_shape, *cast)
    return _rows_fw(op, cast, params, reduction, loss_shape)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.cosine_embedding_loss: target 1 -> 1 - cos(x1, x2), -1 -> max(0, cos - margin)
    (cos with torch's 1e-12 under each squared norm); inputs [N, D] with target [N], or [D] with []."""
    reduction = _reduction(size_average, reduce, reduction)
    require_torch()
    if target.dim() not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if target.dim() == 1 and (input1.dim() != 2 or input2.dim() != 2):
        raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    if target.dim() == 0 and (input1.dim() != 1 or input2.dim() != 1):
        raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    if input1.shape[-1] != input2.shape[-1]:
        # torch takes each input's squared norm over its own last dim: a broadcast last dim is not a
        # broadcast of the cosine (the plan would sum D copies of the one element into its norm).
        raise RuntimeError(f"cosine_embedding_loss: input1 and input2 expected the same last dim (the embedding), "
                           f"got sizes {list(input1.shape)} and {list(input2.shape)}")
    # One +-1 per row. torch's where() broadcasts the target against the per-row cosines: a target
    # with more rows than the inputs repeats their rows (expanded views; autograd sums them back).
    rows_in = torch.broadcast_shapes(input1.shape[:-1], input2.shape[:-1])
    rows = torch.broadcast_shapes(rows_in, target.shape)
    if rows != rows_in:
        input1, input2 = input1.expand(*rows, input1.shape[-1]), input2.expand(*rows, input2.shape[-1])
    target = target.detach().expand(rows)
    return _rows("cosine_embedding_loss", reduction, {"margin": margin}, [input1, input2, target], [True] * 3)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """torch.nn.functional.triplet_margin_loss: max(0, margin + d(a, p) - d(a, n)), d(u, v) = ||u - v +
    eps||_p over the last dim (swap: d(a, n) -> min(d(a, n), d(p, n))); p > 0."""
    reduction = _reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
    a_dim, p_dim, n_dim = anchor.dim(), positive.dim(), negative.dim()
    if not (a_dim == p_dim == n_dim):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {a_dim}D, positive {p_dim}D, and negative {n_dim}D inputs")
    return _rows("triplet_margin_loss", reduction, {"margin": margin, "p": p, "eps": eps, "swap": 1.0 if swap else 0.0},
                 [anchor, positive, negative], [True] * 3)


def _margin_shapes(op, input, target, same_shape):
    if input.dim() > 2:
        raise RuntimeError(f"{op}: Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    if same_shape:
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(f"{op}: inconsistent target size: {list(target.shape)} for input of size: "
                               f"{list(input.shape)}")
    else:
        n = input.shape[0] if input.dim() == 2 else 1
        if target.dim() > 1 or target.numel() != n:
            raise RuntimeError(f"{op}: inconsistent target size, expected {n} but got {list(target.shape)}")


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """torch.nn.functional.multi_margin_loss: sum over i != y of max(0, margin - x[y] + x[i])^p times
    weight[y], over C; input [N, C] or [C], target class indices [N] (or a scalar)."""
    reduction = _reduction(size_average, reduce, reduction)
    require_torch()
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    squeeze = input.dim() == 0
    x = input.reshape(1) if squeeze else input
    _margin_shapes("multi_margin_loss", x, target, False)
    t = target.reshape(x.shape[:-1])
    out = _rows("multi_margin_loss", reduction, {"p": p, "margin": margin},
                [x, t, weight.detach().contiguous() if weight is not None else None], [True, False, True])
    return out.reshape(target.shape) if reduction == "none" and not squeeze else out


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.multilabel_margin_loss: input [N, C] or [C], target class indices of the
    same shape, each row's labels ended by the first negative one."""
    reduction = _reduction(size_average, reduce, reduction)
    require_torch()
    squeeze = input.dim() == 0
    x = input.reshape(1) if squeeze else input
    t = target.reshape(1) if squeeze and target.dim() == 0 else target
    _margin_shapes("multilabel_margin_loss", x, t, True)
    return _rows("multilabel_margin_loss", reduction, {}, [x, t], [True, False])


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """torch.nn.functional.multilabel_soft_margin_loss: -(1/C) sum_c w_c (y log sigmoid(x) + (1 - y)
    log sigmoid(-x)) over the last dim (C = input.shape[-1]; weight broadcasts and takes no gradient)."""
    reduction = _reduction(size_average, reduce, reduction)
    require_torch()
    if input.dim() >= 1:
        full = torch.broadcast_shapes(*[t.shape for t in (input, target, weight) if t is not None])
        if full[-1] != input.shape[-1]:
            raise ValueError(f"multilabel_soft_margin_loss: target/weight broadcast the input's last dim "
                             f"({input.shape[-1]} -> {full[-1]}), which is the class dim")
    return _rows("multilabel_soft_margin_loss", reduction, {},
                 [input, target, weight.detach() if weight is not None else None], [True, True, True])


def loss_sku(op, tensors, params=None, reduction="mean", backward=False, fused_grad=False):
    """The plan's SKU and the kernel variant it would launch for these tensors (roles as _C.loss)."""
    return _C.loss_sku(op, backward, _export(tensors), params or {}, reduction, True, fused_grad)

