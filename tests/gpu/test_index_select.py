"""GPU conformance of the select engine's paths (src/ops/index/index_compact.cu) vs PyTorch:
nonzero / argwhere / nonzero_static / masked_select / masked_scatter over masks larger than one
tile (16384 elements), contiguous 1-byte masks at every byte offset (the 16-byte vector path and
its funnel shift) with lengths that are not multiples of 16, all-false / all-true / random
densities, uint8 / int8 / float masks, strided masks (the element-a-lane path) and an input past
2^31 elements (int64 positions)."""
import zlib

import pytest

from gpu_skip import skip_unless_ready  # noqa: E402

skip_unless_ready('index_ops')

import torch  # noqa: E402

import baracuda.index as BI  # noqa: E402

DEV = "cuda"
TILE = 16384


def gen(*parts):
    return torch.Generator(device="cpu").manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


def rand_mask(shape, density, *seed):
    return (torch.rand(tuple(shape), generator=gen(*seed)) < density).to(DEV)


def same(got, ref, what):
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    if not torch.equal(got, ref):
        bad = (got != ref).nonzero()
        raise AssertionError(f"{what}: {bad.shape[0]} of {got.numel()} elements differ, first at {bad[0].tolist()}")


@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0])
def test_nonzero_contiguous_offsets(density):
    # Slices of one buffer: every byte offset, lengths around chunk and tile edges.
    base = rand_mask((3 * TILE + 777,), density, "nz-off", density)
    for off in range(16):
        for length in (1, 15, 17, 513, TILE - 3, TILE + 5, 2 * TILE + 771):
            m = base[off:off + length]
            same(BI.nonzero(m), torch.nonzero(m), f"nonzero offset {off} length {length}")
    m2 = base[3:3 + 97 * 509].view(97, 509)  # 2-d rows (one 16-byte store a row), misaligned mask
    same(BI.nonzero(m2), torch.nonzero(m2), "nonzero 2-d")
    same(BI.argwhere(m2), torch.argwhere(m2), "argwhere 2-d")


@pytest.mark.parametrize("dt", [torch.uint8, torch.int8, torch.bool], ids=str)
def test_nonzero_byte_masks(dt):
    v = torch.randint(-3, 4, (5, 7, 3001), generator=gen("nz-bytes", dt))
    x = (v != 0) if dt == torch.bool else v.to(dt)
    x = x.to(DEV)
    same(BI.nonzero(x), torch.nonzero(x), f"nonzero {dt}")
    same(BI.nonzero(x[:, :, 1:]), torch.nonzero(x[:, :, 1:]), f"nonzero {dt} sliced rows")  # strided path
    same(BI.nonzero(x.transpose(0, 2)), torch.nonzero(x.transpose(0, 2)), f"nonzero {dt} transposed")
    flat = x.reshape(-1)[5:]
    same(BI.nonzero(flat), torch.nonzero(flat), f"nonzero {dt} offset 5")
    small = x.reshape(-1)[:3000].view(1000, 3)  # rows shorter than a chunk: carries over several rows
    same(BI.nonzero(small), torch.nonzero(small), f"nonzero {dt} [1000, 3]")


def test_nonzero_wide_elements_multi_tile():
    x = torch.randn(40, 3001, generator=gen("nz-f32")).to(DEV)
    x[x.abs() < 0.8] = 0
    x[0, :7] = torch.tensor([-0.0, float("nan"), 0.0, float("inf"), -0.0, 1.0, 0.0], device=DEV)
    same(BI.nonzero(x), torch.nonzero(x), "nonzero f32")
    same(BI.nonzero(x.t()), torch.nonzero(x.t()), "nonzero f32 transposed")
    xd = x.double()[:, 1:]
    same(BI.nonzero(xd), torch.nonzero(xd), "nonzero f64 sliced")


@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_nonzero_static_bounds(density):
    m = rand_mask((7, 5003), density, "nzs", density)
    k = int(m.sum())
    nz = torch.nonzero(m)
    for size in sorted({0, 1, k // 2, k, k + 1, k + 3 * TILE}):
        for fill in (-1, 7):
            ref = torch.full((size, 2), fill, dtype=torch.int64, device=DEV)
            ref[:min(size, k)] = nz[:size]
            same(BI.nonzero_static(m, size=size, fill_value=fill), ref, f"nonzero_static size={size} fill={fill}")


@pytest.mark.parametrize("density", [0.0, 0.1, 1.0])
def test_masked_select_scatter_multi_tile(density):
    x = torch.randint(-1000, 1000, (3, 2 * TILE + 77), generator=gen("ms", density), dtype=torch.int32).to(DEV)
    mbuf = rand_mask((3 * (2 * TILE + 77) + 16,), density, "ms-m", density)
    for off in (0, 1, 9):
        m = mbuf[off:off + x.numel()].view(x.shape)
        same(BI.masked_select(x, m), torch.masked_select(x, m), f"masked_select offset {off}")
        k = int(m.sum())
        src = torch.randint(-1000, 1000, (k + 5,), generator=gen("ms-s", density, off), dtype=torch.int32).to(DEV)
        same(BI.masked_scatter(x, m, src), x.masked_scatter(m, src), f"masked_scatter offset {off}")
        if k:
            s2 = torch.empty((k, 3), dtype=torch.int32, device=DEV).t()[0]  # a strided source view (stride 3)
            s2.copy_(src[:k])
            same(BI.masked_scatter(x, m, s2), x.masked_scatter(m, s2), f"masked_scatter strided source {off}")
        s3 = src[:k + 5].view(1, k + 5)  # a 2-d contiguous source: one merged dim
        same(BI.masked_scatter(x, m, s3), x.masked_scatter(m, s3), f"masked_scatter 2-d source {off}")
    xs = x[:, 1:]  # strided data, contiguous-per-row mask
    ms = rand_mask(xs.shape, density, "ms-strided", density)
    same(BI.masked_select(xs, ms), torch.masked_select(xs, ms), "masked_select strided x")
    mb = rand_mask((1, xs.shape[1]), density, "ms-bcast", density)  # broadcast mask: element path
    same(BI.masked_select(xs, mb), torch.masked_select(xs, mb), "masked_select broadcast mask")
    h = x.to(torch.float16)
    same(BI.masked_select(h, m), torch.masked_select(h, m), "masked_select f16")
    c = torch.complex(x.double(), -x.double())
    same(BI.masked_select(c, m), torch.masked_select(c, m), "masked_select c128")


def test_nonzero_past_2_31_elements():
    # int64 positions: a [65537, 32768] bool mask (2^31 + 2^15 elements) with a few set bits,
    # the last ones past 2^31.
    if torch.cuda.mem_get_info()[0] < 6 << 30:
        pytest.skip("needs 6 GiB free")
    rows, cols = 65537, 32768
    m = torch.zeros(rows, cols, dtype=torch.bool, device=DEV)
    pts = [(0, 0), (1, 5), (40000, 123), (65535, 32767), (65536, 0), (65536, 17), (65536, 32767)]
    for r, c in pts:
        m[r, c] = True
    ref = torch.tensor(pts, dtype=torch.int64, device=DEV)
    same(BI.nonzero(m), ref, "nonzero past 2^31")
    flat = m.view(-1)[1:]  # misaligned by one byte, 1-d coordinates past 2^31
    ref1 = torch.tensor([[r * cols + c - 1] for r, c in pts[1:]], dtype=torch.int64, device=DEV)
    same(BI.nonzero(flat), ref1, "nonzero past 2^31, 1-d offset")
