"""torch.nn.functional.ctc_loss with autograd (include/baracuda/ops/ctc_loss.hpp, CtcLossPlan).

``ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
zero_infinity=False)`` takes torch's arguments: log_probs [T, N, C] (or unbatched [T, C]) float32 /
float64 (also float16 / bfloat16, computed in float32: torch has no such kernel), any strides; targets
padded [N, S] or concatenated 1-D, any integer dtype, on any device (moved to log_probs' device);
input_lengths / target_lengths as tensors (any device) or sequences of ints. The result and the
gradient follow ATen's native CUDA kernels (see ctc_loss.hpp), deterministic and bit-stable.

One CTA per batch item runs the log-space recursion over time with the state row in shared memory;
under autograd the forward runs the beta recursion alongside (a second CTA per item, concurrently)
and saves log_alpha and log_beta [N, T, 2 S + 1] (float32, float64 for float64 inputs), so the
backward is one parallel pass over the gradient (a warp per (t, n) row). S is the largest target
length when the lengths are known on the host (a list, or a CPU tensor), else the bound the shapes
give (padded: targets.size(1); concatenated: targets.numel()), capped at T.

Invalid inputs are never read out of bounds: with lengths on the host this module raises torch's
errors before any launch; the kernels flag the rest (labels outside [0, C), lengths on the device),
and this module reads the flag after the forward and raises ``RuntimeError`` (one host
synchronization per call; ``baracuda.ctc.check_inputs = False`` skips it: the items concerned then
have NaN losses and gradients). A label equal to blank is computed as torch computes it, with a
warning.

Outputs are torch tensors on log_probs' device; kernels run on ``torch.cuda.current_stream()``.
"""
import warnings

from . import _C
from ._autograd import current_stream, dl, require_torch, torch

__all__ = ["ctc_loss"]

# The kernels' error flag is read after every forward (one host synchronization).
check_inputs = True
# Under autograd the forward also computes log_beta (concurrently with log_alpha) and saves it: the
# backward is then one pass. False: the backward recomputes log_beta (less memory held between the
# passes, one more sequential pass).
fused_beta = True

_ERR_INVALID, _ERR_BLANK = 1, 2


def _export(tensors):
    """DLPack capsules are single-use: export afresh for every _C call."""
    return {k: dl(v) for k, v in tensors.items() if v is not None}


def _require_bindings():
    if not hasattr(_C, "ctc_loss"):
        raise RuntimeError("baracuda._C has no ctc_loss bindings: rebuild the extension (python/src/ctc_bindings.cpp)")


def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _lengths(name, v, device, batch):
    """(device tensor int32/int64, host values or None)."""
    if isinstance(v, torch.Tensor):
        if v.dtype.is_floating_point or v.dtype.is_complex or v.dtype == torch.bool:
            raise RuntimeError(f"{name} must be integral")
        host = v.reshape(-1).tolist() if v.device.type == "cpu" else None
        t = v if v.dtype in (torch.int32, torch.int64) else v.to(torch.int64)
        return t.to(device), host
    host = [int(v)] if isinstance(v, int) else [int(x) for x in v]
    return torch.tensor(host, dtype=torch.int64, device=device), host


def _check_host(log_probs, targets, il, tl, batch):
    """torch's argument checks (ctc_loss_gpu_template) where the lengths are on the host."""
    T = log_probs.shape[0]
    if il is not None:
        if len(il) != batch:
            raise RuntimeError("input_lengths must be of size batch_size")
        for v in il:
            if v < 0:
                raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {v}")
            if v > T:
                raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value {v}")
    if tl is not None:
        if len(tl) != batch:
            raise RuntimeError("target_lengths must be of size batch_size")
        for v in tl:
            if v < 0:
                raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {v}")
        if targets.dim() == 2:
            if tl and max(tl) > targets.shape[1]:
                raise RuntimeError(f"Expected tensor to have size at least {max(tl)} at dimension 1, but got size "
                                   f"{targets.shape[1]} for argument #2 'targets'")
        elif sum(tl) != targets.shape[0]:
            raise RuntimeError(f"Expected tensor to have size {sum(tl)} at dimension 0, but got size "
                               f"{targets.shape[0]} for argument #2 'targets'")


def _raise_flag(flag, C, blank):
    f = int(flag.item())
    if f & _ERR_INVALID:
        raise RuntimeError(f"baracuda ctc_loss: invalid input: a target label outside [0, {C}), a negative length, "
                           "an input length above T, a target length above targets.size(1) or, for concatenated "
                           "targets, lengths that do not sum to targets.numel() (the items concerned are NaN)")
    if f & _ERR_BLANK:
        warnings.warn(f"baracuda ctc_loss: a target label equals blank={blank} (computed as torch computes it)",
                      stacklevel=3)


class _Call:
    """The tensors and parameters of one ctc_loss call, shared by the forward and the backward."""

    def __init__(self, log_probs, targets, il, tl, blank, reduction, zero_infinity, max_target_length):
        self.log_probs, self.targets, self.il, self.tl = log_probs, targets, il, tl
        self.blank, self.reduction, self.zero_infinity = int(blank), reduction, bool(zero_infinity)
        self.max_target_length = max_target_length

    def inputs(self):
        return {"log_probs": self.log_probs, "targets": self.targets, "input_lengths": self.il,
                "target_lengths": self.tl}

    def plan(self, backward, fused):
        return _C.ctc_loss_plan(backward, _export(self.inputs()), self.blank, self.reduction, self.zero_infinity,
                                fused, self.max_target_length)

    def run(self, backward, fused, tensors, plan):
        dev = self.log_probs.device
        ws = None
        if plan["workspace_size"]:
            ws = dl(torch.empty(plan["workspace_size"], dtype=torch.uint8, device=dev))
        all_t = dict(self.inputs())
        all_t.update(tensors)
        _C.ctc_loss(backward, _export(all_t), self.blank, self.reduction, self.zero_infinity, fused,
                    self.max_target_length, current_stream(dev), ws)

    def forward(self, save, fused):
        """(loss, log_alpha, log_beta, nll); the saved tensors only when `save`."""
        x = self.log_probs
        plan = self.plan(False, fused)
        out = torch.empty(plan["loss_shape"], dtype=x.dtype, device=x.device)
        st = _stats_dtype(x)
        la = lb = nll = None
        if save:
            la = torch.empty(plan["log_alpha_shape"], dtype=st, device=x.device)
            lb = torch.empty(plan["log_alpha_shape"], dtype=st, device=x.device) if fused else None
            nll = torch.empty(plan["log_alpha_shape"][:1], dtype=st, device=x.device)
        flag = torch.zeros(1, dtype=torch.int32, device=x.device) if check_inputs else None
        self.run(False, fused, {"out": out, "save_log_alpha": la, "save_log_beta": lb,
                                "save_neg_log_likelihood": nll, "error": flag}, plan)
        if flag is not None:
            _raise_flag(flag, x.shape[-1], self.blank)
        return out, la, lb, nll

    def backward(self, dy, la, lb, nll, fused):
        x = self.log_probs
        grad = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if grad.numel():
            plan = self.plan(True, fused)
            self.run(True, fused, {"dy": dy, "log_alpha": la, "log_beta": lb if fused else None,
                                   "neg_log_likelihood": nll, "grad": grad}, plan)
        return grad


if torch is not None:
    from torch.autograd.function import once_differentiable

    class CtcLossFunction(torch.autograd.Function):
        """ctc_loss: the forward saves log_alpha (and log_beta, see ``fused_beta``) and the negative
        log-likelihoods; the backward is ATen's gradient from them."""

        @staticmethod
        def forward(ctx, call, fused, log_probs):
            out, la, lb, nll = call.forward(True, fused)
            ctx.call, ctx.fused = call, fused
            ctx.save_for_backward(la, lb, nll)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            la, lb, nll = ctx.saved_tensors
            return None, None, ctx.call.backward(grad, la, lb, nll, ctx.fused)
else:  # pragma: no cover
    CtcLossFunction = None


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """torch.nn.functional.ctc_loss: the connectionist temporal classification loss of log_probs [T, N, C]
    (unbatched [T, C]) against targets (padded [N, S] or concatenated), reductions none / mean (each loss
    divided by its clamped target length, then the batch mean) / sum; zero_infinity zeroes infinite
    losses and their gradients."""
    require_torch()
    _require_bindings()
    if not isinstance(log_probs, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise TypeError("baracuda.functional.ctc_loss: log_probs and targets must be tensors")
    if log_probs.device.type != "cuda":
        raise RuntimeError(f"baracuda.functional.ctc_loss: log_probs must be on a CUDA device, got {log_probs.device}")
    if not log_probs.dtype.is_floating_point:
        raise RuntimeError(f"ctc_loss: expected a floating point log_probs, got {log_probs.dtype}")
    if log_probs.dim() not in (2, 3):
        raise RuntimeError(f"ctc_loss: expected log_probs of 2 or 3 dimensions, got {log_probs.dim()}")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    dev = log_probs.device
    batch = log_probs.shape[1] if log_probs.dim() == 3 else 1
    if targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
        raise RuntimeError(f"ctc_loss: expected integer targets, got {targets.dtype}")
    if targets.dtype not in (torch.int32, torch.int64):
        targets = targets.to(torch.int64)
    targets = targets.to(dev)
    il, il_host = _lengths("input_lengths", input_lengths, dev, batch)
    tl, tl_host = _lengths("target_lengths", target_lengths, dev, batch)
    _check_host(log_probs, targets, il_host, tl_host, batch)
    for name, t in (("input_lengths", il), ("target_lengths", tl)):
        if t.numel() != batch or t.dim() > 1:
            raise RuntimeError(f"{name} must be of size batch_size ({batch}), got shape {list(t.shape)}")
    if log_probs.dim() == 2:  # unbatched: lengths are scalars (or one-element vectors)
        il, tl = il.reshape(()), tl.reshape(())
    max_tl = max(tl_host) if tl_host else (0 if tl_host is not None else -1)
    call = _Call(log_probs.detach(), targets, il, tl, blank, reduction, zero_infinity, max_tl)
    if torch.is_grad_enabled() and log_probs.requires_grad:
        return CtcLossFunction.apply(call, bool(fused_beta), log_probs)
    return call.forward(False, False)[0]
