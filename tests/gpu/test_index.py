"""GPU conformance of the indexing family (include/baracuda/ops/index_ops.def) vs PyTorch.

Copies, gathers and embedding forward move bytes: they are compared bit for bit, through a
same-width integer view, for every dtype (fp8, bool and complex included). Scatter sums use
small-integer data so every partial sum is exact in every dtype (bit-exact comparison too);
separate tests cover random floats with tolerances and bit-identical repeated runs of the
deterministic path. Shapes include empty, 1, odd sizes, non-contiguous views (transposed,
sliced, expanded); indices are int32 and int64 with duplicates; out-of-range indices raise and
leave the inputs untouched; backward passes are compared with torch.autograd.
"""
import zlib

import pytest


from gpu_skip import skip_unless_ready  # noqa: E402

skip_unless_ready('index_ops')

import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import baracuda.functional as F  # noqa: E402
import baracuda.index as BI  # noqa: E402

DEV = "cuda"
ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
              torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
for _n in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _n):
        ALL_DTYPES.append(getattr(torch, _n))
ADD_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INDEX_DTYPES = [torch.int32, torch.int64]
SAME_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def gen(*parts):
    return torch.Generator(device="cpu").manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


def make(shape, dt, *seed, lo=-60, hi=60):
    """Small integers in dt (exact in every dtype); bool: random bits."""
    g = gen(*seed)
    v = torch.randint(lo, hi, tuple(shape), generator=g, dtype=torch.int64)
    if dt == torch.bool:
        return (v % 2 == 0).to(DEV)
    if dt == torch.uint8:
        return (v - lo).to(torch.uint8).to(DEV)
    if dt.is_complex:
        w = torch.randint(lo, hi, tuple(shape), generator=g, dtype=torch.int64)
        return torch.complex(v.double(), w.double()).to(dt).to(DEV)
    if dt in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        return v.to(torch.float32).to(dt).to(DEV)
    return v.to(dt).to(DEV)


def randf(shape, dt, *seed):
    return torch.randn(tuple(shape), generator=gen(*seed), dtype=torch.float64).to(dt).to(DEV)


def bits(t):
    """A same-width integer view (byte-exact comparison for any dtype)."""
    if t.dtype == torch.complex128:
        return torch.view_as_real(t).view(torch.int64)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(SAME_WIDTH[t.element_size()])


def same_bits(got, ref, what):
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    g, r = bits(got), bits(ref)
    if not torch.equal(g, r):
        bad = (g != r).nonzero()
        raise AssertionError(f"{what}: {bad.shape[0]} of {g.numel()} elements differ, first at {bad[0].tolist()}")


def iview(t):
    """A same-width integer view with the same shape (complex128 stays itself: torch handles it)."""
    if t.dtype == torch.complex128:
        return t
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(SAME_WIDTH[t.element_size()])


def ref_op(fn, x, *others):
    """torch's fn on integer views (torch lacks some byte-level kernels for fp8/bool), viewed back."""
    r = fn(iview(x), *[iview(o) for o in others])
    return r if x.dtype == torch.complex128 else r.view(x.dtype)


def idx(values, it):
    return torch.as_tensor(values, dtype=torch.int64).to(it).to(DEV)


def rand_index(shape, n, it, *seed):
    return torch.randint(0, max(n, 1), tuple(shape), generator=gen(*seed), dtype=torch.int64).to(it).to(DEV)


# ---- copies: contiguous / permute / transpose / expand / slice write -------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_contiguous_of_strided_views(dt):
    x = make((7, 33, 65), dt, "contig", dt)
    views = {
        "dense": x,
        "transposed": x.transpose(0, 2),
        "permuted": x.permute(1, 2, 0),
        "sliced": x[1:6, ::2, 3:],
        "expanded": x[:, :1, :].expand(7, 5, 65),
        "inner-transpose": x.transpose(1, 2),
    }
    for name, v in views.items():
        got = F.contiguous(v)
        assert got.is_contiguous()
        same_bits(got, ref_op(lambda t: t.contiguous(), v), f"contiguous {name} {dt}")


@pytest.mark.parametrize("shape,dims", [((129, 4097), (1, 0)), ((1, 1), (1, 0)), ((3, 64, 80), (0, 2, 1)),
                                        ((33, 17, 65), (2, 0, 1)), ((2, 3, 4, 5, 6), (4, 3, 2, 1, 0)),
                                        ((0, 5), (1, 0)), ((1000, 1000), (1, 0))])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32, torch.uint8, torch.float64, torch.complex128], ids=str)
def test_permute_copy(shape, dims, dt):
    x = make(shape, dt, "perm", shape, dt)
    same_bits(F.permute_copy(x, dims), x.permute(dims).contiguous(), f"permute {shape} {dims}")
    if len(shape) >= 2:
        same_bits(F.transpose_copy(x, 0, -1), x.transpose(0, -1).contiguous(), "transpose_copy")


@pytest.mark.sanitizer
def test_permute_copy_backward():
    x = randf((5, 6, 7), torch.float32, "permbw").requires_grad_()
    g = randf((7, 5, 6), torch.float32, "permbw-g")
    (gx,) = torch.autograd.grad(F.permute_copy(x, (2, 0, 1)), x, g)
    (rx,) = torch.autograd.grad(x.permute(2, 0, 1).contiguous(), x, g)
    same_bits(gx, rx, "permute_copy backward")


@pytest.mark.parametrize("dt", [torch.uint8, torch.bfloat16, torch.float32, torch.float64, torch.int32,
                                torch.complex64, torch.complex128], ids=str)
def test_transpose_vectors(dt):
    """Register-transposed blocks in 16-, 8- or 4-byte vectors (whatever the sizes and the storage
    allow), element tiles otherwise: whole, partial and batched tiles, misaligned storage."""
    for shape in [(256, 130), (130, 66), (33, 47), (2, 64, 96), (1000, 1000), (136, 4104), (3, 264, 520),
                  (24, 20), (16, 4)]:
        x = make(shape, dt, "tw", shape, dt)
        dims = tuple(reversed(range(len(shape))))
        same_bits(F.permute_copy(x, dims), x.permute(dims).contiguous(), f"transpose {shape}")
        xs = shifted_empty(shape, dt, 1)
        xs.copy_(x)
        same_bits(F.permute_copy(xs, dims), x.permute(dims).contiguous(), f"transpose misaligned {shape}")
    # a batch dim between the two inner ones, and a strided (sliced) input
    x = make((40, 3, 72), dt, "tw-mid", dt)
    same_bits(F.permute_copy(x, (2, 1, 0)), x.permute(2, 1, 0).contiguous(), "transpose around a batch dim")
    xw = make((64, 160), dt, "tw-slice", dt)[:, 16:144]
    same_bits(F.permute_copy(xw, (1, 0)), xw.t().contiguous(), "transpose of a slice")


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32, torch.int64], ids=str)
def test_slice_write_kv_cache(dt):
    cache = make((2, 8, 64, 16), dt, "kv", dt)
    ref = cache.clone()
    new = make((2, 8, 3, 16), dt, "kv-new", dt)
    out = F.slice_write_(cache, new, dim=2, start=10, end=13)
    assert out is cache
    ref[:, :, 10:13] = new
    same_bits(cache, ref, "slice_write_")
    # a broadcast source (stride 0) and a transposed one
    F.slice_write_(cache, new[:, :, :1], dim=2, start=20, end=23)
    ref[:, :, 20:23] = new[:, :, :1]
    same_bits(cache, ref, "slice_write_ broadcast")
    y = make((2, 8, 16, 3), dt, "kv-t", dt).transpose(2, 3)
    F.slice_write_(cache, y, dim=2, start=30, end=33)
    ref[:, :, 30:33] = y
    same_bits(cache, ref, "slice_write_ transposed")


def test_slice_scatter():
    x = make((6, 9), torch.float32, "ss")
    s = make((6, 3), torch.float32, "ss-src")
    same_bits(F.slice_scatter(x, s, 1, 2, 8, 2), torch.slice_scatter(x, s, 1, 2, 8, 2), "slice_scatter")


# ---- cat / stack ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_cat(dt, dim):
    shapes = [[4, 5, 6], [4, 5, 6], [4, 5, 6]]
    sizes = [3, 1, 0]
    for s, n in zip(shapes, sizes):
        s[dim] = n
    xs = [make(s, dt, "cat", i, dim, dt) for i, s in enumerate(shapes)]
    xs[0] = xs[0].transpose(0, 2).contiguous().transpose(0, 2)  # a strided input
    same_bits(F.cat(xs, dim), ref_op(lambda *t: torch.cat(t, dim), *xs), f"cat dim {dim}")
    ys = [make((4, 5, 6), dt, "stack", i, dt) for i in range(3)]
    same_bits(F.stack(ys, dim), ref_op(lambda *t: torch.stack(t, dim), *ys), f"stack dim {dim}")


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32, torch.uint8, torch.float64], ids=str)
def test_cat_and_slices_of_long_rows(dt):
    """Rows of >= 512 words move by the row kernel (row-copy-*): cat along the last dim of long
    rows (a strided destination slice a row), a row slice of a wider tensor, a misaligned start,
    and rows just below the threshold (the per-word kernel)."""
    for n1, n2 in [(4096, 4100), (5000, 3), (4088, 8)]:
        a, b = make((3, 7, n1), dt, "longcat-a", n1, dt), make((3, 7, n2), dt, "longcat-b", n2, dt)
        same_bits(F.cat([a, b], 2), torch.cat([a, b], 2), f"cat rows {n1}+{n2}")
        same_bits(F.cat([a, a], 0), torch.cat([a, a], 0), f"cat flat {n1}")
    w = make((9, 9000), dt, "longrow", dt)
    for v in (w[:, 3:8195], w[1::2, :8192], w[:, 1:]):
        same_bits(F.contiguous(v), v.contiguous(), f"row slice {tuple(v.shape)}")


@pytest.mark.sanitizer
def test_cat_stack_backward():
    xs = [randf((3, n), torch.float32, "catbw", n).requires_grad_() for n in (2, 5)]
    g = randf((3, 7), torch.float32, "catbw-g")
    got = torch.autograd.grad(F.cat(xs, 1), xs, g)
    ref = torch.autograd.grad(torch.cat(xs, 1), xs, g)
    for a, b in zip(got, ref):
        same_bits(a, b, "cat backward")
    ys = [randf((3, 4), torch.float32, "stbw", i).requires_grad_() for i in range(2)]
    g = randf((3, 2, 4), torch.float32, "stbw-g")
    got = torch.autograd.grad(F.stack(ys, 1), ys, g)
    ref = torch.autograd.grad(torch.stack(ys, 1), ys, g)
    for a, b in zip(got, ref):
        same_bits(a, b, "stack backward")


def test_cat_dtype_promotion_and_errors():
    a = make((2, 3), torch.float16, "pa")
    b = make((2, 3), torch.float32, "pb")
    same_bits(F.cat([a, b]), torch.cat([a, b]), "cat promotion")
    with pytest.raises(RuntimeError):
        F.cat([a, make((2, 4), torch.float16, "pc")], 0)


# ---- pad ------------------------------------------------------------------------------------------
def pad_reference(x, pad, mode, value=0):
    """Independent reference: per padded dim, an index map and index_select (any dtype)."""
    pairs = BI._pad_pairs("pad", x, pad)
    out = x
    for d in range(x.dim()):
        b, a = pairs[2 * d], pairs[2 * d + 1]
        if b == 0 and a == 0:
            continue
        n = x.shape[d]
        o = torch.arange(n + b + a, dtype=torch.int64)
        i = o - b
        inside = (i >= 0) & (i < n)
        if mode == "reflect":
            i = i.abs()
            i = torch.where(i >= n, 2 * (n - 1) - i, i)
        elif mode == "replicate":
            i = i.clamp(0, n - 1)
        elif mode == "circular":
            i = i % n
        src = i.clamp(0, max(n - 1, 0)).to(DEV)
        sel = out.index_select(d, src) if n else torch.empty(
            [s if k != d else len(o) for k, s in enumerate(out.shape)], dtype=out.dtype, device=DEV)
        if mode == "constant":
            shape = [1] * x.dim()
            shape[d] = len(o)
            fill = torch.full((), value, dtype=out.dtype, device=DEV) if out.dtype != torch.bool else \
                torch.tensor(bool(value), device=DEV)
            sel = torch.where(inside.to(DEV).view(shape), sel, fill)
        out = sel
    return out


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_pad_every_dtype(mode, dt):
    x = make((3, 7, 9), dt, "pad", mode, dt)
    for pad in [(2, 3), (1, 2, 3, 0), (0, 0, 2, 1, 1, 1)]:
        same_bits(F.pad(x, pad, mode), ref_op(lambda t: pad_reference(t, pad, mode), x), f"pad {mode} {pad} {dt}")
    xt = x.transpose(1, 2)
    same_bits(F.pad(xt, (2, 1), mode), ref_op(lambda t: pad_reference(t, (2, 1), mode), xt), f"pad {mode} strided")


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_pad_constant_value_and_crop(dt):
    x = make((4, 5, 6), dt, "padv", dt)
    same_bits(F.pad(x, (1, 2, 3, 4), value=1.5), tF.pad(x, (1, 2, 3, 4), value=1.5), "pad value")
    same_bits(F.pad(x, (-1, 2, 0, -2)), tF.pad(x, (-1, 2, 0, -2)), "pad crop")
    same_bits(F.pad(x, (0, 0, 0, 0, 1, 1), value=float("-inf")), tF.pad(x, (0, 0, 0, 0, 1, 1), value=float("-inf")),
              "pad -inf")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=str)
def test_pad_vs_torch_and_backward(mode, dt):
    x = randf((2, 3, 7, 9), dt, "padbw", mode).requires_grad_()
    pad = (2, 3, 1, 2)
    y = F.pad(x, pad, mode)
    r = tF.pad(x, pad, mode)
    same_bits(y.detach(), r.detach(), f"pad {mode} vs F.pad")
    g = randf(r.shape, dt, "padbw-g", mode)
    (gx,) = torch.autograd.grad(y, x, g)
    (rx,) = torch.autograd.grad(r, x, g)
    torch.testing.assert_close(gx, rx, rtol=1e-6 if dt == torch.float32 else 1e-12, atol=1e-6)


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16], ids=str)
def test_pad_backward_half(dt):
    x = make((3, 10, 12), dt, "padh", dt).requires_grad_()
    pad = (3, 2, 4, 1)
    g = make((3, 15, 17), dt, "padh-g", dt, lo=-3, hi=4)
    (gx,) = torch.autograd.grad(F.pad(x, pad, "replicate"), x, g)
    (rx,) = torch.autograd.grad(tF.pad(x.float(), pad, "replicate"), x, g.float())  # exact small ints
    same_bits(gx, rx.to(dt), "replicate backward half")


def test_pad_empty():
    x = torch.empty((0, 4), device=DEV)
    assert F.pad(x, (1, 1)).shape == (0, 6)
    y = torch.empty((3, 0), device=DEV)
    same_bits(F.pad(y, (2, 1), value=7.0), tF.pad(y, (2, 1), value=7.0), "constant pad of an empty dim")


ROW_DTYPES = [torch.bfloat16, torch.float32, torch.uint8, torch.float64, torch.complex64]


def shifted_empty(shape, dt, elems):
    """A contiguous tensor of `shape` starting `elems` elements into a fresh buffer (misaligned)."""
    n = 1
    for v in shape:
        n *= v
    return torch.empty(n + elems, dtype=dt, device=DEV)[elems:].view(shape)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("dt", ROW_DTYPES, ids=str)
def test_pad_rows(mode, dt):
    """The row kernels of pad's forward: warp tasks of rows (short rows, here up to 2 KB),
    16-byte output chunks (longer rows: the 1000-column f32 and f64 cases) and warp tasks inside
    one row (rows of 4 KB and more: the last three cases); odd sizes, many
    tasks with a partial last one, misaligned input and output views, a transposed input (its
    padded dim strided), rows crossing chunk boundaries."""
    cases = [((2, 3, 16, 16), (1, 1, 1, 1)), ((4, 6, 33), (5, 7)), ((5, 64), (8, 8, 3, 2)), ((2, 17, 18), (1, 1, 1, 1)),
             ((3, 9, 130), (2, 1, 0, 0, 1, 1)), ((7, 40), (3, 4)), ((3, 5, 70, 130), (1, 1, 1, 1)),
             ((37, 1000), (9, 15, 2, 1)), ((5, 4100), (3, 9)), ((3, 2, 2100), (7, 1, 1, 1)),
             ((4, 1100), (600, 700))]  # the last three: rows of >= 4 KB (tasks inside one row) for 2+ byte dtypes
    for shape, pad in cases:
        x = make(shape, dt, "padrows", shape, mode, dt)
        same_bits(F.pad(x, pad, mode), ref_op(lambda t: pad_reference(t, pad, mode), x), f"pad rows {mode} {shape}")
        # misaligned views: input one element into its buffer, output three
        xs = shifted_empty(shape, dt, 1)
        xs.copy_(x)
        want = ref_op(lambda t: pad_reference(t, pad, mode), x)
        out = shifted_empty(tuple(want.shape), dt, 3)
        BI._run("pad", {"x": xs, "out": out}, {"pads": BI._pad_pairs("pad", x, pad), "mode": mode, "value": 0.0})
        same_bits(out, want, f"pad rows misaligned {mode} {shape}")
    xt = make((3, 17, 40), dt, "padrows-t", mode, dt).transpose(1, 2)  # the padded dim is strided in x
    same_bits(F.pad(xt, (4, 6, 3, 2), mode), ref_op(lambda t: pad_reference(t, (4, 6, 3, 2), mode), xt),
              f"pad rows transposed input {mode}")
    x = make((2, 3, 16, 16), dt, "padrows-sku", dt)
    sku = BI.index_sku("pad", {"x": x, "out": F.pad(x, (1, 1, 1, 1), mode)},
                       {"pads": BI._pad_pairs("pad", x, (1, 1, 1, 1)), "mode": mode, "value": 0.0})
    assert "mapped-rows" in sku, sku


@pytest.mark.sanitizer
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32], ids=str)
def test_pad_rows_constant_value_crop_and_empty(dt):
    x = make((4, 40), dt, "padrows-v", dt)
    for pad in [(3, 5, 1, 1), (-3, 5, 1, -2), (30, 2), (-39, 0)]:
        same_bits(F.pad(x, pad, value=2.5), tF.pad(x, pad, value=2.5), f"pad rows value {pad}")
    xl = make((3, 3000), dt, "padrows-vl", dt)
    for pad in [(-7, 1200), (1300, -5, 1, 0)]:
        same_bits(F.pad(xl, pad, value=2.5), tF.pad(xl, pad, value=2.5), f"pad long rows value {pad}")
    e = torch.empty((3, 0), dtype=dt, device=DEV)
    same_bits(F.pad(e, (9, 8), value=1.0), tF.pad(e, (9, 8), value=1.0), "pad rows of an empty dim")
    assert F.pad(torch.empty((0, 40), dtype=dt, device=DEV), (3, 3)).shape == (0, 46)


# ---- flip / roll / tile / triu / tril -----------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_flip_roll_tile_tri(dt):
    x = make((5, 6, 7), dt, "maps", dt)
    xt = x.transpose(0, 2)
    for dims in [(0,), (2,), (0, 1, 2), (-1, 0)]:
        same_bits(F.flip(x, dims), ref_op(lambda t: torch.flip(t, dims), x), f"flip {dims}")
    same_bits(F.flip(xt, (1,)), ref_op(lambda t: torch.flip(t, (1,)), xt), "flip strided")
    for shifts, dims in [(2, 0), ((1, -3), (1, 2)), (13, 2), (-4, None), ((0, 6), (0, 1))]:
        same_bits(F.roll(x, shifts, dims), ref_op(lambda t: torch.roll(t, shifts, dims), x), f"roll {shifts} {dims}")
    same_bits(F.roll(xt, 3, 1), ref_op(lambda t: torch.roll(t, 3, 1), xt), "roll strided")
    for reps in [(2, 1, 3), (1, 1, 1), (2, 2), (3, 1, 1, 2)]:
        same_bits(F.tile(x, reps), ref_op(lambda t: torch.tile(t, reps), x), f"tile {reps}")
    for reps in [(2, 1, 3), (1, 1, 1), (3, 1, 1, 2), (0, 2, 1)]:
        same_bits(F.repeat(xt, *reps), ref_op(lambda t: t.repeat(*reps), xt), f"repeat {reps}")
    same_bits(F.repeat(x, [2, 1, 1]), ref_op(lambda t: t.repeat([2, 1, 1]), x), "repeat list")
    with pytest.raises(RuntimeError, match="repeat"):
        F.repeat(x, 2, 2)
    col = x[:, :1, :]  # [5, 1, 7], dim 1 broadcast
    for size in [(5, 4, 7), (2, 5, 3, 7), (-1, 6, -1)]:
        same_bits(F.expand_copy(col, size), ref_op(lambda t: t.expand(size).contiguous(), col), f"expand_copy {size}")
        assert F.expand(col, *size).data_ptr() == col.data_ptr(), "expand is a view"
    for r, d in [(3, 0), (1, 1), (2, -1), (0, 1), (4, None)]:
        same_bits(F.repeat_interleave(xt, r, d), ref_op(lambda t: torch.repeat_interleave(t, r, d), xt),
                  f"repeat_interleave {r} {d}")
    for k, dims in [(1, (0, 1)), (2, (0, 2)), (3, (1, 2)), (-1, (2, 0)), (0, (0, 1))]:
        same_bits(F.rot90(xt, k, dims), ref_op(lambda t: torch.rot90(t, k, dims), xt), f"rot90 {k} {dims}")
    for k in [-2, 0, 1, 9]:
        same_bits(F.triu(x, k), ref_op(lambda t: torch.triu(t, k), x), f"triu {k}")
        same_bits(F.tril(xt, k), ref_op(lambda t: torch.tril(t, k), xt), f"tril strided {k}")


@pytest.mark.sanitizer
def test_maps_backward():
    x = randf((4, 5, 6), torch.float32, "mapbw").requires_grad_()
    for f, r in [(lambda t: F.flip(t, (0, 2)), lambda t: torch.flip(t, (0, 2))),
                 (lambda t: F.roll(t, (2, -1), (1, 2)), lambda t: torch.roll(t, (2, -1), (1, 2))),
                 (lambda t: F.triu(t, 1), lambda t: torch.triu(t, 1)),
                 (lambda t: F.tile(t, (2, 1, 3)), lambda t: torch.tile(t, (2, 1, 3))),
                 (lambda t: F.repeat(t, 2, 1, 1, 3), lambda t: t.repeat(2, 1, 1, 3)),
                 (lambda t: F.expand_copy(t[:, :1], (4, 3, 6)), lambda t: t[:, :1].expand(4, 3, 6).contiguous()),
                 (lambda t: F.repeat_interleave(t, 3, 1), lambda t: torch.repeat_interleave(t, 3, 1)),
                 (lambda t: F.repeat_interleave(t, idx([1, 0, 2, 3, 1], torch.int64), 1),
                  lambda t: torch.repeat_interleave(t, idx([1, 0, 2, 3, 1], torch.int64), 1)),
                 (lambda t: F.rot90(t, 1, (0, 2)), lambda t: torch.rot90(t, 1, (0, 2)))]:
        y, ry = f(x), r(x)
        g = randf(ry.shape, torch.float32, "mapbw-g", ry.shape)
        (gx,) = torch.autograd.grad(y, x, g)
        (rx,) = torch.autograd.grad(ry, x, g)
        torch.testing.assert_close(gx, rx)


# ---- gather family -----------------------------------------------------------------------------------
@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_gather_index_select_take(dt, it):
    x = make((6, 9, 5), dt, "gather", dt)
    for dim in range(3):
        shape = [4, 7, 3]
        shape[dim] = 11  # more entries than the dim: duplicates
        index = rand_index(shape, x.shape[dim], it, "gi", dim)
        same_bits(F.gather(x, dim, index), ref_op(lambda t: torch.gather(t, dim, index.long()), x), f"gather {dim}")
        sel = rand_index((13,), x.shape[dim], it, "si", dim)
        same_bits(F.index_select(x, dim, sel), ref_op(lambda t: torch.index_select(t, dim, sel.long()), x),
                  f"index_select dim {dim}")
        xt = x.transpose(0, 2)
        st = sel.clamp(max=xt.shape[dim] - 1)
        same_bits(F.index_select(xt, dim, st), ref_op(lambda t: torch.index_select(t, dim, st.long()), xt),
                  f"index_select strided dim {dim}")
    t_idx = rand_index((6, 4, 1), 9, it, "take")
    same_bits(F.take_along_dim(x, t_idx, 1), ref_op(lambda t: torch.take_along_dim(t, t_idx.long(), 1), x),
              "take_along_dim")
    same_bits(F.take_along_dim(x, t_idx[:1], 1), ref_op(lambda t: torch.take_along_dim(t, t_idx[:1].long(), 1), x),
              "take_along_dim broadcast")
    flat = rand_index((17,), x.numel(), it, "takeflat")
    same_bits(F.take_along_dim(x, flat), ref_op(lambda t: torch.take_along_dim(t, flat.long()), x),
              "take_along_dim flat")


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_embedding_forward(dt, it):
    w = make((50, 24), dt, "emb", dt)
    ids = rand_index((3, 7), 50, it, "ids")
    same_bits(F.embedding(ids, w), ref_op(lambda t: t[ids.long()], w), "embedding")
    ws = w[:, 1:18]
    same_bits(F.embedding(ids, ws), ref_op(lambda t: t[ids.long()], ws), "embedding strided rows")
    same_bits(F.embedding(ids[:0], w), ref_op(lambda t: t[ids[:0].long()], w), "embedding empty")
    if dt == torch.float32:
        same_bits(F.embedding(ids, w), tF.embedding(ids.long(), w), "embedding vs F.embedding")


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32, torch.uint8, torch.complex128], ids=str)
def test_gather_rows_and_staged(dt, it):
    """The row gather (a warp per embedding / index_select row of >= 32 words) and the staged
    gather (torch.gather along a unit-stride source dim through shared memory): odd sizes,
    strided and misaligned views, duplicates, and out-of-range indices."""
    w = make((50, 640), dt, "grows", dt)  # >= 32 16-byte words a row for every dtype here
    ids = rand_index((3, 7), 50, it, "grows-ids")
    same_bits(F.embedding(ids, w), ref_op(lambda t: t[ids.long()], w), "embedding rows")
    ws = make((50, 40), dt, "grows-s", dt)[:, 1:38]  # rows of 37, misaligned by one element
    same_bits(F.embedding(ids, ws), ref_op(lambda t: t[ids.long()], ws), "embedding strided rows")
    sel = rand_index((29,), 50, it, "grows-sel")
    same_bits(F.index_select(w, 0, sel), ref_op(lambda t: torch.index_select(t, 0, sel.long()), w), "index_select rows")
    sku = BI.index_sku("embedding", {"x": w, "index": ids, "out": F.embedding(ids, w)})
    assert "gather-rows" in sku, sku
    with pytest.raises(IndexError):
        F.embedding(idx([1, 50], it), w)

    for xs, ishape, dim in [((5, 100), (5, 300), 1), ((4, 37), (3, 1100), 1), ((2, 4096), (2, 1030), 1),
                            ((6, 4, 50), (5, 3, 200), 2)]:
        x = make(xs, dt, "gstaged", xs, dt)
        index = rand_index(ishape, xs[dim], it, "gstaged-i", xs)
        same_bits(F.gather(x, dim, index), ref_op(lambda t: torch.gather(t, dim, index.long()), x),
                  f"gather staged {xs}")
    x = make((5, 100), dt, "gstaged-v", dt)
    index = rand_index((300, 5), 100, it, "gstaged-vi").t()  # a strided index
    ref = ref_op(lambda t: torch.gather(t, 1, index.long()), x)
    same_bits(F.gather(x, 1, index), ref, "gather staged strided index")
    out = shifted_empty((5, 300), dt, 1)  # a misaligned output
    BI._run("gather", {"x": x, "index": index.contiguous(), "out": out}, {"dim": 1})
    same_bits(out, ref, "gather staged misaligned output")
    xt = make((100, 5), dt, "gstaged-t", dt).t()  # dim 0 of this view is the unit-stride one
    index0 = rand_index((40, 100), 5, it, "gstaged-t-i")
    same_bits(F.gather(xt, 0, index0), ref_op(lambda t: torch.gather(t, 0, index0.long()), xt), "gather staged view")
    sku = BI.index_sku("gather", {"x": x, "index": index.contiguous(), "out": out}, {"dim": 1})
    assert "gather-staged" in sku, sku
    bad = index.contiguous().clone()
    bad[2, 7] = 100
    with pytest.raises(IndexError):
        F.gather(x, 1, bad)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
def test_embedding_backward(dt, it):
    w = make((40, 64), dt, "embbw", dt).requires_grad_()
    ids = rand_index((9, 31), 40, it, "embbw-ids")  # many duplicates
    g = make((9, 31, 64), dt, "embbw-g", dt, lo=-3, hi=4)
    for padding_idx in (None, 3):
        (gw,) = torch.autograd.grad(F.embedding(ids, w, padding_idx=padding_idx), w, g)
        (rw,) = torch.autograd.grad(tF.embedding(ids.long(), w, padding_idx=padding_idx), w, g)
        same_bits(gw, rw, f"embedding backward padding_idx={padding_idx}")  # exact: small integers
    # deterministic: random floats, repeated runs are bit-identical
    gf = randf((9, 31, 64), dt, "embbw-gf")
    runs = [torch.autograd.grad(F.embedding(ids, w), w, gf)[0] for _ in range(3)]
    for r in runs[1:]:
        same_bits(r, runs[0], "embedding backward repeatability")
    # vs an f64 reference rounded once: sums in f32 (f64) then one rounding, as torch's CUDA kernel
    wd = w.detach().double().requires_grad_()
    (rw,) = torch.autograd.grad(tF.embedding(ids.long(), wd), wd, gf.double())
    rtol = {torch.bfloat16: 1.6e-2, torch.float16: 1e-3, torch.float32: 1.3e-6, torch.float64: 1e-7}[dt]
    torch.testing.assert_close(runs[0], rw.to(dt), rtol=rtol, atol=1e-5)


# ---- embedding max_norm / scale_grad_by_freq, the fused embedding_bag ------------------------------------
TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7),
       torch.float16: dict(rtol=1e-3, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5)}
# Gradients summed over many ids in another order than the reference's: the atomic path adds in
# the storage dtype (f16 / bf16 round every add), the sorted one sums a run in f32 and rounds once.
SUM_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
           torch.float16: dict(rtol=5e-3, atol=5e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}
UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64,
          torch.float64: torch.float64}


@pytest.mark.parametrize("p", [1.0, 2.0])
@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_embedding_max_norm_vs_torch(dt, it, p):
    """torch.embedding_renorm_ through F.embedding(max_norm=...): the referenced rows whose norm
    exceeds max_norm are rescaled in place (each once, duplicates included), the others and the
    unreferenced rows are untouched; then the lookup and its backward (padding_idx too)."""
    w0 = randf((50, 24), dt, "renorm", dt) * 2
    ids = rand_index((6, 11), 50, it, "renorm-ids")  # duplicates
    for padding_idx in (None, 3):
        w, wr = w0.clone().requires_grad_(), w0.clone().requires_grad_()
        got = F.embedding(ids, w, padding_idx=padding_idx, max_norm=1.0, norm_type=p)
        ref = tF.embedding(ids.long(), wr, padding_idx=padding_idx, max_norm=1.0, norm_type=p)
        torch.testing.assert_close(w.detach(), wr.detach(), **TOL[dt], msg=lambda m: f"renormed weight: {m}")
        untouched = torch.ones(50, dtype=torch.bool, device=DEV)
        untouched[ids.long().reshape(-1)] = False
        same_bits(w.detach()[untouched], w0[untouched], "rows no id references stay as they were")
        torch.testing.assert_close(got, ref, **TOL[dt])
        g = randf(got.shape, dt, "renorm-g")
        (gw,) = torch.autograd.grad(got, w, g)
        (rw,) = torch.autograd.grad(ref, wr, g)
        torch.testing.assert_close(gw, rw, **SUM_TOL[dt])


@pytest.mark.parametrize("p", [3.0, float("inf"), 0.5])
@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=str)
def test_embedding_renorm_other_norms(dt, p):
    """p other than 1, 2: the norm of |x| (torch's CPU definition; its CUDA kernel drops the |.|
    there, so the reference is torch on the CPU)."""
    w0 = randf((40, 17), dt, "renorm-p", p)
    ids = rand_index((30,), 40, torch.int64, "renorm-p-ids")
    w = w0.clone()
    assert F.embedding_renorm_(w, ids, 0.8, p) is w
    ref = torch.embedding_renorm_(w0.cpu().clone(), ids.cpu(), 0.8, p)
    torch.testing.assert_close(w.cpu(), ref, **TOL[dt])
    assert not torch.equal(w, w0), "degenerate case: nothing was rescaled"


def test_embedding_renorm_errors_and_edges():
    w = randf((10, 4), torch.float32, "renorm-e")
    keep = w.clone()
    with pytest.raises(IndexError):
        F.embedding_renorm_(w, idx([1, 10], torch.int64), 1.0, 2.0)
    same_bits(w, keep, "an id out of range: no row rescaled, row 1 (norm > 1) included")
    F.embedding_renorm_(w, idx([], torch.int64), 0.1, 2.0)  # no ids: nothing happens
    same_bits(w, keep, "no ids")
    F.embedding_renorm_(w, idx([2, 2, 2], torch.int32), 1e9, 2.0)  # nothing exceeds max_norm
    same_bits(w, keep, "max_norm above every norm")


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_embedding_scale_grad_by_freq(dt, it):
    w = randf((40, 48), dt, "sgf", dt).requires_grad_()
    ids = rand_index((9, 31), 40, it, "sgf-ids")
    g = randf((9, 31, 48), dt, "sgf-g")
    for padding_idx in (None, 5):
        (gw,) = torch.autograd.grad(F.embedding(ids, w, padding_idx=padding_idx, scale_grad_by_freq=True), w, g)
        (rw,) = torch.autograd.grad(tF.embedding(ids.long(), w, padding_idx=padding_idx, scale_grad_by_freq=True), w,
                                    g)
        torch.testing.assert_close(gw, rw, **SUM_TOL[dt])
    runs = [torch.autograd.grad(F.embedding(ids, w, scale_grad_by_freq=True), w, g)[0] for _ in range(2)]
    same_bits(runs[0], runs[1], "scale_grad_by_freq repeatability")


BAG_CASES = [  # (name, ids shape or L, offsets, kwargs)
    ("empty-bag", 25, [0, 3, 3, 10, 24], {}),
    ("last-offset", 25, [0, 4, 9, 25], dict(include_last_offset=True)),
    ("padding", 25, [0, 5, 11], dict(padding_idx=2)),
    ("padding-neg", 25, [0, 5, 11, 11], dict(padding_idx=-1)),
    ("one-bag", 40, [0], {}),
    ("trailing-empty", 25, [0, 25, 25], {}),
    ("2d", (6, 4), None, {}),
    ("2d-padding", (7, 5), None, dict(padding_idx=0)),
    ("2d-last-offset", (6, 4), None, dict(include_last_offset=True)),
    ("no-ids", 0, [0, 0, 0], {}),
]


def _bag_inputs(case, it, dt, n=30, mode="sum", with_psw=False):
    name, shape, offs, kw = case
    shape = (shape,) if isinstance(shape, int) else shape
    ids = rand_index(shape, n, it, "bag-ids", name)
    if kw.get("padding_idx") is not None and ids.numel():
        ids.view(-1)[::4] = kw["padding_idx"] % n  # padding entries, some bags entirely of them possible
    offsets = idx(offs, it) if offs is not None else None
    psw = randf(shape, dt, "bag-psw", name) if with_psw else None
    return ids, offsets, psw, dict(kw)


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_vs_torch(mode, dt, it):
    """The fused kernel, forward and backward, vs torch on the inputs upcast (f32 for f16 / bf16,
    f64 for f32) and cast back: empty bags, include_last_offset, padding_idx (left out of bags and
    of mean's count), 2-D input, no ids, per_sample_weights (sum), int32 and int64 ids and
    offsets, every float dtype, rows of 16-byte vectors (D = 64) and not (D = 7)."""
    up = UPCAST[dt]
    for D in (64, 7):
        w = randf((30, D), dt, "bag-w", D).requires_grad_()
        wu = w.detach().to(up).requires_grad_()
        for case in BAG_CASES:
            for with_psw in ([False, True] if mode == "sum" else [False]):
                ids, offsets, psw, kw = _bag_inputs(case, it, dt, mode=mode, with_psw=with_psw)
                psw_ours = psw.clone().requires_grad_() if psw is not None else None
                psw_ref = psw.to(up).requires_grad_() if psw is not None else None
                what = f"{mode} D={D} {case[0]} psw={with_psw}"
                got = F.embedding_bag(ids, w, offsets, mode=mode, per_sample_weights=psw_ours, **kw)
                ref = tF.embedding_bag(ids.long(), wu, offsets.long() if offsets is not None else None, mode=mode,
                                       per_sample_weights=psw_ref, **kw)
                assert got.shape == ref.shape, what
                if mode == "max":  # the max of upcast values is exact
                    same_bits(got, ref.detach().to(dt), f"forward {what}")
                else:
                    torch.testing.assert_close(got, ref.detach().to(dt), **TOL[dt],
                                               msg=lambda m: f"forward {what}: {m}")
                if not got.numel():
                    continue
                g = randf(ref.shape, dt, "bag-g", what)
                inputs = (w,) + ((psw_ours,) if psw is not None else ())
                rinputs = (wu,) + ((psw_ref,) if psw is not None else ())
                grads = torch.autograd.grad(got, inputs, g)
                rgrads = torch.autograd.grad(ref, rinputs, g.to(up))
                for a, b, n in zip(grads, rgrads, ("weight", "per_sample_weights")):
                    torch.testing.assert_close(a, b.to(dt), **SUM_TOL[dt], msg=lambda m: f"{n} grad {what}: {m}")


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
def test_embedding_bag_max_indices(it):
    """max's argmax ids (torch's max_indices, the first maximum per feature; -1 for empty bags)."""
    w = make((20, 16), torch.float32, "bagmax", lo=-3, hi=3)  # many ties
    ids = rand_index((30,), 20, it, "bagmax-ids")
    offsets = idx([0, 4, 4, 17, 29], it)
    out, mi = BI._embedding_bag_fw(w, ids, offsets, None, "max", False, 3)
    r_out, _, _, r_mi = torch.embedding_bag(w, ids.long(), offsets.long(), False, 2, False, None, False, 3)
    same_bits(out, r_out, "max values")
    same_bits(mi.long(), r_mi.long(), "max indices")
    assert mi.dtype == ids.dtype


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_deterministic(mode, dt):
    """deterministic=True: the sorted backward (max: the sorted scatter), bit-identical across runs
    and close to the atomic path (f16 / bf16 take the sorted path either way: their own atomics
    would round every add, ~15 a row here); both, and scale_grad_by_freq (sorted always), vs
    torch on the inputs upcast (torch's bf16 max backward itself adds in bf16)."""
    up = UPCAST[dt]
    narrow = dt in (torch.float16, torch.bfloat16)
    w = randf((200, 96), dt, "bagdet").requires_grad_()
    wu = w.detach().to(up).requires_grad_()
    ids = rand_index((3000,), 200, torch.int64, "bagdet-ids")  # ~15 per row: real reductions
    offsets = torch.arange(0, 3000, 12, device=DEV)
    g = randf((250, 96), dt, "bagdet-g")
    runs = [torch.autograd.grad(F.embedding_bag(ids, w, offsets, mode=mode, deterministic=True), w, g)[0]
            for _ in range(3)]
    for r in runs[1:]:
        same_bits(r, runs[0], f"{mode} deterministic backward")
    (atomic,) = torch.autograd.grad(F.embedding_bag(ids, w, offsets, mode=mode, deterministic=False), w, g)
    if narrow:
        same_bits(atomic, runs[0], f"{mode} {dt}: the sorted path without deterministic=True too")
    else:
        torch.testing.assert_close(atomic, runs[0], **SUM_TOL[dt])
    (ref,) = torch.autograd.grad(tF.embedding_bag(ids, wu, offsets, mode=mode), wu, g.to(up))
    torch.testing.assert_close(runs[0], ref.to(dt), **SUM_TOL[dt])
    if mode != "max":
        (got,) = torch.autograd.grad(F.embedding_bag(ids, w, offsets, mode=mode, scale_grad_by_freq=True), w, g)
        (ref,) = torch.autograd.grad(tF.embedding_bag(ids, wu, offsets, mode=mode, scale_grad_by_freq=True), wu,
                                     g.to(up))
        torch.testing.assert_close(got, ref.to(dt), **SUM_TOL[dt])
    probe = {"x": g, "index": ids, "offsets": offsets, "out": torch.empty_like(w),
             **({"max_indices": torch.empty(250, 96, dtype=torch.int64, device=DEV)} if mode == "max" else {})}
    sku = BI.index_sku("embedding_bag", probe, {"mode": mode}, backward=True, deterministic=True)
    assert "sorted" in sku, sku
    sku = BI.index_sku("embedding_bag", probe, {"mode": mode}, backward=True, deterministic=False)
    assert ("sorted" if narrow else "atomic") in sku, sku


def test_embedding_bag_max_norm_strided_and_errors():
    """max_norm renorms before the bags (weight changed in place as torch's); strided weight and
    non-contiguous ids; out-of-range ids and bad offsets raise IndexError."""
    w0 = randf((30, 40), torch.float32, "bagmn") * 2
    ids = rand_index((25,), 30, torch.int64, "bagmn-ids")
    offsets = idx([0, 5, 9, 20], torch.int64)
    w, wr = w0.clone(), w0.clone()
    torch.testing.assert_close(F.embedding_bag(ids, w, offsets, max_norm=1.0),
                               tF.embedding_bag(ids, wr, offsets, max_norm=1.0))
    torch.testing.assert_close(w, wr)
    big = randf((30, 50), torch.float32, "bagmn-s")
    ws = big[:, 3:43]  # rows 50 apart, misaligned: the scalar path
    ids2 = rand_index((50,), 30, torch.int64, "bagmn-ids2")[::2]
    torch.testing.assert_close(F.embedding_bag(ids2, ws, offsets, mode="sum"),
                               tF.embedding_bag(ids2, ws, offsets, mode="sum"))
    with pytest.raises(IndexError):
        F.embedding_bag(idx([1, 30, 2], torch.int64), w0, idx([0, 1], torch.int64))
    with pytest.raises(IndexError):
        F.embedding_bag(idx([1, 2, 2], torch.int64), w0, idx([0, 2, 1], torch.int64))  # decreasing offsets
    with pytest.raises(IndexError):
        F.embedding_bag(idx([1, 2, 2], torch.int64), w0, idx([0, 7], torch.int64))  # past the ids
    with pytest.raises(ValueError):
        F.embedding_bag(idx([1, 2], torch.int64), w0, idx([0], torch.int64), mode="max", scale_grad_by_freq=True)
    with pytest.raises(NotImplementedError):
        F.embedding_bag(idx([1, 2], torch.int64), w0, idx([0], torch.int64), mode="mean",
                        per_sample_weights=randf((2,), torch.float32, "x"))


# ---- meshgrid, tril/triu_indices -------------------------------------------------------------------------
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    a = make((5,), torch.float32, "mg-a")
    b = make((3,), torch.float32, "mg-b")
    c = make((), torch.float32, "mg-c")
    e = make((0,), torch.float32, "mg-e")
    for ts in [(a,), (a, b), (a, b, c), (c, a, b), (a, e, b), (a[::2], b)]:
        got = F.meshgrid(*ts, indexing=indexing)
        ref = torch.meshgrid(*ts, indexing=indexing)
        assert len(got) == len(ref)
        for x, y in zip(got, ref):
            assert x.shape == y.shape, (x.shape, y.shape)
            if y.numel():  # expanded views, as torch's
                assert x.stride() == y.stride(), (x.stride(), y.stride())
            same_bits(F.contiguous(x), y.contiguous(), f"meshgrid {indexing} through the copy kernel")
    assert F.meshgrid([a, b], indexing=indexing)[0].shape == torch.meshgrid([a, b], indexing=indexing)[0].shape
    x = randf((4,), torch.float64, "mg-x").requires_grad_()
    y = randf((6,), torch.float64, "mg-y").requires_grad_()
    gx, gy = F.meshgrid(x, y, indexing=indexing)
    w = randf(gx.shape, torch.float64, "mg-w")
    got = torch.autograd.grad((gx * w + gy * w * w).sum(), (x, y))
    rx, ry = torch.meshgrid(x, y, indexing=indexing)
    ref = torch.autograd.grad((rx * w + ry * w * w).sum(), (x, y))
    for p, q in zip(got, ref):
        torch.testing.assert_close(p, q)
    with pytest.raises(RuntimeError):
        F.meshgrid(a, make((2, 2), torch.float32, "mg-2d"))
    with pytest.raises(RuntimeError):
        F.meshgrid(a, b, indexing="yx")


@pytest.mark.parametrize("dt", INDEX_DTYPES, ids=str)
def test_tril_triu_indices(dt):
    sizes = [(0, 0), (0, 5), (5, 0), (1, 1), (3, 3), (4, 7), (7, 4), (13, 29), (129, 33), (1000, 700)]
    for row, col in sizes:
        for offset in sorted({0, 1, -1, 2, -3, col, -row, col + 5, -row - 5, col - 1, 1 - row}):
            for name in ("tril_indices", "triu_indices"):
                got = getattr(F, name)(row, col, offset, dtype=dt)
                ref = getattr(torch, name)(row, col, offset, dtype=dt, device=DEV)
                assert got.dtype == dt and got.device.type == "cuda"
                same_bits(got, ref, f"{name}({row}, {col}, {offset})")
    with pytest.raises(RuntimeError):
        F.tril_indices(-1, 3)
    with pytest.raises(RuntimeError):
        F.triu_indices(3, 3, dtype=torch.float32)


@pytest.mark.slow
def test_tril_indices_past_2_31_pairs():
    """A triangle of ~2.45e9 pairs (int32 values, int64 positions): the closed-form row in double,
    corrected in integers, stays exact far from the origin."""
    free, _ = torch.cuda.mem_get_info()
    if free < 45 * (1 << 30):
        pytest.skip("needs 45 GiB free")
    for name, offset in (("tril_indices", 17), ("triu_indices", -17)):
        got = getattr(F, name)(70000, 70000, offset, dtype=torch.int32)
        ref = getattr(torch, name)(70000, 70000, offset, dtype=torch.int32, device=DEV)
        assert got.shape[1] > 2**31
        assert torch.equal(got, ref), name
        del got, ref


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_diag_take_put_one_hot_dynamic_slice(dt):
    x = make((5, 7, 6), dt, "misc", dt)
    for off, d1, d2 in [(0, 0, 1), (2, 1, 2), (-1, 2, 0)]:
        same_bits(F.diagonal(x, off, d1, d2), ref_op(lambda t: torch.diagonal(t, off, d1, d2).contiguous(), x),
                  f"diagonal {off}")
        same_bits(F.diag_embed(x, off, d1, d2), ref_op(lambda t: torch.diag_embed(t, off, d1, d2), x),
                  f"diag_embed {off}")
    v = x[0, 0]
    same_bits(F.diag(v, 1), ref_op(lambda t: torch.diag(t, 1), v), "diag 1-d")
    same_bits(F.diag(x[0], -1), ref_op(lambda t: torch.diag(t, -1), x[0]), "diag 2-d")
    index = rand_index((3, 4), x.numel(), torch.int64, "take") - x.numel() // 2  # negatives wrap
    same_bits(F.take(x, index), ref_op(lambda t: torch.take(t, index), x), "take")
    src = make((3, 4), dt, "put-src", dt)
    uniq = torch.randperm(x.numel(), generator=gen("put"))[:12].view(3, 4).to(DEV) - 10
    same_bits(F.put(x, uniq, src), ref_op(lambda t, s: torch.put(t, uniq, s), x, src), "put")
    if dt in (torch.float32, torch.int64):
        same_bits(F.put(x, index, src, accumulate=True), torch.put(x, index, src, accumulate=True), "put accumulate")
    sizes = (2, 7, 3)
    for starts in [(1, 0, 2), (4, 3, 9), (-3, 0, 0), (-9, 0, 0)]:
        # JAX: a negative start counts from the end once (lax._dynamic_slice_indices), then clamps
        first = [min(max(s + x.shape[d] if s < 0 else s, 0), x.shape[d] - sizes[d]) for d, s in enumerate(starts)]
        window = tuple(slice(f, f + n) for f, n in zip(first, sizes))
        ref = ref_op(lambda t: t[window].contiguous(), x)
        same_bits(F.dynamic_slice(x, starts, sizes), ref, f"dynamic_slice {starts}")
        same_bits(F.dynamic_slice(x, torch.tensor(starts, device=DEV), sizes), ref, f"dynamic_slice device {starts}")
        upd = make(sizes, dt, "dus", starts, dt)
        want = x.clone()
        want[window] = upd
        same_bits(F.dynamic_update_slice(x, upd, torch.tensor(starts)), want, f"dynamic_update_slice {starts}")


@pytest.mark.sanitizer
def test_one_hot_and_misc_backward():
    labels = rand_index((4, 5), 7, torch.int64, "oh")
    same_bits(F.one_hot(labels, 9), tF.one_hot(labels, 9), "one_hot")
    same_bits(F.one_hot(labels), tF.one_hot(labels), "one_hot inferred classes")
    with pytest.raises(IndexError):
        F.one_hot(labels, 3)
    x = randf((4, 6), torch.float64, "misc-bw").requires_grad_()
    for f, r in [(lambda t: F.diag_embed(t, 1), lambda t: torch.diag_embed(t, 1)),
                 (lambda t: F.diagonal(t, 1), lambda t: torch.diagonal(t, 1)),
                 (lambda t: F.take(t, idx([[0, 5], [-1, 5]], torch.int64)),
                  lambda t: torch.take(t, idx([[0, 5], [-1, 5]], torch.int64)))]:
        y, ry = f(x), r(x)
        g = randf(ry.shape, torch.float64, "misc-bw-g", ry.shape)
        torch.testing.assert_close(torch.autograd.grad(y, x, g)[0], torch.autograd.grad(ry, x, g)[0])


# ---- scatter family ------------------------------------------------------------------------------------
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ADD_DTYPES, ids=str)
def test_scatter_add_index_add(dt, it, det):
    x = make((6, 9, 5), dt, "sa", dt, lo=-8, hi=8)
    for dim in range(3):
        shape = [4, 7, 3]
        shape[dim] = 23
        index = rand_index(shape, x.shape[dim], it, "sai", dim)
        src = make(shape, dt, "sas", dim, dt, lo=-4, hi=5)
        same_bits(F.scatter_add(x, dim, index, src, deterministic=det),
                  torch.scatter_add(x, dim, index.long(), src), f"scatter_add dim {dim}")
        sel = rand_index((29,), x.shape[dim], it, "iai", dim)
        sshape = list(x.shape)
        sshape[dim] = 29
        s2 = make(sshape, dt, "ias", dim, dt, lo=-4, hi=5)
        same_bits(F.index_add(x, dim, sel, s2, deterministic=det), torch.index_add(x, dim, sel.long(), s2),
                  f"index_add dim {dim}")
        if dt.is_floating_point:
            same_bits(F.index_add(x, dim, sel, s2, alpha=2, deterministic=det),
                      torch.index_add(x, dim, sel.long(), s2, alpha=2), f"index_add alpha dim {dim}")
    xt = x.transpose(0, 2)  # strided self and source
    sel = rand_index((12,), xt.shape[1], it, "iat")
    s3 = make((5, 12, 6), dt, "iat-s", dt, lo=-4, hi=5).transpose(0, 2).contiguous().transpose(0, 2)
    same_bits(F.index_add(xt, 1, sel, s3, deterministic=det), torch.index_add(xt, 1, sel.long(), s3),
              "index_add strided")


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_scatter_index_copy_index_fill(dt, it):
    x = make((6, 9, 5), dt, "asg", dt)
    for dim in range(3):
        n = x.shape[dim]
        # unique destinations along dim on every line: the result is defined (no duplicate race)
        full = [4, 7, 3]
        full[dim] = n
        shape = list(full)
        shape[dim] = min(n, 4)
        index = torch.rand(full, generator=gen("asgp", dim)).argsort(dim).narrow(dim, 0, shape[dim])
        index = index.contiguous().to(it).to(DEV)
        src = make(shape, dt, "asg-src", dim, dt)
        for det in (False, True):
            same_bits(F.scatter(x, dim, index, src, deterministic=det),
                      ref_op(lambda t, s: torch.scatter(t, dim, index.long(), s), x, src), f"scatter dim {dim}")
        sel = torch.randperm(n, generator=gen("asgs", dim))[:min(n, 5)].to(it).to(DEV)
        sshape = list(x.shape)
        sshape[dim] = sel.numel()
        s2 = make(sshape, dt, "asg-s2", dim, dt)
        for det in (False, True):
            same_bits(F.index_copy(x, dim, sel, s2, deterministic=det),
                      ref_op(lambda t, s: torch.index_copy(t, dim, sel.long(), s), x, s2), f"index_copy dim {dim}")
        same_bits(F.index_fill(x, dim, sel, 0), ref_op(lambda t: torch.index_fill(t, dim, sel.long(), 0), x),
                  f"index_fill dim {dim}")
    if dt.is_floating_point and dt.itemsize > 1:
        same_bits(F.index_fill(x, 1, sel.clamp(max=8), 1.5), torch.index_fill(x, 1, sel.clamp(max=8).long(), 1.5),
                  "index_fill value")
        same_bits(F.scatter(x, 0, index.clamp(max=5), -2.0), torch.scatter(x, 0, index.clamp(max=5).long(), -2.0),
                  "scatter value")


def test_assign_duplicates_last_wins_when_deterministic():
    x = torch.zeros(5, 3, device=DEV)
    src = torch.arange(18, dtype=torch.float32, device=DEV).view(6, 3)
    ids = idx([1, 3, 1, 0, 3, 1], torch.int64)
    got = F.index_copy(x, 0, ids, src, deterministic=True)
    ref = x.clone()
    for k, i in enumerate(ids.tolist()):  # sequential semantics: the last duplicate lands
        ref[i] = src[k]
    same_bits(got, ref, "index_copy last duplicate wins")
    index = idx([[1, 1, 0], [1, 0, 0]], torch.int64)
    got = F.scatter(torch.zeros(2, 3, device=DEV), 0, index, src[:2], deterministic=True)
    ref = torch.zeros(2, 3, device=DEV)
    for r in range(2):
        for c in range(3):
            ref[index[r, c], c] = src[r, c]
    same_bits(got, ref, "scatter last duplicate wins")


@pytest.mark.sanitizer
def test_assign_backward():
    x = randf((6, 5), torch.float64, "asgbw").requires_grad_()
    src = randf((6, 5), torch.float64, "asgbw-s").requires_grad_()
    g = randf((6, 5), torch.float64, "asgbw-g")
    index = torch.stack([torch.randperm(6, generator=gen("asgbw-i", c)) for c in range(5)], 1).to(DEV)
    got = torch.autograd.grad(F.scatter(x, 0, index, src), (x, src), g)
    ref = torch.autograd.grad(torch.scatter(x, 0, index, src), (x, src), g)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    sel = idx([4, 0, 2], torch.int64)
    s2 = randf((3, 5), torch.float64, "asgbw-s2").requires_grad_()
    got = torch.autograd.grad(F.index_copy(x, 0, sel, s2), (x, s2), g)
    ref = torch.autograd.grad(torch.index_copy(x, 0, sel, s2), (x, s2), g)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    (gx,) = torch.autograd.grad(F.index_fill(x, 1, sel, 3.0), x, g)
    (rx,) = torch.autograd.grad(torch.index_fill(x, 1, sel, 3.0), x, g)
    torch.testing.assert_close(gx, rx)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=str)
def test_deterministic_scatter_is_bit_stable(dt):
    x = randf((100, 64), dt, "detx")
    ids = rand_index((20000,), 100, torch.int64, "detids")
    src = randf((20000, 64), dt, "dets")
    runs = [F.index_add(x, 0, ids, src, deterministic=True) for _ in range(4)]
    for r in runs[1:]:
        same_bits(r, runs[0], "index_add deterministic repeatability")
    ref = torch.index_add(x.double(), 0, ids, src.double()).to(dt)
    torch.testing.assert_close(runs[0], ref, rtol=1e-5 if dt == torch.float32 else 1.6e-2, atol=1e-3)
    sku = BI.index_sku("index_add", {"x": x, "index": ids, "src": src, "out": torch.empty_like(x)}, {"dim": 0},
                       deterministic=True)
    assert "scatter-sorted" in sku and " deterministic" in sku and "nondeterministic" not in sku, sku
    sku = BI.index_sku("index_add", {"x": x, "index": ids, "src": src, "out": torch.empty_like(x)}, {"dim": 0})
    assert "scatter-atomic" in sku and "nondeterministic" in sku, sku
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        again = F.index_add(x, 0, ids, src)  # the global flag selects the sorted path
    finally:
        torch.use_deterministic_algorithms(False)
    same_bits(again, runs[0], "index_add under torch.use_deterministic_algorithms")


@pytest.mark.sanitizer
def test_gather_index_select_backward():
    x = randf((7, 8, 9), torch.float64, "gbw").requires_grad_()
    index = rand_index((7, 20, 9), 8, torch.int64, "gbw-i")
    g = randf((7, 20, 9), torch.float64, "gbw-g")
    for det in (False, True):
        (gx,) = torch.autograd.grad(F.gather(x, 1, index, deterministic=det), x, g)
        (rx,) = torch.autograd.grad(torch.gather(x, 1, index), x, g)
        torch.testing.assert_close(gx, rx)
        sel = rand_index((15,), 9, torch.int32, "gbw-s")
        gs = randf((7, 8, 15), torch.float64, "gbw-gs")
        (gx,) = torch.autograd.grad(F.index_select(x, 2, sel, deterministic=det), x, gs)
        (rx,) = torch.autograd.grad(torch.index_select(x, 2, sel.long()), x, gs)
        torch.testing.assert_close(gx, rx)


@pytest.mark.sanitizer
def test_scatter_index_add_backward():
    x = randf((6, 5), torch.float64, "sbw").requires_grad_()
    src = randf((9, 5), torch.float64, "sbw-s").requires_grad_()
    ids = rand_index((9,), 6, torch.int64, "sbw-i")
    g = randf((6, 5), torch.float64, "sbw-g")
    got = torch.autograd.grad(F.index_add(x, 0, ids, src, alpha=3), (x, src), g)
    ref = torch.autograd.grad(torch.index_add(x, 0, ids, src, alpha=3), (x, src), g)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    index = rand_index((6, 5), 6, torch.int64, "sbw-si")
    src2 = randf((6, 5), torch.float64, "sbw-s2").requires_grad_()
    got = torch.autograd.grad(F.scatter_add(x, 0, index, src2), (x, src2), g)
    ref = torch.autograd.grad(torch.scatter_add(x, 0, index, src2), (x, src2), g)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


# ---- segment ops ------------------------------------------------------------------------------------------
def segment_sum_ref(data, ids, n):
    keep = (ids >= 0) & (ids < n)
    out = torch.zeros((n,) + tuple(data.shape[1:]), dtype=data.dtype, device=DEV)
    return out.index_add(0, ids[keep].long(), data[keep])


def segment_max_ref(data, ids, n, reduce="amax"):
    keep = (ids >= 0) & (ids < n)
    d, i = data[keep], ids[keep].long()
    if data.dtype.is_floating_point:
        init = float("-inf") if reduce == "amax" else float("inf")
    else:
        init = torch.iinfo(data.dtype).min if reduce == "amax" else torch.iinfo(data.dtype).max
    out = torch.full((n,) + tuple(data.shape[1:]), init, dtype=data.dtype, device=DEV)
    return out.scatter_reduce(0, i.view(-1, *([1] * (data.dim() - 1))).expand_as(d), d, reduce, include_self=True)


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ADD_DTYPES, ids=str)
def test_segment_sum_max(dt, it):
    data = make((300, 7, 3), dt, "seg", dt, lo=-9, hi=9)
    ids = rand_index((300,), 40, it, "seg-ids") - 2  # some negative ids, and 38..39 past num_segments
    n = 37
    for det in (False, True):
        same_bits(F.segment_sum(data, ids, n, deterministic=det), segment_sum_ref(data, ids, n), "segment_sum")
    same_bits(F.segment_max(data, ids, n), segment_max_ref(data, ids, n), "segment_max")
    same_bits(F.segment_min(data, ids, n), segment_max_ref(data, ids, n, "amin"), "segment_min")
    sorted_ids, _ = ids.sort()
    same_bits(F.segment_sum(data, sorted_ids, n, indices_are_sorted=True), segment_sum_ref(data, sorted_ids, n),
              "segment_sum sorted ids")
    assert F.segment_sum(data[:0], ids[:0], 5).shape == (5, 7, 3)
    big = torch.iinfo(dt).max if not dt.is_floating_point else float("inf")
    assert (F.segment_min(data[:0], ids[:0], 2) == big).all()


def test_segment_max_nan_and_empty():
    data = torch.tensor([[1.0], [float("nan")], [3.0], [-0.0], [0.0]], device=DEV)
    ids = idx([0, 0, 1, 3, 3], torch.int64)
    got = F.segment_max(data, ids, 4)
    assert torch.isnan(got[0]).all()
    assert got[1].item() == 3.0
    assert got[2].item() == float("-inf")
    assert got[3].item() == 0.0
    low = F.segment_min(data, ids, 4)
    assert torch.isnan(low[0]).all()
    assert low[1].item() == 3.0 and low[2].item() == float("inf") and low[3].item() == 0.0


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ADD_DTYPES, ids=str)
def test_segment_rows(dt, it):
    """The row kernel of the atomic scatter (slices of >= 8 elements): lane groups walk
    consecutive rows and combine runs of equal ids in registers (sorted ids), out-of-range ids
    dropped, empty segments keep the identity."""
    for shape, n in [((300, 64), 37), ((257, 13), 20), ((100, 8), 9), ((120, 5, 4), 7), ((64, 300), 5)]:
        data = make(shape, dt, "segrows", shape, dt, lo=-9, hi=9)
        ids = rand_index((shape[0],), n + 4, it, "segrows-ids", shape) - 2
        for sorted_ids in (False, True):
            sid = ids.sort()[0] if sorted_ids else ids
            same_bits(F.segment_sum(data, sid, n), segment_sum_ref(data, sid, n), f"segment_sum rows {shape}")
            same_bits(F.segment_max(data, sid, n), segment_max_ref(data, sid, n), f"segment_max rows {shape}")
            same_bits(F.segment_min(data, sid, n), segment_max_ref(data, sid, n, "amin"), f"segment_min rows {shape}")
    data = make((300, 64), dt, "segrows-sku", dt)
    ids = rand_index((300,), 37, it, "segrows-sku-ids")
    sku = BI.index_sku("segment_max", {"x": data, "index": ids, "out": torch.empty(37, 64, dtype=dt, device=DEV)},
                       {"num_segments": 37})
    assert "scatter-atomic-rows-vec16" in sku, sku  # dense rows of 16-byte vectors
    # Rows with a column stride (a transposed view) take the per-column row kernel.
    strided = make((64, 300), dt, "segrows-t", dt, lo=-9, hi=9).t()
    for sid in (ids, ids.sort()[0]):
        same_bits(F.segment_sum(strided, sid, 37), segment_sum_ref(strided, sid, 37), "segment_sum strided rows")
        same_bits(F.segment_max(strided, sid, 37), segment_max_ref(strided, sid, 37), "segment_max strided rows")
    sku = BI.index_sku("segment_max", {"x": strided, "index": ids, "out": torch.empty(37, 64, dtype=dt, device=DEV)},
                       {"num_segments": 37})
    assert "scatter-atomic-rows" in sku and "vec16" not in sku, sku
    empty = F.segment_max(data[:0], ids[:0], 3)
    lowest = float("-inf") if dt.is_floating_point else torch.iinfo(dt).min
    assert (empty == lowest).all()


@pytest.mark.sanitizer
@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.int32, torch.int64], ids=str)
def test_segment_many_rows(dt, it):
    """Many rows a segment (100-300; the bench's shape has 256): the row kernel's atomics pile onto
    few destinations. Results vs torch, with column counts that are not multiples of the lane
    groups, out-of-range ids dropped, empty segments at the identity, and index_add through the same
    row kernel (including -0 destinations receiving +0 sums)."""
    for shape, n in [((5000, 64), 37), ((4100, 13), 20), ((3000, 8), 9), ((5200, 2, 5), 40)]:
        data = make(shape, dt, "segpriv", shape, dt, lo=-9, hi=9)
        ids = rand_index((shape[0],), n + 4, it, "segpriv-ids", shape) - 2
        for sid in (ids, ids.sort()[0]):
            same_bits(F.segment_sum(data, sid, n), segment_sum_ref(data, sid, n), f"segment_sum many rows {shape}")
            same_bits(F.segment_max(data, sid, n), segment_max_ref(data, sid, n), f"segment_max many rows {shape}")
            same_bits(F.segment_min(data, sid, n), segment_max_ref(data, sid, n, "amin"),
                      f"segment_min many rows {shape}")
    x = make((37, 64), dt, "segpriv-x", dt)
    src = make((5000, 64), dt, "segpriv-src", dt, lo=-9, hi=9)
    index = rand_index((5000,), 37, it, "segpriv-index")
    same_bits(F.index_add(x, 0, index, src), x.index_add(0, index.long(), src), "index_add many rows")
    if dt.is_floating_point:  # -0 + (+0) contributions give +0, as torch
        z = torch.full((4, 8), -0.0, dtype=dt, device=DEV)
        zs = torch.zeros((512, 8), dtype=dt, device=DEV)
        zi = rand_index((512,), 4, it, "segpriv-zero")
        got = F.index_add(z, 0, zi, zs)
        assert not torch.signbit(got).any(), "-0 + (+0) must give +0"


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_segment_rows_nan_ties_and_zeros(dt):
    """NaN wins (positive NaN for max, NaN for min), ties and +-0 agree with torch's
    scatter_reduce amax / amin; random floats vs torch, sorted and unsorted ids."""
    data = randf((500, 40), dt, "segnan")
    data[7, 3] = float("nan")
    data[100:110, 5] = -0.0
    data[110:120, 5] = 0.0
    data[200:260, 9] = 1.25  # ties
    ids = rand_index((500,), 23, torch.int64, "segnan-ids")
    for sid in (ids, ids.sort()[0]):
        for op, red in (("segment_max", "amax"), ("segment_min", "amin")):
            got = getattr(F, op)(data, sid, 23)
            ref = segment_max_ref(data, sid, 23, red)
            torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{op}: {m}")
    got = F.segment_max(data, ids, 23)
    assert torch.isnan(got[int(ids[7]), 3])


@pytest.mark.sanitizer
def test_segment_rows_backward():
    data = make((200, 40), torch.float64, "segrowsbw", lo=-3, hi=3).requires_grad_()  # many ties
    ids = rand_index((200,), 12, torch.int64, "segrowsbw-ids")
    g = randf((12, 40), torch.float64, "segrowsbw-g")
    for op, red in (("segment_max", "amax"), ("segment_min", "amin")):
        (gx,) = torch.autograd.grad(getattr(F, op)(data, ids, 12), data, g)
        (rx,) = torch.autograd.grad(segment_max_ref(data, ids, 12, red), data, g)
        torch.testing.assert_close(gx, rx)


@pytest.mark.sanitizer
def test_segment_backward():
    data = make((200, 5), torch.float64, "segbw", lo=-3, hi=3).requires_grad_()  # many ties
    ids = rand_index((200,), 12, torch.int64, "segbw-ids")
    g = randf((12, 5), torch.float64, "segbw-g")
    (gx,) = torch.autograd.grad(F.segment_sum(data, ids, 12), data, g)
    (rx,) = torch.autograd.grad(segment_sum_ref(data, ids, 12), data, g)
    torch.testing.assert_close(gx, rx)
    (gx,) = torch.autograd.grad(F.segment_max(data, ids, 12), data, g)
    (rx,) = torch.autograd.grad(segment_max_ref(data, ids, 12), data, g)  # torch splits ties evenly too
    torch.testing.assert_close(gx, rx)
    (gx,) = torch.autograd.grad(F.segment_min(data, ids, 12), data, g)
    (rx,) = torch.autograd.grad(segment_max_ref(data, ids, 12, "amin"), data, g)
    torch.testing.assert_close(gx, rx)


# ---- out-of-range indices -----------------------------------------------------------------------------------
@pytest.mark.sanitizer
@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
def test_out_of_range_raises_and_leaves_inputs(it):
    x = make((5, 6), torch.float32, "oor")
    keep = x.clone()
    for bad in (6, -1, 1 << 20):
        with pytest.raises(IndexError):
            F.gather(x, 1, idx([[0, bad]] * 5, it))
        with pytest.raises(IndexError):
            F.index_select(x, 1, idx([1, bad], it))
        with pytest.raises(IndexError):
            F.embedding(idx([1, bad + 5 if bad >= 0 else bad], it), x)
        src = make((5, 2), torch.float32, "oor-s")
        with pytest.raises(IndexError):
            F.scatter_add(x, 1, idx([[0, bad]] * 5, it), src)
        with pytest.raises(IndexError):
            F.index_add(x, 1, idx([0, bad], it), src, deterministic=True)
        same_bits(x, keep, "input untouched")
        same_bits(src, make((5, 2), torch.float32, "oor-s"), "src untouched")
    # the valid part of an out-of-range scatter still lands, the bad element is dropped
    BI.check_indices = False
    try:
        got = F.index_add(x, 1, idx([0, 99], it), src)
    finally:
        BI.check_indices = True
    ref = x.clone()
    ref[:, 0] += src[:, 0]
    same_bits(got, ref, "index_add drops the out-of-range slice")


@pytest.mark.sanitizer
def test_deferred_index_checks():
    """check_indices = "deferred": a bad call does not synchronize or raise itself; the error raises
    at sync_errors() (or a later checked call once its copy landed), exactly once, and valid calls
    around it are unaffected."""
    w = make((10, 8), torch.float32, "defer-w")
    good = torch.tensor([0, 3, 9], device=DEV)
    bad = torch.tensor([0, 10, 2], device=DEV)
    BI.check_indices = "deferred"
    try:
        F.sync_errors()  # nothing pending from other tests
        same_bits(F.embedding(good, w), tF.embedding(good, w), "deferred: a valid call")
        y = F.embedding(bad, w)  # reported later
        with pytest.raises(IndexError, match="deferred"):
            F.sync_errors()
        F.sync_errors()  # raised once: the flag was reset
        same_bits(y[[0, 2]], w[[0, 2]], "deferred: the valid rows of the bad call")
        F.embedding(bad, w)
        torch.cuda.synchronize()  # the flag's copy lands: the next checked call raises
        with pytest.raises(IndexError, match="deferred"):
            F.index_select(w, 0, good)
        same_bits(F.index_select(w, 0, good), w[good], "deferred: calls after the error run")
        F.sync_errors()
    finally:
        BI.check_indices = True


# ---- sizes past 2^31 -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_copy_past_2_31_elements():
    free, _ = torch.cuda.mem_get_info()
    if free < 12 * (1 << 30):
        pytest.skip("needs 12 GiB free")
    x = torch.empty((1 << 16, (1 << 15) + 8), dtype=torch.uint8, device=DEV)
    x.view(-1)[::4099] = 7
    v = x[:, 3:(1 << 15) + 5]  # 2^31 elements, strided rows
    got = F.contiguous(v)
    assert torch.equal(got, v.contiguous())
    del got
    t = F.permute_copy(x[:4096], (1, 0))
    assert torch.equal(t, x[:4096].t().contiguous())
    del t
    # the register transpose (8-byte vectors of u8) and the long-row pad over all 2^31 + 2^19 elements
    t = F.permute_copy(x, (1, 0))
    assert torch.equal(t, x.t().contiguous()), "transpose past 2^31"
    del t
    padded = F.pad(x, (3, 5), value=9.0)
    assert torch.equal(padded, tF.pad(x, (3, 5), value=9.0)), "pad past 2^31"


@pytest.mark.slow
def test_segment_past_2_31_elements():
    """The segment row kernel's 64-bit-offset instantiation: [2^25 + 4096, 64] f32 (2^31 + 2^18
    elements; the source's reach is past 2^30, so the 32-bit one is not taken). Small integer
    values keep the sums exact in any order; ids r % 4096 make the reference a reshape."""
    free, _ = torch.cuda.mem_get_info()
    if free < 16 * (1 << 30):
        pytest.skip("needs 16 GiB free")
    n = 4096
    q = (1 << 25) // n + 1
    data = torch.randint(-8, 9, (q * n, 64), dtype=torch.int8, device=DEV).float()
    ids = torch.arange(q * n, device=DEV) % n
    grouped = data.view(q, n, 64)
    assert torch.equal(F.segment_max(data, ids, n), grouped.amax(0)), "segment_max"
    assert torch.equal(F.segment_min(data, ids, n), grouped.amin(0)), "segment_min"
    assert torch.equal(F.segment_sum(data, ids, n), grouped.sum(0)), "segment_sum"


# ---- scatter_reduce -----------------------------------------------------------------------------------------
RED_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8,
              torch.uint8, torch.int16]
REDUCES = ["sum", "prod", "mean", "amax", "amin"]


def red_data(shape, dt, reduce, *seed):
    """Values whose reductions are exact in dt: products of a few of {-2..2} (1..2 for uint8),
    small sums."""
    if reduce == "prod":
        return make(shape, dt, *seed, lo=1, hi=3) if dt == torch.uint8 else make(shape, dt, *seed, lo=-2, hi=3)
    return make(shape, dt, *seed, lo=0, hi=9) if dt == torch.uint8 else make(shape, dt, *seed, lo=-9, hi=9)


def red_index(shape, n, dim, it, *seed):
    """Random destinations along dim with few duplicates per destination (products stay small)."""
    g = gen(*seed)
    idx = torch.randint(0, max(n, 1), tuple(shape), generator=g, dtype=torch.int64)
    return idx.to(it).to(DEV)


def ref_scatter_reduce(x, dim, index, src, reduce, include_self):
    """torch's scatter_reduce in a wide dtype (exact here), cast back (integer means floor as
    torch's do on the integer type itself)."""
    if x.dtype.is_floating_point:
        w = torch.float64
        return x.to(w).scatter_reduce(dim, index.long(), src.to(w), reduce, include_self=include_self).to(x.dtype)
    return x.scatter_reduce(dim, index.long(), src, reduce, include_self=include_self)


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", RED_DTYPES, ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce(reduce, dt, it):
    x = red_data((6, 9, 5), dt, reduce, "sr", reduce, dt)
    for dim in range(3):
        shape = [4, 7, 3]
        shape[dim] = 8
        index = red_index(shape, x.shape[dim], dim, it, "sri", dim)
        src = red_data(shape, dt, reduce, "srs", reduce, dim, dt)
        for include_self in (True, False):
            ref = ref_scatter_reduce(x, dim, index, src, reduce, include_self)
            for det in (False, True):
                got = F.scatter_reduce(x, dim, index, src, reduce, include_self=include_self, deterministic=det)
                if reduce == "mean" and dt.is_floating_point:  # torch divides in the storage dtype
                    torch.testing.assert_close(got, ref, rtol=1e-2 if dt.itemsize == 2 else 1e-6, atol=1e-6)
                else:
                    same_bits(got, ref, f"scatter_reduce {reduce} include_self={include_self} dim {dim} det={det}")
    xt = x.transpose(0, 2)  # strided self and src
    index = red_index((5, 4, 6), 9, 1, it, "srt")
    src = red_data((5, 9, 6), dt, reduce, "srt-s", dt).transpose(0, 2).transpose(0, 2)
    got = F.scatter_reduce(xt, 1, index, src, reduce, include_self=False)
    ref = ref_scatter_reduce(xt, 1, index, src, reduce, False)
    if reduce == "mean" and dt.is_floating_point:
        torch.testing.assert_close(got, ref, rtol=1e-2 if dt.itemsize == 2 else 1e-6, atol=1e-6)
    else:
        same_bits(got, ref, f"scatter_reduce strided {reduce}")


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_scatter_reduce_extrema_nan_zero_and_untouched(dt):
    x = torch.tensor([[1.0, -0.0, 5.0, float("nan"), 2.0, 7.0]], device=DEV).to(dt)
    index = idx([[0, 1, 1, 2, 3, 3, 0]], torch.int64)
    src = torch.tensor([[3.0, 0.0, -1.0, 1.0, float("nan"), -float("inf"), 3.0]], device=DEV).to(dt)
    for reduce in ("amax", "amin"):
        for include_self in (True, False):
            got = F.scatter_reduce(x, 1, index, src, reduce, include_self=include_self)
            ref = x.scatter_reduce(1, index, src, reduce, include_self=include_self)
            torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)
    # include_self=False: positions no index names keep self bit for bit
    got = F.scatter_reduce(x, 1, idx([[0, 0]], torch.int64), src[:, :2], "mean", include_self=False)
    same_bits(got[:, 1:], x[:, 1:], "mean include_self=False leaves the rest")


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_backward(reduce, include_self):
    x = make((5, 6), torch.float64, "srbw", lo=-3, hi=4).requires_grad_()  # small ints: many ties and zeros
    src = make((5, 8), torch.float64, "srbw-s", lo=-3, hi=4).requires_grad_()
    if reduce == "prod":  # a destination with one zero, one with two, one with none
        with torch.no_grad():
            src[0, :3] = torch.tensor([0.0, 2.0, 0.0])
            src[1, :2] = torch.tensor([0.0, 3.0])
            x[2, 1] = 0.0
    index = red_index((5, 8), 6, 1, torch.int64, "srbw-i")
    g = randf((5, 6), torch.float64, "srbw-g")
    got = torch.autograd.grad(F.scatter_reduce(x, 1, index, src, reduce, include_self=include_self), (x, src), g)
    ref = torch.autograd.grad(torch.scatter_reduce(x, 1, index, src, reduce, include_self=include_self), (x, src), g)
    for a, b, n in zip(got, ref, ("self", "src")):
        torch.testing.assert_close(a, b, msg=lambda m: f"{reduce} grad {n}: {m}")


def test_scatter_reduce_paths_and_determinism():
    x = randf((100, 64), torch.float32, "srdet")
    index = rand_index((3000, 64), 100, torch.int64, "srdet-i")
    src = randf((3000, 64), torch.float32, "srdet-s")
    for reduce in ("sum", "prod"):
        runs = [F.scatter_reduce(x, 0, index, src, reduce, deterministic=True) for _ in range(3)]
        for r in runs[1:]:
            same_bits(r, runs[0], f"scatter_reduce {reduce} deterministic repeatability")
    tensors = {"x": x, "index": index, "src": src, "out": torch.empty_like(x)}
    sku = BI.index_sku("scatter_reduce", tensors, {"dim": 0, "reduce": "sum"}, deterministic=True)
    assert "scatter-sorted" in sku and "nondeterministic" not in sku, sku
    assert "scatter-atomic" in BI.index_sku("scatter_reduce", tensors, {"dim": 0, "reduce": "amax"},
                                            deterministic=True)
    assert "scatter-sorted" in BI.index_sku("scatter_reduce", tensors, {"dim": 0, "reduce": "mean"})
    small = {"x": x.to(torch.int8), "index": index, "src": src.to(torch.int8),
             "out": torch.empty_like(x, dtype=torch.int8)}
    assert "scatter-sorted" in BI.index_sku("scatter_reduce", small, {"dim": 0, "reduce": "amax"})


def test_scatter_legacy_reduce():
    x = make((4, 5), torch.float32, "legacy", lo=1, hi=3)
    index = rand_index((4, 5), 4, torch.int64, "legacy-i")
    src = make((4, 5), torch.float32, "legacy-s", lo=1, hi=3)
    same_bits(F.scatter(x, 0, index, src, reduce="multiply"), x.scatter(0, index, src, reduce="multiply"), "multiply")
    same_bits(F.scatter(x, 0, index, src, reduce="add"), x.scatter(0, index, src, reduce="add"), "add")


# ---- segment_prod / segment_mean ------------------------------------------------------------------------------
@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", RED_DTYPES, ids=str)
def test_segment_prod_mean(dt, it):
    for shape, n in [((300, 5, 3), 37), ((200, 40), 12), ((64,), 9)]:
        data = red_data(shape, dt, "prod", "segp", shape, dt)
        ids = rand_index((shape[0],), n + 4, it, "segp-ids", shape) - 2  # dropped ids on both sides
        for sid in (ids, ids.sort()[0]):
            keep = (sid >= 0) & (sid < n)
            exp_idx = sid[keep].long().view(-1, *([1] * (data.dim() - 1))).expand_as(data[keep])
            ones = torch.ones((n,) + tuple(data.shape[1:]), dtype=dt, device=DEV)
            ref = ref_scatter_reduce(ones, 0, exp_idx, data[keep], "prod", True)
            for det in (False, True):
                same_bits(F.segment_prod(data, sid, n, deterministic=det), ref, f"segment_prod {shape}")
            mdata = red_data(shape, dt, "sum", "segm", shape, dt)
            zeros = torch.zeros((n,) + tuple(data.shape[1:]), dtype=dt, device=DEV)
            ref = ref_scatter_reduce(zeros, 0, exp_idx, mdata[keep], "mean", False)  # empty segments: 0
            got = F.segment_mean(mdata, sid, n)
            if dt.is_floating_point:
                torch.testing.assert_close(got, ref, rtol=1e-2 if dt.itemsize == 2 else 1e-6, atol=1e-6)
            else:
                same_bits(got, ref, f"segment_mean {shape}")


def test_segment_prod_mean_backward():
    data = make((120, 6), torch.float64, "segpbw", lo=-2, hi=3).requires_grad_()  # zeros: single and several
    ids = rand_index((120,), 15, torch.int64, "segpbw-ids")
    g = randf((15, 6), torch.float64, "segpbw-g")
    exp = ids.view(-1, 1).expand(-1, 6)
    (gx,) = torch.autograd.grad(F.segment_prod(data, ids, 15), data, g)
    (rx,) = torch.autograd.grad(torch.ones(15, 6, dtype=torch.float64, device=DEV).scatter_reduce(
        0, exp, data, "prod", include_self=True), data, g)
    torch.testing.assert_close(gx, rx)
    (gx,) = torch.autograd.grad(F.segment_mean(data, ids, 15), data, g)
    (rx,) = torch.autograd.grad(torch.zeros(15, 6, dtype=torch.float64, device=DEV).scatter_reduce(
        0, exp, data, "mean", include_self=False), data, g)
    torch.testing.assert_close(gx, rx)


# ---- advanced indexing: index, index_put, take, put ----------------------------------------------------------
def perm_index(n, k, it, *seed):
    """k distinct indices in [0, n) (assignments stay defined)."""
    return torch.randperm(n, generator=gen(*seed))[:k].to(it).to(DEV)


def adv_cases(x, it):
    """(indices, description) pairs covering torch's advanced-indexing layouts; destinations are
    distinct so that assignments are defined."""
    a = perm_index(x.shape[0], 7, it, "adv-a")
    b = perm_index(x.shape[1], 7, it, "adv-b")
    c = perm_index(x.shape[2], 3, it, "adv-c")
    neg = perm_index(x.shape[0], 4, it, "adv-neg") - x.shape[0]  # negative: count from the end
    return [((a,), "leading"), ((a, b), "two leading"), ((a[:3], None, c), "non-adjacent (front)"),
            ((None, b), "adjacent after a full dim"), ((None, b.view(7, 1), c.view(1, 3)), "broadcast middle"),
            ((neg,), "negative"), ((a.view(7, 1), b.view(1, 7)), "broadcast"), ((a[0],), "0-d index")]


def key_of(indices):
    return tuple(i.long() if i is not None else slice(None) for i in indices)


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_index_and_index_put(dt, it):
    x = make((8, 9, 5, 4), dt, "adv", dt)
    for indices, what in adv_cases(x, it):
        key = key_of(indices)
        ref = ref_op(lambda t: t[key], x)
        same_bits(F.index(x, indices), ref, f"index {what}")
        values = make(ref.shape, dt, "adv-v", what, dt)

        def put(t, v):
            t = t.clone()
            t[key] = v
            return t
        want = ref_op(put, x, values)
        for det in (False, True):
            same_bits(F.index_put(x, indices, values, deterministic=det), want, f"index_put {what}")
        if ref.dim() >= 1 and ref.shape[-1] > 1:  # values broadcast along the last dim
            v1 = values[..., :1]
            same_bits(F.index_put(x, indices, v1), ref_op(put, x, v1.expand(ref.shape)), f"index_put broadcast {what}")
    xt = x.permute(2, 0, 3, 1)  # a strided self
    a = rand_index((11,), xt.shape[0], it, "adv-t")
    same_bits(F.index(xt, (a,)), ref_op(lambda t: t[a.long()], xt), "index strided")
    mask = make((8, 9), torch.bool, "adv-mask")
    same_bits(F.index(x, (mask,)), ref_op(lambda t: t[mask], x), "index bool mask")


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dt", ADD_DTYPES + [torch.int8, torch.uint8, torch.int16], ids=str)
def test_index_put_accumulate(dt, it):
    x = make((6, 9, 5), dt, "acc", dt, lo=0, hi=9)
    a = rand_index((40,), 6, it, "acc-a")  # many duplicates
    b = rand_index((40,), 9, it, "acc-b")
    v = make((40, 5), dt, "acc-v", dt, lo=0, hi=5)
    ref = x.index_put((a.long(), b.long()), v, accumulate=True)
    for det in (False, True):
        same_bits(F.index_put(x, (a, b), v, accumulate=True, deterministic=det), ref, f"index_put accumulate {det}")
    # non-adjacent dims (0 and 2, result [40, 9]) with a broadcast value, vs explicit index tensors
    c = b.remainder(5)
    ar = torch.arange(9, device=DEV)
    ref = x.index_put((a.long().view(-1, 1), ar.view(1, -1), c.long().view(-1, 1)), v[:1, :1].expand(40, 9),
                      accumulate=True)
    same_bits(F.index_put(x, (a, None, c), v[:1, :1], accumulate=True), ref, "index_put accumulate non-adjacent")


def test_index_backward_take_put():
    x = randf((6, 7, 5), torch.float64, "advbw").requires_grad_()
    a = rand_index((9,), 6, torch.int64, "advbw-a")  # duplicates: gradients accumulate
    c = rand_index((9,), 5, torch.int64, "advbw-c")
    for indices in [(a,), (a, None, c), (None, c.remainder(7))]:
        key = key_of(indices)
        g = randf(x[key].shape, torch.float64, "advbw-g", len(indices))
        (gx,) = torch.autograd.grad(F.index(x, indices), x, g)
        (rx,) = torch.autograd.grad(x[key], x, g)
        torch.testing.assert_close(gx, rx)
    v = randf((9, 7), torch.float64, "advbw-v").requires_grad_()
    g = randf((6, 7, 5), torch.float64, "advbw-g2")
    ar = torch.arange(7, device=DEV).view(1, 7)
    for acc in (True, False):
        i0, i2 = (a, c) if acc else (perm_index(6, 4, torch.int64, "advbw-u"), c[:4])
        vv = v if acc else v[:4]
        got = torch.autograd.grad(F.index_put(x, (i0, None, i2), vv, accumulate=acc), (x, v), g)
        ref = torch.autograd.grad(torch.index_put(x, (i0.view(-1, 1), ar, i2.view(-1, 1)), vv, accumulate=acc),
                                  (x, v), g)
        for p, q in zip(got, ref):
            torch.testing.assert_close(p, q)
    flat = idx([0, -1, 5, -7, 3, 3], torch.int64)
    same_bits(F.take(x.detach(), flat), torch.take(x.detach(), flat), "take negatives")
    src = randf((6,), torch.float64, "put-s")
    same_bits(F.put(x.detach(), flat, src, accumulate=True), x.detach().put(flat, src, accumulate=True),
              "put accumulate")
    gt = randf((6,), torch.float64, "take-g")
    (gx,) = torch.autograd.grad(F.take(x, flat), x, gt)
    (rx,) = torch.autograd.grad(torch.take(x, flat), x, gt)
    torch.testing.assert_close(gx, rx)
    with pytest.raises(IndexError):
        F.take(x.detach(), idx([0, 210], torch.int64))


# ---- one_hot -------------------------------------------------------------------------------------------------
def test_one_hot():
    labels = rand_index((5, 7), 9, torch.int64, "oh")
    same_bits(F.one_hot(labels, 9), tF.one_hot(labels, 9), "one_hot")
    same_bits(F.one_hot(labels), tF.one_hot(labels), "one_hot num_classes=-1")
    same_bits(F.one_hot(labels.t(), 12), tF.one_hot(labels.t(), 12), "one_hot strided")
    same_bits(F.one_hot(labels[:0], 4), tF.one_hot(labels[:0], 4), "one_hot empty")
    with pytest.raises(IndexError):
        F.one_hot(idx([1, 9], torch.int64), 9)
    with pytest.raises(IndexError):
        F.one_hot(idx([1, -1], torch.int64), 9)


# ---- nonzero / masked_select / masked_scatter -------------------------------------------------------------------
def sparse_make(shape, dt, *seed):
    """make()'s values with about half of them zero (through an integer view: zero bits are +0)."""
    v = make(shape, dt, *seed)
    keep = make(shape, torch.bool, *seed, "keep")
    return ref_op(lambda t: torch.where(keep, t, torch.zeros((), dtype=t.dtype, device=DEV)), v)


def nonzero_ref(x):
    """torch.nonzero on a form torch can test (fp8 has no nonzero kernel: its bits but the sign)."""
    if x.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        return torch.nonzero(x.view(torch.uint8) & 0x7f)
    return torch.nonzero(x)


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_nonzero_argwhere(dt):
    for shape in [(7, 33, 65), (5000,), (0, 3), (), (1,), (3, 1, 4099)]:
        x = sparse_make(shape, dt, "nz", shape, dt)
        ref = nonzero_ref(x)
        same_bits(F.nonzero(x), ref, f"nonzero {shape}")
        same_bits(F.argwhere(x), ref, f"argwhere {shape}")
        if x.dim() >= 2:
            xt = x.transpose(0, -1)
            same_bits(F.nonzero(xt), nonzero_ref(xt), f"nonzero strided {shape}")


def test_nonzero_float_zeros_and_static():
    x = torch.tensor([0.0, -0.0, float("nan"), 1.0, -2.0, 0.0, float("inf")], device=DEV)
    same_bits(F.nonzero(x), torch.nonzero(x), "nonzero -0 and NaN")
    for size in (0, 2, 4, 9):
        got = F.nonzero_static(x, size=size)
        ref = torch.full((size, 1), -1, dtype=torch.int64, device=DEV)
        nz = torch.nonzero(x)[:size]
        ref[:nz.shape[0]] = nz
        same_bits(got, ref, f"nonzero_static size={size}")
    same_bits(F.nonzero_static(x, size=9, fill_value=7)[4:], torch.full((5, 1), 7, dtype=torch.int64, device=DEV),
              "nonzero_static fill_value")
    c = torch.complex(torch.tensor([0.0, 0.0, -0.0, 1.0]), torch.tensor([0.0, 2.0, -0.0, 0.0])).to(DEV)
    same_bits(F.nonzero(c), torch.nonzero(c), "nonzero complex")
    assert [t.tolist() for t in F.nonzero(x, as_tuple=True)] == [t.tolist() for t in torch.nonzero(x, as_tuple=True)]


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_masked_select_scatter(dt):
    x = make((7, 33, 65), dt, "ms", dt)
    mask = make((7, 33, 65), torch.bool, "ms-m")
    same_bits(F.masked_select(x, mask), ref_op(lambda t: torch.masked_select(t, mask), x), "masked_select")
    row_mask = make((33, 1), torch.bool, "ms-rm")  # broadcast
    same_bits(F.masked_select(x, row_mask), ref_op(lambda t: torch.masked_select(t, row_mask), x),
              "masked_select broadcast")
    xt = x.transpose(0, 2)
    same_bits(F.masked_select(xt, mask.transpose(0, 2)),
              ref_op(lambda t: torch.masked_select(t, mask.transpose(0, 2)), xt), "masked_select strided")
    n = int(mask.sum())
    source = make((n + 5,), dt, "ms-src", dt)
    same_bits(F.masked_scatter(x, mask, source), ref_op(lambda t, s: t.masked_scatter(mask, s), x, source),
              "masked_scatter")
    src2 = make((8, 33, 65), dt, "ms-src2", dt)  # any shape with enough elements, read row-major
    m2 = make((33, 65), torch.bool, "ms-m2")
    same_bits(F.masked_scatter(x, m2, src2), ref_op(lambda t, s: t.masked_scatter(m2, s), x, src2),
              "masked_scatter broadcast mask")
    assert F.masked_select(x[:0], mask[:0]).shape == (0,)


def test_masked_backward_and_short_source():
    x = randf((5, 6), torch.float64, "msbw").requires_grad_()
    mask = make((5, 6), torch.bool, "msbw-m")
    gs = randf((int(mask[:1].sum()) * 5,), torch.float64, "msbw-g")  # mask[:1] broadcasts over the rows
    (gx,) = torch.autograd.grad(F.masked_select(x, mask[:1]), x, gs)
    (rx,) = torch.autograd.grad(torch.masked_select(x, mask[:1]), x, gs)
    torch.testing.assert_close(gx, rx)
    src = randf((40,), torch.float64, "msbw-s").requires_grad_()
    g2 = randf((5, 6), torch.float64, "msbw-g2")
    got = torch.autograd.grad(F.masked_scatter(x, mask, src), (x, src), g2)
    ref = torch.autograd.grad(x.masked_scatter(mask, src), (x, src), g2)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    keep = x.detach().clone()
    with pytest.raises(IndexError):
        F.masked_scatter(x.detach(), mask, src.detach()[:int(mask.sum()) - 1])
    same_bits(x.detach(), keep, "masked_scatter input untouched")


# ---- out-of-range: poisoned outputs -------------------------------------------------------------------------------
def guarded(shape, dt, poison=0x5A):
    """A tensor of `shape` in the middle of a poisoned buffer; returns (view, check_guards)."""
    n = 1
    for v in shape:
        n *= v
    elem = torch.empty((), dtype=dt).element_size()
    raw = torch.full(((n + 64) * elem,), poison, dtype=torch.uint8, device=DEV)
    view = raw[32 * elem:(32 + n) * elem].view(dt).view(shape)

    def guards_ok():
        return bool((raw[:32 * elem] == poison).all()) and bool((raw[(32 + n) * elem:] == poison).all())
    return view, guards_ok


@pytest.mark.parametrize("it", INDEX_DTYPES, ids=str)
def test_new_ops_out_of_range(it):
    x = make((5, 6), torch.float32, "oor2")
    keep = x.clone()
    src = make((5, 6), torch.float32, "oor2-s")
    for bad in (6, 1 << 20):
        index = idx([[0, bad, 1, 2, 3, 4]] * 5, it)
        for reduce in REDUCES:
            out, ok = guarded((5, 6), torch.float32)
            with pytest.raises(IndexError):
                BI._run("scatter_reduce", {"x": x, "index": index, "src": src, "out": out},
                        {"dim": 1, "reduce": reduce})
            assert ok(), f"scatter_reduce {reduce} wrote outside out"
            good = index.clone()
            good[:, 1] = 0
            ref = x.scatter_reduce(1, good.long()[:, [0, 2, 3, 4, 5]], src[:, [0, 2, 3, 4, 5]], reduce)
            if reduce != "mean":
                same_bits(out, ref, f"scatter_reduce {reduce}: the bad element alone is dropped")
        out, ok = guarded((5, 6), torch.float32)
        with pytest.raises(IndexError):
            BI._run("index_put", {"x": x, "indices": [idx([0, bad - 12], it)], "src": src[:2], "out": out},
                    {"accumulate": True})
        assert ok(), "index_put wrote outside out"
        out, ok = guarded((2, 6), torch.float32)
        with pytest.raises(IndexError):
            BI._run("index", {"x": x, "indices": [idx([0, bad], it)], "out": out})
        assert ok(), "index wrote outside out"
        same_bits(out[1], torch.zeros(6, device=DEV), "index: an out-of-range row reads zeros")
        out, ok = guarded((2, 6), torch.int64)
        with pytest.raises(IndexError):
            BI._run("one_hot", {"index": idx([0, bad], it), "out": out})
        assert ok(), "one_hot wrote outside out"
        same_bits(x, keep, "input untouched")


# ---- jax.lax gather / scatter / dynamic_slice, against JAX ----------------------------------------------------------
def jax_or_skip():
    """JAX on its CPU device (the reference never competes with the GPU tests for memory)."""
    try:
        import jax
        import jax.numpy as jnp
        cpu = jax.devices("cpu")[0]
    except Exception as e:  # not installed, or no CPU backend
        pytest.skip(f"JAX unavailable: {e}")
    return jax, jnp, cpu


def to_jax(t):
    import numpy as np
    jax, _, cpu = jax_or_skip()
    return jax.device_put(np.asarray(t.detach().cpu()), cpu)


def from_jax(a):
    import numpy as np
    return torch.from_numpy(np.array(a)).to(DEV)


def same_values(got, ref, what):
    """Exact, NaN positions included (JAX's fill is NaN)."""
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    torch.testing.assert_close(got, ref.to(got.dtype), rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


SEGMENT_OPS = ["segment_sum", "segment_max", "segment_min", "segment_prod"]


@pytest.mark.parametrize("rows", [(300, 7), (1000, 64), (257,)], ids=str)
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("op", SEGMENT_OPS)
def test_segment_vs_jax(op, dt, rows):
    """jax.ops.segment_* on JAX's CPU backend, exactly: unsorted and sorted (indices_are_sorted)
    ids, ids outside [0, num_segments) dropped, empty segments at the op's identity (-inf / +inf /
    the integer extremes, 0, 1), int32 and int64 ids. Small integers keep every sum and product
    exact in any order; prod takes values in [-2, 2] so that a segment's product stays exact."""
    jax, jnp, _ = jax_or_skip()
    n = 41 if rows[0] > 300 else 37
    lo, hi = (-2, 3) if op == "segment_prod" else (-9, 10)
    data = make(rows, dt, "segjax", op, dt, rows, lo=lo, hi=hi)
    ids = rand_index((rows[0],), n + 6, torch.int64, "segjax-ids", rows) - 3  # some < 0, some >= n
    if op == "segment_prod":  # ~6 elements a segment: |product| <= 2^6
        ids = torch.where(torch.arange(rows[0], device=DEV) % 7 == 0, ids, torch.full_like(ids, n + 1))
    for sorted_ids in (False, True):
        sid = ids.sort()[0] if sorted_ids else ids
        jdata = to_jax(data) if dt != torch.bfloat16 else to_jax(data.float()).astype(jnp.bfloat16)
        jref = getattr(jax.ops, op)(jdata, to_jax(sid.to(torch.int32)), num_segments=n,
                                    indices_are_sorted=sorted_ids)
        ref = from_jax(jref) if dt != torch.bfloat16 else from_jax(jref.astype(jnp.float32)).to(dt)
        for it in INDEX_DTYPES:
            got = getattr(F, op)(data, sid.to(it), n, indices_are_sorted=sorted_ids)
            same_values(got, ref, f"{op} {dt} {rows} sorted={sorted_ids} {it}")


@pytest.mark.parametrize("op", ["segment_sum", "segment_max", "segment_min"])
def test_segment_grad_vs_jax(op):
    """The vjp of jax.ops.segment_sum / max / min (JAX's CPU backend, float32): max / min split a
    segment's cotangent evenly among its tied extremes, which the integer data makes common."""
    jax, _, _ = jax_or_skip()
    n = 23
    data = make((400, 16), torch.float32, "segjaxg", op, lo=-3, hi=4)
    ids = rand_index((400,), n + 4, torch.int64, "segjaxg-ids") - 2
    g = randf((n, 16), torch.float32, "segjaxg-g")
    xg = data.clone().requires_grad_()
    (gx,) = torch.autograd.grad(getattr(F, op)(xg, ids, n), xg, g)
    fn = getattr(jax.ops, op)
    _, vjp = jax.vjp(lambda a: fn(a, to_jax(ids.to(torch.int32)), num_segments=n), to_jax(data))
    torch.testing.assert_close(gx, from_jax(vjp(to_jax(g))[0]), rtol=1e-6, atol=1e-6,
                               msg=lambda m: f"{op} grad vs JAX: {m}")


GATHER_CASES = [
    # operand, indices shape (last dim: the start vector), index range, offset_dims, collapsed, start_index_map, sizes
    ((10, 6), (5, 1), (-3, 13), (1,), (0,), (0,), (1, 6)),                   # x[ids]: rows
    ((8, 9, 7), (4, 3, 2), (-2, 10), (1, 3, 4), (), (2, 0), (2, 9, 3)),      # windows, two batch dims
    ((5, 6, 7), (3, 1), (-1, 7), (1, 2), (1,), (1,), (5, 1, 7)),             # a collapsed middle dim
    ((6, 5), (7, 2), (-2, 7), (), (0, 1), (1, 0), (1, 1)),                   # elements (x[i, j])
]


@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
@pytest.mark.parametrize("mode", ["clip", "fill"])
def test_lax_gather_vs_jax(case, mode):
    jax, jnp, _ = jax_or_skip()
    oshape, ishape, (lo, hi), offs, coll, sim, sizes = GATHER_CASES[case]
    x = randf(oshape, torch.float32, "lg", case)
    idx32 = torch.randint(lo, hi, ishape, generator=gen("lg-i", case), dtype=torch.int32).to(DEV)
    dn = jax.lax.GatherDimensionNumbers(offset_dims=offs, collapsed_slice_dims=coll, start_index_map=sim)
    ref = from_jax(jax.lax.gather(to_jax(x), to_jax(idx32), dn, sizes, mode=mode))
    for it in INDEX_DTYPES:
        same_values(F.lax_gather(x, idx32.to(it), dn, sizes, mode=mode), ref, f"lax_gather {case} {mode} {it}")
    if mode == "fill":
        ref = from_jax(jax.lax.gather(to_jax(x), to_jax(idx32), dn, sizes, mode=mode, fill_value=0.5))
        same_values(F.lax_gather(x, idx32, dn, sizes, mode=mode, fill_value=0.5), ref, f"lax_gather fill_value {case}")
    lax_gather_grad_vs_jax(x, idx32, dn, sizes, mode, ("lg-g", case), f"lax_gather grad {case} {mode}")


def lax_gather_grad_vs_jax(x, idx32, dn, sizes, mode, seed, what):
    """The gradient of lax_gather (fill 0) against JAX's vjp (a scatter_add of the cotangent).
    Returns the output's shape."""
    jax, _, _ = jax_or_skip()
    xg = x.clone().requires_grad_()
    y = F.lax_gather(xg, idx32, dn, sizes, mode=mode, fill_value=0.0)
    g = make(y.shape, torch.float32, *seed, lo=-4, hi=5)
    (gx,) = torch.autograd.grad(y, xg, g)
    _, vjp = jax.vjp(lambda a: jax.lax.gather(a, to_jax(idx32), dn, sizes, mode=mode, fill_value=0.0), to_jax(x))
    same_values(gx, from_jax(vjp(to_jax(g))[0]), what)
    return y.shape


SCATTER_CASES = [
    # operand, indices shape, index range, updates shape, update_window_dims, inserted, scatter_dims_to_operand_dims
    ((10, 6), (5, 1), (-3, 13), (5, 6), (1,), (0,), (0,)),               # rows
    ((8, 9, 7), (4, 2), (-2, 8), (4, 2, 9, 3), (1, 2, 3), (), (2, 0)),   # windows
    ((6, 5), (7, 2), (-1, 7), (7,), (), (0, 1), (1, 0)),                 # elements
]


def disjoint_windows(case, mode):
    """Start indices of SCATTER_CASES[case] whose windows never overlap (a replacing scatter is
    defined only then: XLA leaves the order of colliding updates open); fill mode adds one
    window out of bounds, which is dropped."""
    g = gen("ls-disjoint", case)
    if case == 0:  # rows of [10, 6]
        idx = torch.randperm(10, generator=g)[:5].view(5, 1)
        if mode == "fill":
            idx[2, 0] = 12
    elif case == 1:  # windows [2, 9, 3] of [8, 9, 7], starts (dim 2, dim 0)
        d0 = torch.tensor([0, 2, 4, 6])[torch.randperm(4, generator=g)]
        d2 = torch.randint(0, 2, (4,), generator=g) * 3
        idx = torch.stack([d2, d0], 1)
        if mode == "fill":
            idx[1, 1] = 7  # 7 > 8 - 2: the window does not fit
    else:  # elements of [6, 5], starts (dim 1, dim 0)
        flat = torch.randperm(30, generator=g)[:7]
        idx = torch.stack([flat % 5, flat // 5], 1)
        if mode == "fill":
            idx[3, 0] = -1
    return idx.to(torch.int32)


@pytest.mark.parametrize("case", range(len(SCATTER_CASES)))
@pytest.mark.parametrize("mode", ["clip", "fill"])
@pytest.mark.parametrize("kind", ["scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max"])
def test_lax_scatter_vs_jax(kind, case, mode):
    jax, jnp, _ = jax_or_skip()
    oshape, ishape, (lo, hi), ushape, win, ins, s2o = SCATTER_CASES[case]
    x = make(oshape, torch.float32, "ls", case, lo=-3, hi=4)
    idx32 = torch.randint(lo, hi, ishape, generator=gen("ls-i", case), dtype=torch.int32).to(DEV)
    if kind == "scatter":
        idx32 = disjoint_windows(case, mode).to(DEV)
    upd = make(ushape, torch.float32, "ls-u", case, lo=-3, hi=4)
    dn = jax.lax.ScatterDimensionNumbers(update_window_dims=win, inserted_window_dims=ins,
                                         scatter_dims_to_operand_dims=s2o)
    ref = from_jax(getattr(jax.lax, kind)(to_jax(x), to_jax(idx32), to_jax(upd), dn, mode=mode))
    ours = getattr(F, "lax_" + kind)
    for it in INDEX_DTYPES:
        for det in (False, True):
            same_values(ours(x, idx32.to(it), upd, dn, mode=mode, deterministic=det), ref,
                        f"lax_{kind} {case} {mode} {it} det={det}")
    if kind in ("scatter", "scatter_add"):
        xg, ug = x.clone().requires_grad_(), upd.clone().requires_grad_()
        y = ours(xg, idx32, ug, dn, mode=mode)
        g = make(y.shape, torch.float32, "ls-g", case, lo=-4, hi=5)
        got = torch.autograd.grad(y, (xg, ug), g)
        _, vjp = jax.vjp(lambda a, u: getattr(jax.lax, kind)(a, to_jax(idx32), u, dn, mode=mode), to_jax(x),
                         to_jax(upd))
        for a, b, what in zip(got, vjp(to_jax(g)), ("operand", "updates")):
            same_values(a, from_jax(b), f"lax_{kind} grad {what} {case} {mode}")


def test_dynamic_slice_device_starts_vs_jax():
    jax, jnp, _ = jax_or_skip()
    x = randf((9, 10, 11), torch.float32, "dsl")
    for starts in ([2, 3, 4], [-5, 8, 100], [8, 0, 11]):  # inside, clamped low and high
        for it in INDEX_DTYPES:
            st = torch.tensor(starts, dtype=it, device=DEV)
            ref = from_jax(jax.lax.dynamic_slice(to_jax(x), [int(s) for s in starts], (4, 5, 6)))
            same_values(F.dynamic_slice(x, st, (4, 5, 6)), ref, f"dynamic_slice {starts}")
            same_values(F.dynamic_slice(x, [st[0], st[1], st[2]], (4, 5, 6)), ref, f"dynamic_slice list {starts}")
            same_values(F.dynamic_slice(x, starts, (4, 5, 6)), ref, f"dynamic_slice host {starts}")
            u = randf((4, 5, 6), torch.float32, "dsl-u")
            ref = from_jax(jax.lax.dynamic_update_slice(to_jax(x), to_jax(u), [int(s) for s in starts]))
            same_values(F.dynamic_update_slice(x, u, st), ref, f"dynamic_update_slice {starts}")
            same_values(F.dynamic_update_slice(x, u, starts), ref, f"dynamic_update_slice host {starts}")
    xg = x.clone().requires_grad_()
    st = torch.tensor([-5, 8, 100], device=DEV)
    g = randf((4, 5, 6), torch.float32, "dsl-g")
    (gx,) = torch.autograd.grad(F.dynamic_slice(xg, st, (4, 5, 6)), xg, g)
    _, vjp = jax.vjp(lambda a: jax.lax.dynamic_slice(a, [-5, 8, 100], (4, 5, 6)), to_jax(x))
    same_values(gx, from_jax(vjp(to_jax(g))[0]), "dynamic_slice grad")


def test_lax_default_fill_values():
    x = make((4, 3), torch.int32, "lfill")
    idx_bad = idx([[7]], torch.int32)
    dn = {"offset_dims": (1,), "collapsed_slice_dims": (0,), "start_index_map": (0,)}
    got = F.lax_gather(x, idx_bad, dn, (1, 3))
    assert (got == torch.iinfo(torch.int32).min).all(), got
    got = F.lax_gather(x.float(), idx_bad, dn, (1, 3))
    assert torch.isnan(got).all(), got
    got = F.lax_gather(x.to(torch.uint8), idx_bad, dn, (1, 3))
    assert (got == 255).all(), got


# ---- pad rows: the warp-task kernel's limits ----------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("dt", [torch.uint8, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_pad_rows_around_warp_row_limit(mode, dt):
    """Output rows of 2 KB - 1 element, 2 KB (the last width the warp-task kernel takes: many
    32-column strips, the last one partial) and 2 KB + 1 element (the 16-byte chunk kernel), with
    a padded outer dim (constant pad's border rows mixed with reading rows in a batch) and row
    counts that leave a partial batch."""
    eb = torch.empty((), dtype=dt).element_size()
    for w_out in (2048 // eb - 1, 2048 // eb, 2048 // eb + 1):
        x = make((3, 5, w_out - 3), dt, "padrows-limit", w_out, mode, dt)
        for pad in [(1, 2), (2, 1, 1, 0)]:
            same_bits(F.pad(x, pad, mode), ref_op(lambda t: pad_reference(t, pad, mode), x),
                      f"pad rows width {w_out} {mode} {pad}")


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad_rows_many_rows(mode):
    """Over a million short rows: the warp-task kernel's tasks take two batches of rows, the last
    task is partial (a full batch and 2 rows)."""
    x = make((2, 524291, 16), torch.bfloat16, "padrows-many", mode)
    pad = (1, 1, 1, 1)
    same_bits(F.pad(x, pad, mode), ref_op(lambda t: pad_reference(t, pad, mode), x), f"pad many rows {mode}")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad_rows_past_2_30_elements(mode):
    """2^30 output elements: the warp-task kernel with 64-bit offsets (1-byte elements)."""
    free, _ = torch.cuda.mem_get_info()
    if free < 6 * (1 << 30):
        pytest.skip("needs 6 GiB free")
    x = torch.randint(0, 256, (4, 2065000, 128), dtype=torch.uint8, device=DEV)
    pad = (1, 1, 1, 1)
    got = F.pad(x, pad, mode)
    assert got.numel() >= 1 << 30
    same_bits(got, pad_reference(x, pad, mode), f"pad past 2^30 elements {mode}")


BATCHED_GATHER_CASES = [
    # operand, indices shape, offset_dims, collapsed, start_index_map, operand_batching, indices_batching, sizes
    ((4, 10, 6), (4, 5, 1), (2,), (1,), (1,), (0,), (0,), (1, 1, 6)),
    ((10, 3, 6), (5, 3, 1), (2,), (0,), (0,), (1,), (1,), (1, 1, 6)),
    ((3, 8, 2, 5), (2, 4, 3, 2), (3,), (1,), (1, 3), (0, 2), (2, 0), (1, 1, 1, 3)),
]


@pytest.mark.parametrize("case", range(len(BATCHED_GATHER_CASES)))
@pytest.mark.parametrize("mode", ["clip", "fill"])
def test_lax_gather_scatter_batching_dims_vs_jax(case, mode):
    """JAX's operand_batching_dims: gather, scatter_add (same dims as the gather's transpose) and
    both gradients, against JAX."""
    jax, jnp, _ = jax_or_skip()
    oshape, ishape, offs, coll, sim, ob, ib, sizes = BATCHED_GATHER_CASES[case]
    try:
        dn = jax.lax.GatherDimensionNumbers(offset_dims=offs, collapsed_slice_dims=coll, start_index_map=sim,
                                            operand_batching_dims=ob, start_indices_batching_dims=ib)
        sdn = jax.lax.ScatterDimensionNumbers(update_window_dims=offs, inserted_window_dims=coll,
                                              scatter_dims_to_operand_dims=sim, operand_batching_dims=ob,
                                              scatter_indices_batching_dims=ib)
    except TypeError as e:
        pytest.skip(f"this JAX has no operand batching dims: {e}")
    x = randf(oshape, torch.float32, "lgb", case)
    idx32 = torch.randint(-2, 11, ishape, generator=gen("lgb-i", case), dtype=torch.int32).to(DEV)
    ref = from_jax(jax.lax.gather(to_jax(x), to_jax(idx32), dn, sizes, mode=mode, fill_value=0.0))
    for it in INDEX_DTYPES:
        same_values(F.lax_gather(x, idx32.to(it), dn, sizes, mode=mode, fill_value=0.0), ref,
                    f"lax_gather batching {case} {mode} {it}")
    yshape = lax_gather_grad_vs_jax(x, idx32, dn, sizes, mode, ("lgb-g", case),
                                    f"lax_gather batching grad {case} {mode}")
    upd = make(yshape, torch.float32, "lgb-u", case, lo=-3, hi=4)
    x = make(oshape, torch.float32, "lgb-x", case, lo=-3, hi=4)
    ref = from_jax(jax.lax.scatter_add(to_jax(x), to_jax(idx32), to_jax(upd), sdn, mode=mode))
    for det in (False, True):
        same_values(F.lax_scatter_add(x, idx32, upd, sdn, mode=mode, deterministic=det), ref,
                    f"lax_scatter_add batching {case} {mode} det={det}")
    xg, ug = x.clone().requires_grad_(), upd.clone().requires_grad_()
    y = F.lax_scatter_add(xg, idx32, ug, sdn, mode=mode)
    g = make(y.shape, torch.float32, "lgb-sg", case, lo=-4, hi=5)
    got = torch.autograd.grad(y, (xg, ug), g)
    _, vjp = jax.vjp(lambda a, u: jax.lax.scatter_add(a, to_jax(idx32), u, sdn, mode=mode), to_jax(x), to_jax(upd))
    for a, b, what in zip(got, vjp(to_jax(g)), ("operand", "updates")):
        same_values(a, from_jax(b), f"lax_scatter_add batching grad {what} {case} {mode}")


@pytest.mark.parametrize("case", range(len(BATCHED_GATHER_CASES)))
@pytest.mark.parametrize("reduce", ["scatter", "scatter_mul", "scatter_min", "scatter_max"])
@pytest.mark.parametrize("mode", ["clip", "fill"])
def test_lax_scatter_reductions_batching_dims_vs_jax(case, reduce, mode):
    """lax.scatter / scatter_mul / scatter_min / scatter_max with operand batching dims, against
    JAX. Duplicate indices: products of small integers are exact in any order; min and max do not
    depend on order; the replacing scatter gets unique start indices (cases 0 and 1: a permutation
    per batch; windows of size 1) so no update lands twice."""
    jax, jnp, _ = jax_or_skip()
    oshape, ishape, offs, coll, sim, ob, ib, sizes = BATCHED_GATHER_CASES[case]
    if reduce == "scatter" and case == 2:
        pytest.skip("case 2's windows overlap: replacement order is unspecified in JAX")
    try:
        sdn = jax.lax.ScatterDimensionNumbers(update_window_dims=offs, inserted_window_dims=coll,
                                              scatter_dims_to_operand_dims=sim, operand_batching_dims=ob,
                                              scatter_indices_batching_dims=ib)
    except TypeError as e:
        pytest.skip(f"this JAX has no operand batching dims: {e}")
    if reduce == "scatter":
        # One index per (batch, position): a prefix of a permutation of the indexed dim per batch.
        bdim, n = ib[0], ishape[1 - ib[0]]
        perms = [torch.randperm(oshape[sim[0]], generator=gen("lgbs-p", case, b))[:n] for b in range(ishape[bdim])]
        idx = torch.stack(perms, dim=bdim).unsqueeze(-1)
        if mode == "fill":
            idx = idx - 1  # some start at -1: out of range, dropped (fill) instead of clamped
        idx32 = idx.to(torch.int32).to(DEV)
    else:
        idx32 = torch.randint(-2, 11, ishape, generator=gen("lgbs-i", case), dtype=torch.int32).to(DEV)
    lo, hi = (-2, 3) if reduce == "scatter_mul" else (-30, 30)
    upd_shape = jax.eval_shape(lambda a, i: jax.lax.gather(a, i, jax.lax.GatherDimensionNumbers(
        offset_dims=offs, collapsed_slice_dims=coll, start_index_map=sim, operand_batching_dims=ob,
        start_indices_batching_dims=ib), sizes, mode="clip"),
        jax.ShapeDtypeStruct(oshape, jnp.float32), jax.ShapeDtypeStruct(ishape, jnp.int32)).shape
    upd = make(upd_shape, torch.float32, "lgbs-u", case, reduce, lo=lo, hi=hi)
    x = make(oshape, torch.float32, "lgbs-x", case, reduce, lo=lo, hi=hi)
    ref = from_jax(getattr(jax.lax, reduce)(to_jax(x), to_jax(idx32), to_jax(upd), sdn, mode=mode))
    ours = getattr(F, f"lax_{reduce}")
    for it in INDEX_DTYPES:
        for det in (False, True):
            same_values(ours(x, idx32.to(it), upd, sdn, mode=mode, deterministic=det), ref,
                        f"lax_{reduce} batching {case} {mode} {it} det={det}")


def test_lax_batching_dims_errors():
    x = randf((4, 10, 6), torch.float32, "lgbe")
    idx = torch.zeros((3, 5, 1), dtype=torch.int32, device=DEV)
    dn = {"offset_dims": (2,), "collapsed_slice_dims": (1,), "start_index_map": (1,), "operand_batching_dims": (0,),
          "start_indices_batching_dims": (0,)}
    with pytest.raises(ValueError, match="size 4 expected the size of indices batch dim 0, 3"):
        F.lax_gather(x, idx, dn, (1, 1, 6))
    with pytest.raises(ValueError, match="slice_sizes"):
        F.lax_gather(x, torch.zeros((4, 5, 1), dtype=torch.int32, device=DEV), dn, (2, 1, 6))
    with pytest.raises(ValueError, match="equal length"):
        F.lax_gather(x, idx, dict(dn, start_indices_batching_dims=()), (1, 1, 6))


# ---- pad's plane kernel (the last two dims mapped, a task's input rows staged in shared memory) --
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.uint8, torch.float32, torch.float64], ids=str)
def test_pad_planes(mode, dt):
    """Odd planes (output planes starting off 16-byte boundaries), misaligned views, bands of rows
    of a 1-D pad (a partial last band), and a plane past the staging limit (f32/f64: the row
    kernels)."""
    cases = [((5, 7, 13, 11), (2, 3, 1, 2)), ((3, 4, 18, 20), (1, 1, 1, 1)), ((3, 37, 3000), (1, 2)),
             ((2, 3, 150, 140), (1, 1, 1, 1)), ((2, 9, 17), (3, 5, 4, 2))]
    for shape, pad in cases:
        x = make(shape, dt, "padplanes", shape, mode, dt)
        want = ref_op(lambda t: pad_reference(t, pad, mode), x)
        same_bits(F.pad(x, pad, mode), want, f"pad planes {mode} {shape}")
        xs = shifted_empty(shape, dt, 1)
        xs.copy_(x)
        out = shifted_empty(tuple(want.shape), dt, 3)
        BI._run("pad", {"x": xs, "out": out}, {"pads": BI._pad_pairs("pad", x, pad), "mode": mode, "value": 0.0})
        same_bits(out, want, f"pad planes misaligned {mode} {shape}")


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.uint8, torch.float32, torch.float64], ids=str)
def test_pad_planes_crop_and_value(dt):
    """Negative pads: the staged rows are the ones the crop keeps."""
    for shape, pad in [((4, 9, 20, 24), (-3, 5, -2, 4)), ((3, 10, 40), (-5, -1)), ((2, 6, 30, 32), (2, -7, 3, -20))]:
        x = make(shape, dt, "padplanes-crop", shape, dt)
        same_bits(F.pad(x, pad, value=3.0), tF.pad(x, pad, value=3.0), f"pad planes crop {shape} {pad}")


def test_pad_planes_many():
    """More planes than the grid (2^20 CTAs): the grid-stride loop over tasks."""
    x = make((1100000, 2, 8), torch.bfloat16, "padplanes-many")
    same_bits(F.pad(x, (1, 1, 1, 1), "reflect"), ref_op(lambda t: pad_reference(t, (1, 1, 1, 1), "reflect"), x),
              "pad planes many")
