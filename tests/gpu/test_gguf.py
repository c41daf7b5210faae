"""GPU conformance of the GGUF block formats (include/baracuda/ops/gguf.hpp) vs a torch reference.

The reference dequantizer below is written from ggml's block layouts (ggml-common.h) and its
dequantize_row_* formulas in float32; it is pinned to ggml by known-answer hashes (gguf-py's
dequantization of fixed pseudo-random blocks, NaN and inf included, recorded in KAT_SHA256) and, where
the `gguf` package is importable, compared with gguf-py directly. Against it:
  * gguf_dequantize is bit-exact in float32 (NaN positions must match) and equals the float32 result
    rounded to float16 / bfloat16;
  * gguf_linear / the decode matvec (m <= 8) is compared with float64 x @ W.T (+ bias) within a K-scaled
    bound on float32 sums (64 + K/64 multiples of 2^-24 |x| (|scale code| + |min|)) plus the output
    dtype's rounding; more rows take dequantize + GEMM (weights rounded to x's dtype).
Data: random bytes (every code value) with the f16 scale fields replaced by moderate values, and weights
quantized by the reference quantizers below (ggml's quantize_row_*_ref for the 32-element formats,
simplified but structurally valid k-quant quantizers). Outputs are poisoned before the raw calls.
"""
import hashlib
import math
import random
import zlib

import pytest

from gpu_skip import skip_unless_ready  # noqa: E402

skip_unless_ready('gguf_formats')

import torch  # noqa: E402

from baracuda import _C  # noqa: E402
from baracuda import gguf as G  # noqa: E402

DEV = "cuda"
FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"]
# ggml-common.h: (GGML_TYPE_*, elements a block, sizeof(block_*))
SPEC = {"q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q8_0": (8, 32, 34),
        "q2_K": (10, 256, 84), "q3_K": (11, 256, 110), "q4_K": (12, 256, 144), "q5_K": (13, 256, 176),
        "q6_K": (14, 256, 210)}
# Byte offsets of each block's f16 fields (d, and dmin / m where the format has one).
HALVES = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "q2_K": [80, 82],
          "q3_K": [108], "q4_K": [0, 2], "q5_K": [0, 2], "q6_K": [208]}
# sha256 of gguf-py's float32 dequantization (NaN bits canonicalised to 0x7FC00000) of
# random.Random("baracuda-gguf-kat-" + fmt).randbytes(48 * block_bytes).
KAT_SHA256 = {
    "q4_0": "b8566d11fb8b4b192d2a04988acbb06c859fcc2f0366bae050effa1ede3dcec5",
    "q4_1": "441b7f596e28c0b475794ae362b0ce318f972a84cca5ceba026686e6805ae02e",
    "q5_0": "099e46fb334ec0cf7807630ead297e25b1f4dbe88191708609cb1e6e9115f69e",
    "q5_1": "a9a468a917b42854d62fdb661ff34f7cb858e30b7a741d082ea5f60381227880",
    "q8_0": "aca25847522e4114009b545ee2da1eefbcd0f3dc61456717533190b12fed5491",
    "q2_K": "e8fb9bcd3dd7347fdf6725223136d4a0ff0e46f97d6a4a409b7feb70154956b1",
    "q3_K": "ffdff66de7d8582683b6d6576dc53c71d7f3e6fa39d0afad9a5aa66c1ec9e1f3",
    "q4_K": "cdd2f23e3a35b9d309c93d03c69b2c366f0a8daeb749f7ee9aa8d10928dd87f6",
    "q5_K": "a6597ce00a2681d5cff282bcd93e0f07fda6befef7e42f4dfae978641cbadd69",
    "q6_K": "842a000b88a3d0347bab23bcd13b7a5c1cbcf5b3f7d76c7606c95b0175cd15e7",
}
KAT_BLOCKS = 48
OUT_EPS = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def gen(*parts):
    return torch.Generator(device="cpu").manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


def block_size(fmt):
    return SPEC[fmt][1]


def block_bytes(fmt):
    return SPEC[fmt][2]


# ---- the reference dequantizer (ggml's dequantize_row_*, float32) -------------------------------------------
def _half(b, off):
    """The f16 field at byte `off` of every block, as float32 [nb, 1]."""
    return b[:, off:off + 2].contiguous().view(torch.float16).float()


def _u32(b, off):
    """The little-endian uint32 at byte `off` of every block, as int64 [nb]."""
    w = b[:, off:off + 4].long()
    return w[:, 0] | (w[:, 1] << 8) | (w[:, 2] << 16) | (w[:, 3] << 24)


def _nibbles(qs):
    """[nb, 16] bytes -> [nb, 32] codes: low nibbles are elements 0..15, high nibbles 16..31."""
    return torch.cat([qs & 15, qs >> 4], dim=1)


def _col(values, device):
    return torch.tensor(values, dtype=torch.int64, device=device)


def ref_parts(fmt, b):
    """Per element: the scale a, the code value q (offset applied) and the minimum m (None where the format
    has none), float32 [nb, block_size], such that the weight is ggml's a * q (+ m) in float32."""
    nb, dev = b.shape[0], b.device
    b = b.long()
    if fmt in ("q4_0", "q4_1", "q5_0", "q5_1"):
        d = _half(b.to(torch.uint8), 0)
        has_m = fmt.endswith("_1")
        m = _half(b.to(torch.uint8), 2).expand(nb, 32) if has_m else None
        qs_off = {"q4_0": 2, "q4_1": 4, "q5_0": 6, "q5_1": 8}[fmt]
        q = _nibbles(b[:, qs_off:qs_off + 16])
        if fmt.startswith("q5"):
            qh = _u32(b, 2 if fmt == "q5_0" else 4)
            q = q | (((qh[:, None] >> torch.arange(32, device=dev)) & 1) << 4)
        off = {"q4_0": 8, "q5_0": 16}.get(fmt, 0)
        return d.expand(nb, 32), (q - off).float(), m
    if fmt == "q8_0":
        d = _half(b.to(torch.uint8), 0)
        return d.expand(nb, 32), b[:, 2:34].to(torch.uint8).contiguous().view(torch.int8).float(), None
    u8 = b.to(torch.uint8)
    if fmt == "q2_K":
        sc, qs = b[:, :16], b[:, 16:80]
        d, dmin = _half(u8, 80), _half(u8, 82)
        q = (qs.view(nb, 2, 1, 32) >> _col([0, 2, 4, 6], dev).view(1, 1, 4, 1)) & 3
        a = (d * (sc & 15).float()).repeat_interleave(16, 1)
        m = -(dmin * (sc >> 4).float()).repeat_interleave(16, 1)
        return a, q.reshape(nb, 256).float(), m
    if fmt == "q3_K":
        hm, qs, s = b[:, :32], b[:, 32:96], b[:, 96:108]
        d = _half(u8, 108)
        low = (qs.view(nb, 2, 1, 32) >> _col([0, 2, 4, 6], dev).view(1, 1, 4, 1)) & 3
        hbit = (hm.view(nb, 1, 1, 32) >> _col([[0, 1, 2, 3], [4, 5, 6, 7]], dev).view(1, 2, 4, 1)) & 1
        q = low - 4 * (1 - hbit)
        i = torch.arange(16, device=dev)
        low4 = torch.where(i < 8, s[:, i % 8] & 15, s[:, i % 8] >> 4)
        high2 = (s[:, 8 + i % 4] >> (2 * (i // 4))) & 3
        a = (d * ((low4 | (high2 << 4)) - 32).float()).repeat_interleave(16, 1)
        return a, q.reshape(nb, 256).float(), None
    if fmt in ("q4_K", "q5_K"):
        d, dmin = _half(u8, 0), _half(u8, 2)
        s = b[:, 4:16]
        j = torch.arange(4, device=dev)
        sc = torch.cat([s[:, j] & 63, (s[:, j + 8] & 15) | ((s[:, j] >> 6) << 4)], 1)
        mn = torch.cat([s[:, j + 4] & 63, (s[:, j + 8] >> 4) | ((s[:, j + 4] >> 6) << 4)], 1)
        qs = b[:, 16:144] if fmt == "q4_K" else b[:, 48:176]
        q = (qs.view(nb, 4, 1, 32) >> _col([0, 4], dev).view(1, 1, 2, 1)) & 15
        if fmt == "q5_K":
            qh = b[:, 16:48]
            q = q | (((qh.view(nb, 1, 1, 32) >> _col([[0, 1], [2, 3], [4, 5], [6, 7]], dev).view(1, 4, 2, 1)) & 1) << 4)
        a = (d * sc.float()).repeat_interleave(32, 1)
        m = -(dmin * mn.float()).repeat_interleave(32, 1)
        return a, q.reshape(nb, 256).float(), m
    if fmt == "q6_K":
        ql, qh = b[:, :128].view(nb, 2, 64), b[:, 128:192]
        sc = u8[:, 192:208].contiguous().view(torch.int8).float()
        d = _half(u8, 208)
        A, B = ql[:, :, :32], ql[:, :, 32:]
        nib = torch.stack([A & 15, B & 15, A >> 4, B >> 4], dim=2)
        hi = (qh.view(nb, 2, 1, 32) >> _col([0, 2, 4, 6], dev).view(1, 1, 4, 1)) & 3
        q = (nib | (hi << 4)) - 32
        return (d * sc).repeat_interleave(16, 1), q.reshape(nb, 256).float(), None
    raise KeyError(fmt)


def ref_dequant(fmt, packed, rows, cols, with_mag=False):
    """ggml's float32 weights [rows, cols] of `packed`; with_mag: also |a q| + |m| (the rounding scale)."""
    b = packed.reshape(-1, block_bytes(fmt))
    a, q, m = ref_parts(fmt, b)
    w = a * q if m is None else a * q + m
    w = w.reshape(rows, cols)
    if not with_mag:
        return w
    mag = (a * q).abs() + (m.abs() if m is not None else 0)
    return w, mag.reshape(rows, cols)


def canonical_sha256(y):
    bits = y.reshape(-1).view(torch.int32)
    bits = torch.where(torch.isnan(y.reshape(-1)), torch.full_like(bits, 0x7FC00000), bits)
    return hashlib.sha256(bytes(bits.cpu().view(torch.uint8).tolist())).hexdigest()


def kat_bytes(fmt):
    raw = random.Random("baracuda-gguf-kat-" + fmt).randbytes(KAT_BLOCKS * block_bytes(fmt))
    return torch.tensor(list(raw), dtype=torch.uint8, device=DEV)


# ---- test data ------------------------------------------------------------------------------------------------
def random_blocks(fmt, rows, cols, *seed, sane=True):
    """Uniform random bytes (every code and scale pattern); sane: the f16 fields replaced by values of
    magnitude 2^-8 .. 2^-6 (random sign for d; dmin / m as well), so sums stay well scaled."""
    nb = rows * (cols // block_size(fmt))
    g = gen("blocks", fmt, rows, cols, *seed)
    b = torch.randint(0, 256, (nb, block_bytes(fmt)), generator=g, dtype=torch.uint8)
    if sane and nb:
        for off in HALVES[fmt]:
            v = (torch.rand(nb, generator=g) * 3 + 1) * 2.0 ** -8
            v = torch.where(torch.rand(nb, generator=g) < 0.5, -v, v)
            b[:, off:off + 2] = v.to(torch.float16).view(torch.uint8).view(nb, 2)
    return b.reshape(rows, -1).to(DEV) if rows else b.reshape(0, 0).to(DEV)


def randn(shape, dt, *seed, scale=1.0):
    g = gen("x", *seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dt).to(DEV)


def same_bytes(got, ref, what):
    """Bit-identical, except that NaN matches NaN whatever its payload and sign (positions must match)."""
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    gn, rn = got.float().isnan(), ref.float().isnan()
    assert torch.equal(gn, rn), f"{what}: NaN positions differ ({int(gn.sum())} vs {int(rn.sum())})"
    es = got.element_size()
    g = got.contiguous().reshape(-1).view(torch.uint8).reshape(-1, es)[~gn.reshape(-1)]
    r = ref.contiguous().reshape(-1).view(torch.uint8).reshape(-1, es)[~rn.reshape(-1)]
    bad = (g != r).any(-1).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} element(s) differ, first at (non-NaN) index {bad[0].item()}"


def not_degenerate(y, what):
    if y.numel() > 16:
        frac = (y.float().abs() > 0).double().mean().item()
        assert frac > 0.5, f"{what}: output mostly zeros ({frac:.2f}): degenerate test data"


# ---- reference quantizers (ggml's quantize_row_*_ref for the 32-element formats; simplified k-quants) ----------
def _f16_bytes(v):
    """[nb] float32 -> [nb, 2] uint8 of the float16 value."""
    return v.to(torch.float16).reshape(-1, 1).view(torch.uint8)


def _trunc_u8(v):
    return v.trunc().to(torch.int64)


def _round_away(v):  # C roundf
    return torch.sign(v) * torch.floor(v.abs() + 0.5)


def _pack_u32_le(bits):
    """[nb, 32] of 0/1 -> [nb, 4] uint8 (bit k of the little-endian word)."""
    w = (bits.long() << torch.arange(32, device=bits.device)).sum(1)
    return torch.stack([(w >> (8 * i)) & 255 for i in range(4)], 1).to(torch.uint8)


def _inv(d):
    return torch.where(d != 0, 1.0 / d, torch.zeros_like(d))


def _signed_max(x):
    """Per row the element of largest magnitude, with its sign (ggml's `max`), [nb, 1]."""
    return x.gather(1, x.abs().argmax(1, keepdim=True))


def quantize_ref(fmt, w):
    """Quantize float32 [rows, cols] to GGUF bytes [rows, cols / block * block_bytes]."""
    rows, cols = w.shape
    bs = block_size(fmt)
    x = w.float().reshape(-1, bs)
    nb = x.shape[0]
    u8 = lambda t: t.to(torch.uint8)  # noqa: E731
    if fmt in ("q4_0", "q5_0"):
        lv = 8 if fmt == "q4_0" else 16
        d = _signed_max(x) / -lv
        q = _trunc_u8(x * _inv(d) + (lv + 0.5)).clamp(max=2 * lv - 1)
        parts = [_f16_bytes(d)]
    elif fmt in ("q4_1", "q5_1"):
        top = 15 if fmt == "q4_1" else 31
        mn, mx = x.min(1, keepdim=True).values, x.max(1, keepdim=True).values
        d = (mx - mn) / top
        q = _trunc_u8((x - mn) * _inv(d) + 0.5).clamp(max=top)
        parts = [_f16_bytes(d), _f16_bytes(mn)]
    elif fmt == "q8_0":
        d = x.abs().max(1, keepdim=True).values / 127
        q = _round_away(x * _inv(d)).to(torch.int8)
        return torch.cat([_f16_bytes(d), q.view(torch.uint8)], 1).reshape(rows, -1)
    if fmt in ("q4_0", "q4_1", "q5_0", "q5_1"):
        if fmt.startswith("q5"):
            parts.append(_pack_u32_le(q >> 4))
        parts.append(u8((q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)))
        return torch.cat(parts, 1).reshape(rows, -1)
    return _quantize_k(fmt, x, nb).reshape(rows, -1)


def _k_scales(sub_scale, sub_min, top_s, top_m):
    """Super-block d / dmin and the integer sub-block scales / minimums (0..top)."""
    d = sub_scale.max(1, keepdim=True).values / top_s
    sc = _round_away(sub_scale * _inv(d)).clamp(0, top_s).long()
    if sub_min is None:
        return d, sc, None, None
    dmin = sub_min.max(1, keepdim=True).values / top_m
    mn = _round_away(sub_min * _inv(dmin)).clamp(0, top_m).long()
    return d, sc, dmin, mn


def _quantize_k(fmt, x, nb):
    u8 = lambda t: t.to(torch.uint8)  # noqa: E731
    dev = x.device
    if fmt in ("q2_K", "q4_K", "q5_K"):
        gs = 16 if fmt == "q2_K" else 32
        top = {"q2_K": 3, "q4_K": 15, "q5_K": 31}[fmt]
        top_s = 15 if fmt == "q2_K" else 63
        xs = x.view(nb, -1, gs)
        lo = xs.min(2).values.clamp(max=0)           # minimum as a non-negative offset -lo
        scale = (xs.max(2).values - lo) / top
        d, sc, dmin, mn = _k_scales(scale, -lo, top_s, top_s)
        d16, dmin16 = d.half().float(), dmin.half().float()
        eff_s = (d16 * sc.float()).repeat_interleave(gs, 1)
        eff_m = (dmin16 * mn.float()).repeat_interleave(gs, 1)
        q = _round_away((x + eff_m) * _inv(eff_s)).clamp(0, top).long()
        if fmt == "q2_K":
            qs = q.view(nb, 2, 4, 32)
            qs = (qs[:, :, 0] | (qs[:, :, 1] << 2) | (qs[:, :, 2] << 4) | (qs[:, :, 3] << 6)).reshape(nb, 64)
            return torch.cat([u8(sc | (mn << 4)), u8(qs), _f16_bytes(d), _f16_bytes(dmin)], 1)
        j = torch.arange(4, device=dev)
        s = torch.empty(nb, 12, dtype=torch.int64, device=dev)
        s[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        s[:, j + 4] = (mn[:, j] & 63) | ((mn[:, j + 4] >> 4) << 6)
        s[:, j + 8] = (sc[:, j + 4] & 15) | ((mn[:, j + 4] & 15) << 4)
        qv = q.view(nb, 4, 2, 32)
        qs = (qv[:, :, 0] & 15) | ((qv[:, :, 1] & 15) << 4)
        parts = [_f16_bytes(d), _f16_bytes(dmin), u8(s)]
        if fmt == "q5_K":
            hb = (qv >> 4) & 1  # [nb, c, p, l] -> bit 2c + p of qh[l]
            qh = (hb.view(nb, 8, 32) << torch.arange(8, device=dev).view(1, 8, 1)).sum(1)
            parts.append(u8(qh))
        parts.append(u8(qs.reshape(nb, 128)))
        return torch.cat(parts, 1)
    if fmt == "q3_K":
        xs = x.view(nb, 16, 16)
        sub = _signed_max(xs.reshape(nb * 16, 16)).view(nb, 16) / -4  # q in [-4, 3]
        amax = sub.abs().max(1, keepdim=True).values
        d = amax / 31
        sc = _round_away(sub * _inv(d)).clamp(-32, 31).long()
        eff = (d.half().float() * sc.float()).repeat_interleave(16, 1)
        q = _round_away(x * _inv(eff)).clamp(-4, 3).long() + 4  # u = low2 + 4 hbit
        qv = q.view(nb, 2, 4, 32)
        qs = ((qv[:, :, 0] & 3) | ((qv[:, :, 1] & 3) << 2) | ((qv[:, :, 2] & 3) << 4) | ((qv[:, :, 3] & 3) << 6))
        hb = (qv >> 2) & 1  # bit 4n + j of hmask[l]
        hmask = (hb.view(nb, 8, 32) << torch.arange(8, device=dev).view(1, 8, 1)).sum(1)
        u = sc + 32
        i = torch.arange(8, device=dev)
        s = torch.empty(nb, 12, dtype=torch.int64, device=dev)
        s[:, i] = (u[:, i] & 15) | ((u[:, i + 8] & 15) << 4)
        k4 = torch.arange(4, device=dev)
        s[:, 8 + k4] = ((u[:, k4] >> 4) | ((u[:, k4 + 4] >> 4) << 2) | ((u[:, k4 + 8] >> 4) << 4)
                        | ((u[:, k4 + 12] >> 4) << 6))
        return torch.cat([u8(hmask), u8(qs.reshape(nb, 64)), u8(s), _f16_bytes(d)], 1)
    if fmt == "q6_K":
        xs = x.view(nb, 16, 16)
        sub = _signed_max(xs.reshape(nb * 16, 16)).view(nb, 16) / -32  # q in [-32, 31]
        d = sub.abs().max(1, keepdim=True).values / 127
        sc = _round_away(sub * _inv(d)).clamp(-128, 127).long()
        eff = (d.half().float() * sc.float()).repeat_interleave(16, 1)
        q = _round_away(x * _inv(eff)).clamp(-32, 31).long() + 32
        qv = q.view(nb, 2, 4, 32)  # element 128n + 32p + l
        A = (qv[:, :, 0] & 15) | ((qv[:, :, 2] & 15) << 4)
        B = (qv[:, :, 1] & 15) | ((qv[:, :, 3] & 15) << 4)
        ql = torch.cat([A, B], 2).reshape(nb, 128)
        qh = ((qv[:, :, 0] >> 4) | ((qv[:, :, 1] >> 4) << 2) | ((qv[:, :, 2] >> 4) << 4)
              | ((qv[:, :, 3] >> 4) << 6)).reshape(nb, 64)
        return torch.cat([u8(ql), u8(qh), sc.to(torch.int8).view(torch.uint8), _f16_bytes(d)], 1)
    raise KeyError(fmt)


# Round-trip RMS error bounds (relative to RMS(w)) of the reference quantizers on normal data.
ROUNDTRIP = {"q4_0": 0.15, "q4_1": 0.12, "q5_0": 0.08, "q5_1": 0.06, "q8_0": 0.01, "q2_K": 0.5, "q3_K": 0.3,
             "q4_K": 0.12, "q5_K": 0.06, "q6_K": 0.03}


# ---- the table -------------------------------------------------------------------------------------------------
def test_format_table_matches_ggml():
    rows = {r["name"]: r for r in _C.gguf_formats()}
    assert sorted(rows) == sorted(FORMATS)
    for name, (t, bs, nbytes) in SPEC.items():
        r = rows[name]
        assert (r["ggml_type"], r["block_size"], r["block_bytes"]) == (t, bs, nbytes), name
    assert G._fmt("Q4_K") == "q4_K" and G._fmt(12) == "q4_K" and G._fmt("q8_0") == "q8_0"
    with pytest.raises(ValueError, match="unknown GGUF format"):
        G._fmt("q4_2")
    assert G.gguf_packed_bytes("q6_K", (3, 512)) == 3 * 2 * 210


@pytest.mark.parametrize("fmt", FORMATS)
def test_reference_matches_ggml_known_answers(fmt):
    """The torch reference reproduces gguf-py's dequantization (hashes recorded from gguf-py)."""
    y = ref_dequant(fmt, kat_bytes(fmt), KAT_BLOCKS, block_size(fmt)).reshape(-1)
    assert canonical_sha256(y) == KAT_SHA256[fmt], f"{fmt}: the reference dequantizer disagrees with ggml"


@pytest.mark.parametrize("fmt", FORMATS)
def test_against_gguf_py(fmt):
    """Second reference: gguf-py's own dequantizer (when the gguf package is importable)."""
    gq = pytest.importorskip("gguf.quants")
    import numpy as np
    gg = pytest.importorskip("gguf")
    qt = getattr(gg.GGMLQuantizationType, fmt.upper())
    rows, cols = 5, 3 * block_size(fmt)
    b = random_blocks(fmt, rows, cols, "gguf-py", sane=False)
    with np.errstate(all="ignore"):
        want = torch.from_numpy(gq.dequantize(b.cpu().numpy().reshape(-1), qt).astype(np.float32).reshape(rows, cols))
    same_bytes(ref_dequant(fmt, b, rows, cols).cpu(), want, f"{fmt} reference vs gguf-py")
    same_bytes(G.gguf_dequantize(b, fmt, (rows, cols)).cpu(), want, f"{fmt} baracuda vs gguf-py")


# ---- dequantize ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows,nblk", [(1, 1), (7, 3), (33, 5), (129, 9), (2, 37)])
def test_dequantize_bit_exact(fmt, dtype, rows, nblk):
    """Every byte pattern (NaN / inf scales included): float32 bit for bit, f16 / bf16 = float32 rounded."""
    cols = nblk * block_size(fmt)
    b = random_blocks(fmt, rows, cols, "dq", str(dtype), sane=False)
    ref = ref_dequant(fmt, b, rows, cols)
    got = G.gguf_dequantize(b, fmt, (rows, cols), dtype)
    same_bytes(got, ref.to(dtype), f"{fmt} -> {dtype} [{rows}, {cols}]")


@pytest.mark.sanitizer
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_raw_call_writes_every_element(fmt):
    """The raw binding into a poisoned output, an odd number of blocks (partial warp tiles), and a packed
    view at an odd byte offset (copied to an aligned buffer by the Python layer)."""
    rows, cols = 3, 11 * block_size(fmt)
    b = random_blocks(fmt, rows, cols, "raw")
    out = torch.full((rows, cols), float("nan"), device=DEV)
    _C.gguf_dequantize(b.reshape(-1), out, fmt)
    torch.cuda.synchronize()
    same_bytes(out, ref_dequant(fmt, b, rows, cols), f"{fmt} raw")
    holder = torch.zeros(b.numel() + 1, dtype=torch.uint8, device=DEV)
    holder[1:] = b.reshape(-1)
    same_bytes(G.gguf_dequantize(holder[1:], fmt, (rows, cols)), ref_dequant(fmt, b, rows, cols), f"{fmt} offset")
    assert G.gguf_dequantize(b[:0].reshape(-1), fmt, (0, cols)).shape == (0, cols)


# ---- matvec / linear ------------------------------------------------------------------------------------------
def linear_ref(x, w, mag, bias):
    """float64 x @ W.T (+ bias) and the rounding scale |x| @ mag.T (+ |bias|)."""
    ref = x.double() @ w.double().t()
    scale = x.double().abs() @ mag.double().t()
    if bias is not None:
        ref = ref + bias.double()
        scale = scale + bias.double().abs()
    return ref, scale


def check_linear(y, ref, scale, k, dtype, what, weight_eps=0.0):
    """float32 sums (K-scaled bound) + the output's rounding (+ the weights' rounding on the GEMM path)."""
    unwritten = torch.isnan(y.double()) & ~torch.isnan(ref)
    assert not unwritten.any(), f"{what}: {int(unwritten.sum())} NaN output(s) (unwritten or wrong)"
    err = (y.double() - ref).abs()
    allowed = OUT_EPS[dtype] * ref.abs() + ((64 + k / 64) * 2.0 ** -24 + weight_eps) * scale + 1e-30
    bad = (err > allowed).nonzero()
    assert bad.numel() == 0, (f"{what}: {bad.shape[0]} element(s) off, first {tuple(bad[0].tolist())}: got "
                              f"{y.double()[tuple(bad[0])].item()} want {ref[tuple(bad[0])].item()} "
                              f"(allowed {allowed[tuple(bad[0])].item():.3g})")


SHAPES = {32: [(64, 32), (37, 96), (300, 4096), (129, 11008)], 256: [(64, 256), (37, 768), (300, 4096), (129, 11008)]}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("shape_i", [0, 1, 2, 3])
def test_matvec(fmt, dtype, m, shape_i):
    n, k = SHAPES[block_size(fmt)][shape_i]
    with_bias = shape_i % 2 == 1
    b = random_blocks(fmt, n, k, "mv")
    w, mag = ref_dequant(fmt, b, n, k, with_mag=True)
    x = randn((m, k), dtype, "mv", fmt, m, n, k)
    bias = randn((n,), dtype, "mvb", fmt, n) if with_bias else None
    y = G.gguf_linear(x, b, fmt, n, k, bias)
    assert y.dtype == dtype and y.shape == (m, n)
    ref, scale = linear_ref(x, w, mag, bias)
    not_degenerate(ref, f"{fmt} ref")
    check_linear(y, ref, scale, k, dtype, f"{fmt} {dtype} m={m} n={n} k={k} bias={with_bias}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_split_k_and_views(fmt):
    """A long K (split into chunks for m = 8), x rows with a padded stride, 3-D x, poisoned raw output, and
    run-to-run bit identity."""
    n, k = 96, 14336
    b = random_blocks(fmt, n, k, "long")
    w, mag = ref_dequant(fmt, b, n, k, with_mag=True)
    base = randn((8, k + 24), torch.bfloat16, "long", fmt)
    x = base[:, :k]  # row stride k + 24
    bias = randn((n,), torch.bfloat16, "longb", fmt)
    y = torch.full((8, n), float("nan"), dtype=torch.bfloat16, device=DEV)
    t = {"x": x, "weight": b.reshape(-1), "bias": bias, "y": y}
    nws = _C.gguf_matvec_workspace_size(t, fmt)
    assert nws > 0, "m = 8 over K = 14336 is expected to split K"
    ws = torch.empty(nws, dtype=torch.uint8, device=DEV)
    _C.gguf_matvec(t, fmt, torch.cuda.current_stream().cuda_stream, ws)
    torch.cuda.synchronize()
    ref, scale = linear_ref(x, w, mag, bias)
    check_linear(y, ref, scale, k, torch.bfloat16, f"{fmt} split-K raw call")
    y2 = G.gguf_linear(x.contiguous(), b, fmt, n, k, bias)
    same_bytes(y2, y, f"{fmt} run to run (strided vs contiguous x)")
    x3 = randn((2, 2, k), torch.float16, "long3", fmt)
    y3 = G.gguf_linear(x3, b, fmt, n, k)
    assert y3.shape == (2, 2, n)
    r3, s3 = linear_ref(x3.reshape(4, k), w, mag, None)
    check_linear(y3.reshape(4, n), r3, s3, k, torch.float16, f"{fmt} 3-D x")


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_weights_roundtrip_and_linear(fmt):
    """Weights quantized by the reference quantizer: dequantize reproduces them closely, and the matvec
    matches the dequantized weight's product."""
    n, k = 128, 2 * 1024
    wf = randn((n, k), torch.float32, "qw", fmt, scale=0.02)
    b = quantize_ref(fmt, wf)
    assert b.shape == (n, k // block_size(fmt) * block_bytes(fmt)) and b.dtype == torch.uint8
    wq = G.gguf_dequantize(b, fmt, (n, k))
    same_bytes(wq, ref_dequant(fmt, b, n, k), f"{fmt} dequantize of quantized weights")
    rel = ((wq - wf).pow(2).mean().sqrt() / wf.pow(2).mean().sqrt()).item()
    assert rel < ROUNDTRIP[fmt], f"{fmt}: round-trip RMS error {rel:.3f} >= {ROUNDTRIP[fmt]} (layout mismatch?)"
    x = randn((2, k), torch.bfloat16, "qx", fmt)
    w, mag = ref_dequant(fmt, b, n, k, with_mag=True)
    ref, scale = linear_ref(x, w, mag, None)
    check_linear(G.gguf_linear(x, b, fmt, n, k), ref, scale, k, torch.bfloat16, f"{fmt} quantized weights")


@pytest.mark.parametrize("fmt", ["q4_0", "q4_K", "q6_K"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_linear_prefill_dequantizes_then_gemm(fmt, dtype):
    """More than 8 rows: the weight dequantized to x's dtype, then baracuda's GEMM."""
    n, k = 200, 1024
    b = random_blocks(fmt, n, k, "pf")
    w, mag = ref_dequant(fmt, b, n, k, with_mag=True)
    x = randn((33, k), dtype, "pf", fmt)
    bias = randn((n,), dtype, "pfb", fmt)
    y = G.gguf_linear(x, b, fmt, n, k, bias)
    ref, scale = linear_ref(x, w, mag, bias)
    weps = OUT_EPS[dtype] if dtype != torch.float32 else 2.0 ** -10  # bf16 weights / TF32 if torch allows it
    check_linear(y, ref, scale, k, dtype, f"{fmt} prefill", weight_eps=weps)


def test_linear_autograd():
    fmt, n, k = "q4_K", 64, 512
    b = random_blocks(fmt, n, k, "ag")
    w = ref_dequant(fmt, b, n, k)
    x = randn((3, k), torch.float32, "ag").requires_grad_()
    bias = randn((n,), torch.float32, "agb").requires_grad_()
    y = G.gguf_linear(x, b, fmt, n, k, bias)
    dy = randn((3, n), torch.float32, "agdy")
    y.backward(dy)
    torch.testing.assert_close(x.grad.double(), dy.double() @ w.double(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bias.grad, dy.sum(0), rtol=1e-5, atol=1e-5)


def test_refusals():
    fmt = "q4_K"
    b = random_blocks(fmt, 8, 512, "ref")
    x = randn((9, 512), torch.bfloat16, "ref")
    y = torch.empty((9, 8), dtype=torch.bfloat16, device=DEV)
    with pytest.raises(RuntimeError, match=r"gguf_matvec: m expected <= 8.*got 9"):
        _C.gguf_matvec({"x": x, "weight": b.reshape(-1), "y": y}, fmt)
    with pytest.raises(RuntimeError, match=r"gguf_matvec: weight expected 4608 bytes \(q4_K: 8 rows x 1024 cols"):
        _C.gguf_matvec({"x": randn((1, 1024), torch.bfloat16, "r2"), "weight": b.reshape(-1),
                        "y": torch.empty((1, 8), dtype=torch.bfloat16, device=DEV)}, fmt)
    with pytest.raises(RuntimeError, match=r"gguf_matvec: k=100 expected a multiple of q4_K's block size 256"):
        _C.gguf_matvec({"x": randn((1, 100), torch.bfloat16, "r3"), "weight": b.reshape(-1),
                        "y": torch.empty((1, 8), dtype=torch.bfloat16, device=DEV)}, fmt)
    with pytest.raises(RuntimeError, match=r"gguf_dequantize: cols=100 expected a multiple of q4_K's block size"):
        _C.gguf_dequantize(b.reshape(-1), torch.empty((1, 100), device=DEV), fmt)
    with pytest.raises(RuntimeError, match=r"gguf_dequantize: dtype expected one of"):
        _C.gguf_dequantize(b.reshape(-1), torch.empty((8, 512), dtype=torch.float64, device=DEV), fmt)
    with pytest.raises(RuntimeError, match="unknown GGUF format"):
        _C.gguf_dequantize(b.reshape(-1), torch.empty((8, 512), device=DEV), "q4_2")
    with pytest.raises(RuntimeError, match=r"packed expected 2304 bytes"):
        G.gguf_dequantize(b.reshape(-1)[:-1], fmt, (8, 512))
