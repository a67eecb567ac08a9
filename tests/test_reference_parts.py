"""Each reference part against an independent naive implementation written here.

The naive versions use explicit loops and float64 (a different formulation
from the reference), so agreement is evidence, not tautology.
"""

from __future__ import annotations

import math

import pytest
import torch

import drill.reference as R

IMPLS = ["fused", "math"]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed)).to(dtype)


# --- naive implementations ---------------------------------------------------


def naive_attention(q, k, v, allowed, scale=None):
    """Loop over (batch, head, query); allowed[b][h][i][j] decides; empty rows -> zeros."""
    B, Hq, Tq, d = q.shape
    Hkv, Tk, dv = k.shape[1], k.shape[2], v.shape[3]
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(B, Hq, Tq, dv, dtype=torch.float64)
    for b in range(B):
        for h in range(Hq):
            kh = h // (Hq // Hkv)
            for i in range(Tq):
                js = [j for j in range(Tk) if allowed(b, h, i, j)]
                if not js:
                    continue
                s = torch.tensor([float(q[b, h, i].double() @ k[b, kh, j].double()) * scale for j in js])
                w = torch.exp(s - s.max())
                w = w / w.sum()
                for wj, j in zip(w, js, strict=True):
                    out[b, h, i] += wj * v[b, kh, j].double()
    return out


def naive_rope(x, positions, base, convention):
    """Per position, per pair, a 2x2 rotation with Python's math.cos/sin in float64."""
    d = x.shape[-1]
    out = x.double().clone()
    for t, m in enumerate(positions.tolist()):
        for i in range(d // 2):
            theta = base ** (-2 * i / d)
            c, s = math.cos(m * theta), math.sin(m * theta)
            a_idx, b_idx = (i, i + d // 2) if convention == "half" else (2 * i, 2 * i + 1)
            a, b = x[..., t, a_idx].double(), x[..., t, b_idx].double()
            out[..., t, a_idx] = a * c - b * s
            out[..., t, b_idx] = a * s + b * c
    return out


def naive_rms_norm(x, weight, eps):
    rows = x.double().reshape(-1, x.shape[-1])
    out = torch.empty_like(rows)
    for r, row in enumerate(rows):
        ms = sum(float(v) ** 2 for v in row) / row.numel()
        out[r] = row / math.sqrt(ms + eps) * weight.double()
    return out.reshape(x.shape)


def naive_layer_norm(x, weight, bias, eps):
    """Per row in float64 with Python sums: mean, then the population variance of the centred values."""
    rows = x.double().reshape(-1, x.shape[-1])
    out = torch.empty_like(rows)
    for r, row in enumerate(rows.tolist()):
        mean = sum(row) / len(row)
        var = sum((v - mean) ** 2 for v in row) / len(row)
        out[r] = torch.tensor([(v - mean) / math.sqrt(var + eps) for v in row], dtype=torch.float64)
    return (out * weight.double() + bias.double()).reshape(x.shape)


def naive_cross_entropy(logits, targets, ignore_index=-100, ls=0.0):
    """Per position with math.exp/math.log in float64: (1 - ls) * -log p[t] + ls * mean_v -log p[v]."""
    v = logits.shape[-1]
    rows = logits.double().reshape(-1, v).tolist()
    total, kept = 0.0, 0
    for row, t in zip(rows, targets.reshape(-1).tolist(), strict=True):
        if t == ignore_index:
            continue
        m = max(row)
        lse = m + math.log(sum(math.exp(z - m) for z in row))
        total += (1 - ls) * (lse - row[t]) + ls * sum(lse - z for z in row) / v
        kept += 1
    return torch.tensor(total / kept, dtype=torch.float64)


def naive_swiglu(x, w_gate, w_up, w_down):
    x = x.double()
    g = x @ w_gate.double().T
    silu = g / (1 + torch.exp(-g))
    return (silu * (x @ w_up.double().T)) @ w_down.double().T


def close(a, b, tol):
    diff = (a.double() - b.double()).abs().max().item()
    assert diff <= tol, f"max abs diff {diff:.3g} > {tol}"


# --- backend -----------------------------------------------------------------


def test_use_impl_restores_default_even_on_error():
    assert R.get_impl() == "fused"
    with pytest.raises(RuntimeError):
        with R.use_impl("math"):
            assert R.get_impl() == "math"
            raise RuntimeError("boom")
    assert R.get_impl() == "fused"


def test_default_impl_is_what_functions_use(monkeypatch):
    import drill.reference.attention as A

    seen = []
    monkeypatch.setattr(A, "_sdpa_math", lambda *a: seen.append("math") or a[0])
    monkeypatch.setattr(A, "_sdpa_fused", lambda *a: seen.append("fused") or a[0])
    q = randn(1, 1, 2, 4)
    R.sdpa(q, q, q)
    with R.use_impl("math"):
        R.sdpa(q, q, q)
    R.sdpa(q, q, q, impl="math")
    assert seen == ["fused", "math", "math"]


# --- attention ---------------------------------------------------------------


def test_causal_mask_is_bottom_right_aligned():
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(R.causal_mask(2, 5), expected)
    assert torch.equal(R.causal_mask(4, 4), torch.ones(4, 4).tril().bool())
    # More queries than keys: the first rows see nothing.
    m = R.causal_mask(3, 2)
    assert not m[0].any() and m[1].tolist() == [True, False] and m[2].all()


ATTN_CASES = {
    # name: (B, Hq, Hkv, Tq, Tk, mask kind, causal)
    "plain": (2, 2, 2, 5, 5, None, False),
    "square-causal": (1, 2, 2, 6, 6, None, True),
    "chunk-causal": (2, 4, 2, 3, 7, None, True),
    "decode-causal": (1, 4, 1, 1, 6, None, True),
    "gqa-masked": (2, 4, 2, 4, 6, "random", False),
    "mask-and-causal": (1, 2, 1, 4, 6, "random", True),
}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", sorted(ATTN_CASES))
def test_sdpa_matches_naive(case, impl):
    B, Hq, Hkv, Tq, Tk, mask_kind, causal = ATTN_CASES[case]
    q, k, v = randn(B, Hq, Tq, 8, seed=1), randn(B, Hkv, Tk, 8, seed=2), randn(B, Hkv, Tk, 6, seed=3)
    mask = None
    if mask_kind == "random":
        mask = torch.rand(B, 1, Tq, Tk, generator=gen(4)) > 0.3
    offset = Tk - Tq

    def allowed(b, h, i, j):
        ok = True if mask is None else bool(mask[b, 0, i, j])
        return ok and (not causal or j <= i + offset)

    out = R.sdpa(q, k, v, mask, causal=causal, impl=impl)
    assert out.shape == (B, Hq, Tq, 6) and out.dtype == q.dtype
    close(out, naive_attention(q, k, v, allowed), 1e-5)


MASK_SHAPES = {  # every legal broadcast of a (B, H, T_q, T_k) = (2, 3, 4, 5) mask
    "key (T_k,)": (5,),
    "query (T_q, 1)": (4, 1),
    "scalar ()": (),
    "padding (B, 1, 1, T_k)": (2, 1, 1, 5),
    "per-head (H, T_q, T_k)": (3, 4, 5),
    "row (1, T_k)": (1, 5),
}


def test_broadcast_shape_agrees_with_torch() -> None:
    """reference.attention.broadcast_shape stands in for torch.broadcast_shapes (whose first call imports sympy):
    every pair of shapes of up to 4 dims from sizes 0..3, same shape or the same refusal."""
    import itertools

    from drill.reference.attention import broadcast_shape

    shapes = [s for n in range(4) for s in itertools.product((0, 1, 2, 3), repeat=n)]
    for a, b in itertools.product(shapes[::3], shapes[::2]):
        try:
            want = tuple(torch.broadcast_shapes(a, b))
        except RuntimeError:
            want = None
        try:
            got = broadcast_shape(a, b)
        except ValueError:
            got = None
        assert got == want, (a, b)


def test_a_cold_grader_never_imports_sympy() -> None:
    """Grading attention (the mask check, the out shape) and a failing kv_cache file's diagnosis (the replays'
    masks) must not pull in torch's symbolic shapes: sympy and mpmath are ~500 modules, 0.2-0.7 s of every cold
    check that imported them."""
    import subprocess
    import sys
    from pathlib import Path

    sols = Path(__file__).parent / "fixtures" / "solutions"
    code = (
        "import sys\nfrom pathlib import Path\nfrom drill.judge.check import check_file\n"
        "from drill.judge.pool import ChildPool\nfrom drill.judge.runner import Limits\n"
        "with ChildPool() as pool:\n"
        "    for f in sys.argv[1:]:\n"
        "        r = check_file(Path(f), Path(f).parent.name, 1, Limits(), pool=pool)\n"
        "        print(Path(f).name, r.status)\n"
        "print('sympy' in sys.modules)\n"
    )
    files = [sols / "attention" / "good_matmul_softmax.py", sols / "mha" / "bug_mask_inverted__mha.py",
             sols / "kv_cache" / "bug_kv_rope_on_values__two_bugs_kv_mask_top_left.py"]
    out = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split()
    assert lines[-1] == "False", out.stdout
    assert lines[:6] == ["good_matmul_softmax.py", "pass", "bug_mask_inverted__mha.py", "fail",
                         "bug_kv_rope_on_values__two_bugs_kv_mask_top_left.py", "fail"], out.stdout


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", MASK_SHAPES.values(), ids=MASK_SHAPES.keys())
def test_sdpa_any_broadcastable_mask_matches_the_expanded_one(impl, shape):
    """torch 2.4's CPU SDPA got a (T_q, 1) mask wrong; the reference must not inherit that."""
    q, k, v = randn(2, 3, 4, 8, seed=41), randn(2, 3, 5, 8, seed=42), randn(2, 3, 5, 8, seed=43)
    mask = torch.rand(shape, generator=gen(44)) > 0.4 if shape else torch.tensor(True)
    full = mask.expand(2, 3, 4, 5)

    def allowed(b, h, i, j):
        return bool(full[b, h, i, j])

    close(R.sdpa(q, k, v, mask, impl=impl), naive_attention(q, k, v, allowed), 1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_sdpa_custom_scale(impl):
    q, k, v = randn(1, 1, 3, 4, seed=5), randn(1, 1, 3, 4, seed=6), randn(1, 1, 3, 4, seed=7)
    out = R.sdpa(q, k, v, scale=0.3, impl=impl)
    close(out, naive_attention(q, k, v, lambda *_: True, scale=0.3), 1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fully_masked_rows_are_zero_and_finite_with_finite_grads(impl, dtype):
    q = randn(1, 2, 4, 8, seed=8, dtype=dtype).requires_grad_()
    k = randn(1, 2, 4, 8, seed=9, dtype=dtype).requires_grad_()
    v = randn(1, 2, 4, 8, seed=10, dtype=dtype).requires_grad_()
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    out = R.sdpa(q, k, v, mask, impl=impl)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    assert (out[:, :, 1] == 0).all()
    assert out[:, :, 0].abs().sum() > 0
    out.float().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    # More queries than keys under causal: the leading rows are empty too.
    out2 = R.sdpa(q.detach(), k.detach()[:, :, :2], v.detach()[:, :, :2], causal=True, impl=impl)
    assert torch.isfinite(out2).all() and (out2[:, :, :2] == 0).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_decode_step_sees_every_key(impl):
    """One query under causal=True must attend to ALL past keys (top-left would see one)."""
    q, k, v = randn(1, 2, 1, 8, seed=11), randn(1, 2, 5, 8, seed=12), randn(1, 2, 5, 8, seed=13)
    close(R.sdpa(q, k, v, causal=True, impl=impl), R.sdpa(q, k, v, impl=impl), 1e-6)
    wrong = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (wrong - R.sdpa(q, k, v, causal=True, impl=impl)).abs().max() > 1e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_half_paths_agree_with_fp32(dtype):
    q, k, v = randn(2, 4, 16, 32, seed=14), randn(2, 2, 16, 32, seed=15), randn(2, 2, 16, 32, seed=16)
    ref = R.sdpa(q, k, v, causal=True, impl="math")
    for impl in IMPLS:
        out = R.sdpa(q.to(dtype), k.to(dtype), v.to(dtype), causal=True, impl=impl)
        assert out.dtype == dtype and torch.isfinite(out).all()
        close(out, ref, 3e-2)


def test_multi_head_attention_matches_per_head_loop():
    d, H, T = 16, 4, 5
    x = randn(2, T, d, seed=17)
    w_q, w_k, w_v, w_o = (randn(d, d, seed=s) / 4 for s in (18, 19, 20, 21))
    dh = d // H
    heads = []
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        q, k, v = x @ w_q[sl].T, x @ w_k[sl].T, x @ w_v[sl].T
        att = torch.softmax(q.double() @ k.double().transpose(1, 2) / math.sqrt(dh), -1)
        heads.append(att @ v.double())
    expected = torch.cat(heads, -1) @ w_o.double().T
    for impl in IMPLS:
        close(R.multi_head_attention(x, w_q, w_k, w_v, w_o, H, impl=impl), expected, 1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_gqa_past_kv_any_split_equals_one_pass(impl):
    d, H, Hkv, T = 32, 4, 2, 9
    x = randn(2, T, d, seed=22)
    w = [randn(o, d, seed=s) / math.sqrt(d) for o, s in ((d, 23), (16, 24), (16, 25))] + [randn(d, d, seed=26)]
    full, (k_full, v_full) = R.grouped_query_attention(x, *w, H, Hkv, rope_base=500000.0, impl=impl)
    for split in ([T], [4] + [1] * 5, [3, 3, 3], [1, 8]):
        past, outs, start = None, [], 0
        for n in split:
            out, past = R.grouped_query_attention(x[:, start : start + n], *w, H, Hkv, rope_base=500000.0, past_kv=past,
                                                  impl=impl)
            outs.append(out)
            start += n
        close(torch.cat(outs, 1), full, 1e-5)
        close(past[0], k_full, 1e-6)
    # Without rope_base it is plain causal GQA: keys are not rotated.
    _, (k_plain, _) = R.grouped_query_attention(x, *w, H, Hkv, impl=impl)
    close(k_plain, (x @ w[1].T).view(2, T, Hkv, 8).transpose(1, 2), 1e-6)


# --- RoPE --------------------------------------------------------------------


def test_rope_angles_formula():
    cos, sin = R.rope_angles(torch.arange(7), 8, base=500000.0)
    assert cos.dtype == torch.float32 and cos.shape == (7, 4)
    for m in range(7):
        for i in range(4):
            ang = m * 500000.0 ** (-2 * i / 8)
            assert abs(cos[m, i] - math.cos(ang)) < 1e-6 and abs(sin[m, i] - math.sin(ang)) < 1e-6


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_rope_matches_naive(convention, impl):
    x = randn(2, 3, 5, 8, seed=27)
    pos = torch.tensor([0, 1, 7, 100, 2048])
    close(R.apply_rope(x, pos, 10000.0, convention, impl=impl), naive_rope(x, pos, 10000.0, convention), 1e-4)


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_rope_dot_product_depends_only_on_offset(convention):
    q, k = randn(1, 1, 1, 16, seed=28), randn(1, 1, 1, 16, seed=29)

    def dot(m, n):
        qm = R.apply_rope(q, torch.tensor([m]), convention=convention)
        kn = R.apply_rope(k, torch.tensor([n]), convention=convention)
        return float((qm * kn).sum())

    for offset in (0, 3, -5):
        values = [dot(n + offset, n) for n in (5, 17, 300)]
        assert max(values) - min(values) < 1e-4, values
    assert abs(dot(8, 5) - dot(5, 8)) > 1e-3  # and it does depend on the sign of the offset


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_rope_preserves_norms(convention):
    x = randn(2, 2, 6, 32, seed=30)
    out = R.apply_rope(x, torch.arange(1000, 1006), convention=convention)
    close(out.norm(dim=-1), x.norm(dim=-1), 1e-4)


def test_half_and_interleaved_agree_under_the_permutation():
    x = randn(1, 2, 5, 12, seed=31)
    pos = torch.arange(3, 8)
    p = R.half_to_interleaved_perm(12)
    assert sorted(p.tolist()) == list(range(12))
    for impl in IMPLS:
        half = R.apply_rope(x, pos, convention="half", impl=impl)
        inter = R.apply_rope(x[..., p], pos, convention="interleaved", impl=impl)
        close(inter, half[..., p], 1e-6)
    assert (R.apply_rope(x, pos, convention="interleaved") - R.apply_rope(x, pos)).abs().max() > 1e-2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_half_precision_uses_fp32_angles(dtype):
    x = randn(1, 1, 3, 64, seed=32)
    pos = torch.tensor([5000, 30000, 65000])
    ref = naive_rope(x, pos, 10000.0, "half")
    for impl in IMPLS:
        out = R.apply_rope(x.to(dtype), pos, impl=impl)
        assert out.dtype == dtype and torch.isfinite(out).all()
        close(out, ref, 4e-2)


# --- RMSNorm -----------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_rms_norm_matches_naive(impl):
    x, w = randn(3, 4, 24, seed=33) * 3, randn(24, seed=34)
    for eps in (1e-6, 1e-2):
        close(R.rms_norm(x, w, eps, impl=impl), naive_rms_norm(x, w, eps), 1e-5)
    # eps matters: it must actually be used.
    tiny = randn(2, 24, seed=35) * 1e-3
    assert (R.rms_norm(tiny, w, 1e-6, impl=impl) - R.rms_norm(tiny, w, 1e-2, impl=impl)).abs().max() > 0.1


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_half_accumulates_in_fp32(impl, dtype):
    x = randn(4, 1024, seed=36) * 300  # sum of squares ~9e7: overflows an fp16 accumulator
    w = torch.rand(1024, generator=gen(37)) + 0.5
    out = R.rms_norm(x.to(dtype), w, 1e-6, impl=impl)
    assert out.dtype == dtype and torch.isfinite(out).all()
    close(out, naive_rms_norm(x.to(dtype), w, 1e-6), 3e-2)


def test_rms_norm_module():
    m = R.RMSNorm(8, eps=1e-5)
    assert m.weight.shape == (8,) and torch.equal(m.weight.detach(), torch.ones(8))
    x = randn(2, 8, seed=38)
    close(m(x), naive_rms_norm(x, torch.ones(8), 1e-5), 1e-5)


# --- LayerNorm -----------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", [(24,), (3, 24), (2, 4, 24), (2, 2, 3, 24)])
def test_layer_norm_matches_naive(impl, shape):
    x = randn(*shape, seed=61) * 3 + 2
    w, b = randn(24, seed=62) * 0.5 + 1, randn(24, seed=63)
    for eps in (1e-5, 1e-2):
        close(R.layer_norm(x, w, b, eps, impl=impl), naive_layer_norm(x, w, b, eps), 1e-5)
    tiny = randn(2, 24, seed=64) * 1e-3  # eps matters: it must actually be used
    assert (R.layer_norm(tiny, w, b, 1e-6, impl=impl) - R.layer_norm(tiny, w, b, 1e-2, impl=impl)).abs().max() > 0.1


@pytest.mark.parametrize("impl", IMPLS)
def test_layer_norm_is_exact_on_a_large_mean(impl):
    """Mean 100x the spread: the two-pass math path and F.layer_norm both stay within fp32 rounding."""
    x = randn(4, 64, seed=65) + 100.0
    w, b = randn(64, seed=66) * 0.5 + 1, randn(64, seed=67)
    close(R.layer_norm(x, w, b, 1e-5, impl=impl), naive_layer_norm(x, w, b, 1e-5), 1e-4)
    one_pass = (x.pow(2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True).pow(2))  # what the reference avoids
    assert (one_pass - x.var(-1, unbiased=False, keepdim=True)).abs().max() > 1e-4


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_half_accumulates_in_fp32(impl, dtype):
    x = randn(4, 512, seed=68) * 400  # squares ~1.6e5: past fp16's largest finite value
    w, b = torch.rand(512, generator=gen(69)) + 0.5, randn(512, seed=70)
    out = R.layer_norm(x.to(dtype), w, b, 1e-5, impl=impl)
    assert out.dtype == dtype and torch.isfinite(out).all()
    close(out, naive_layer_norm(x.to(dtype), w, b, 1e-5), 5e-2)


def test_layer_norm_module_and_errors():
    m = R.LayerNorm(8)
    assert m.eps == 1e-5 and torch.equal(m.weight.detach(), torch.ones(8))
    assert torch.equal(m.bias.detach(), torch.zeros(8))
    x = randn(2, 8, seed=71)
    close(m(x), naive_layer_norm(x, torch.ones(8), torch.zeros(8), 1e-5), 1e-5)
    with pytest.raises(ValueError, match="eps must be > 0"):
        R.layer_norm(x, None, None, 0.0)
    with pytest.raises(ValueError, match="bias shape"):
        R.layer_norm(x, torch.ones(8), torch.zeros(7), 1e-5)


# --- cross-entropy ------------------------------------------------------------------


def _targets(shape, v, seed, ignore=None):
    t = torch.randint(0, v, shape, generator=gen(seed))
    if ignore is not None:
        t[..., ::3] = ignore
        t.view(-1)[1] = 0 if ignore != 0 else 1  # at least one kept
    return t


CE_CASES = {
    "(N,V)": ((6, 11), None, 0.0),
    "(B,T,V)": ((2, 3, 17), None, 0.0),
    "(V,)": ((9,), None, 0.0),
    "ignored -100": ((7, 13), -100, 0.0),
    "custom ignore": ((2, 5, 8), 3, 0.0),
    "smoothing": ((5, 10), None, 0.2),
    "smoothing and ignored": ((2, 4, 12), -100, 0.1),
}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", sorted(CE_CASES))
def test_cross_entropy_matches_naive(impl, name):
    shape, ignore, ls = CE_CASES[name]
    z = randn(*shape, seed=72) * 3
    t = _targets(shape[:-1], shape[-1], 73, ignore)
    ii = -100 if ignore is None else ignore
    got = R.cross_entropy(z, t, ii, ls, impl=impl)
    assert got.shape == () and got.dtype == torch.float32
    close(got, naive_cross_entropy(z, t, ii, ls), 1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cross_entropy_large_logits_are_finite_and_exact(impl, dtype):
    """Logits ~1e4 (spread apart, and close together around 1e4): the loss is the float64 one, rounded once."""
    t = _targets((6,), 40, 74, -100)
    for z in (randn(6, 40, seed=75) * 1e4, randn(6, 40, seed=76) * 2 + 1e4):
        z = z.to(dtype)
        want = naive_cross_entropy(z, t, -100, 0.1)
        got = R.cross_entropy(z, t, -100, 0.1, impl=impl)
        assert got.dtype == dtype and torch.isfinite(got)
        ulp = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
        assert abs(float(got) - float(want)) <= ulp * max(1.0, abs(float(want))), (float(got), float(want))


def test_cross_entropy_ignored_targets_are_never_indexed_and_bad_ones_refused():
    z = randn(4, 5, seed=77)
    t = torch.tensor([1, -100, 2, -100])
    close(R.cross_entropy(z, t, impl="math"), naive_cross_entropy(z, t), 1e-6)
    with pytest.raises(ValueError, match="target 7 is not a class id"):
        R.cross_entropy(z, torch.tensor([1, 7, 2, 0]))
    with pytest.raises(ValueError, match="targets shape"):
        R.cross_entropy(z, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="label_smoothing"):
        R.cross_entropy(z, t, label_smoothing=1.5)
    assert torch.isnan(R.cross_entropy(z, torch.full((4,), -100), impl="math"))  # every position ignored: 0 / 0


# --- SwiGLU ------------------------------------------------------------------


@pytest.mark.parametrize(("d_model", "multiple_of", "expected"),
                         [(4096, 256, 11008), (512, 256, 1536), (768, 64, 2048), (10, 1, 26)])
def test_ffn_hidden_dim(d_model, multiple_of, expected):
    assert R.ffn_hidden_dim(d_model, multiple_of) == expected


@pytest.mark.parametrize("impl", IMPLS)
def test_swiglu_matches_naive(impl):
    x = randn(2, 5, 16, seed=39)
    wg, wu, wd = randn(40, 16, seed=40) / 4, randn(40, 16, seed=41) / 4, randn(16, 40, seed=42) / 6
    close(R.swiglu(x, wg, wu, wd, impl=impl), naive_swiglu(x, wg, wu, wd), 1e-5)
    m = R.SwiGLU(16, 40, impl=impl)
    with torch.no_grad():
        m.gate_proj.weight.copy_(wg), m.up_proj.weight.copy_(wu), m.down_proj.weight.copy_(wd)
    close(m(x), naive_swiglu(x, wg, wu, wd), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_swiglu_half_finite(dtype):
    x = randn(2, 5, 64, seed=43)
    wg, wu, wd = randn(176, 64, seed=44) / 8, randn(176, 64, seed=45) / 8, randn(64, 176, seed=46) / 13
    ref = naive_swiglu(x, wg, wu, wd)
    for impl in IMPLS:
        out = R.swiglu(x.to(dtype), wg.to(dtype), wu.to(dtype), wd.to(dtype), impl=impl)
        assert out.dtype == dtype and torch.isfinite(out).all()
        close(out, ref, 5e-2)


# --- fused vs math on every part, with gradients ------------------------------


def test_fused_and_math_agree_with_gradients():
    x = randn(2, 6, 32, seed=47).requires_grad_()
    parts = {
        "rms_norm": lambda impl: R.rms_norm(x, torch.linspace(0.5, 1.5, 32), 1e-5, impl=impl),
        "rope": lambda impl: R.apply_rope(x.view(2, 6, 4, 8).transpose(1, 2), torch.arange(6), impl=impl),
        "sdpa": lambda impl: R.sdpa(*(x.view(2, 6, 4, 8).transpose(1, 2),) * 3, causal=True, impl=impl),
        "swiglu": lambda impl: R.swiglu(x, randn(48, 32, seed=48) / 6, randn(48, 32, seed=49) / 6,
                                        randn(32, 48, seed=50) / 7, impl=impl),
        "layer_norm": lambda impl: R.layer_norm(x, torch.linspace(0.5, 1.5, 32), torch.linspace(-1, 1, 32), 1e-5,
                                                impl=impl),
        "cross_entropy": lambda impl: R.cross_entropy(x, _targets((2, 6), 32, 78, -100), -100, 0.1, impl=impl)[None],
    }
    for fn in parts.values():
        results = {}
        for impl in IMPLS:
            x.grad = None
            out = fn(impl)
            (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
            results[impl] = (out.detach(), x.grad.clone())
        close(results["fused"][0], results["math"][0], 1e-5)
        close(results["fused"][1], results["math"][1], 1e-4)


# --- gradients: analytic vs finite differences (float64) -----------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_gradients_match_finite_differences(impl):
    d = torch.float64
    q, k, v = (randn(1, 2, 3, 4, seed=s, dtype=d).requires_grad_() for s in (51, 52, 53))
    k1 = randn(1, 1, 4, 4, seed=54, dtype=d).requires_grad_()
    v1 = randn(1, 1, 4, 4, seed=55, dtype=d).requires_grad_()
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    w = (torch.rand(6, generator=gen(56), dtype=d) + 0.5).requires_grad_()
    x = randn(2, 6, seed=57, dtype=d).requires_grad_()
    wg, wu = randn(5, 6, seed=58, dtype=d).requires_grad_(), randn(5, 6, seed=59, dtype=d).requires_grad_()
    wd = randn(6, 5, seed=60, dtype=d).requires_grad_()
    checks = [
        (lambda a, b, c: R.sdpa(a, b, c, mask, impl=impl), (q, k, v)),
        (lambda a, b, c: R.sdpa(a, b, c, causal=True, impl=impl), (q, k1, v1)),
        (lambda a, b: R.rms_norm(a, b, 1e-5, impl=impl), (x, w)),
        (lambda a: R.apply_rope(a, torch.tensor([3, 40, 500]), impl=impl), (q,)),
        (lambda a, b, c, e: R.swiglu(a, b, c, e, impl=impl), (x, wg, wu, wd)),
        (lambda a, b, c: R.layer_norm(a, b, c, 1e-5, impl=impl), (x, w, randn(6, seed=79, dtype=d).requires_grad_())),
        (lambda a: R.cross_entropy(a, torch.tensor([4, -100]), -100, 0.2, impl=impl), (x,)),
    ]
    for fn, inputs in checks:
        assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5)


# --- attention with lse (flash_attention's ground truth) and RMSNorm's backward ----------------------------


def naive_attention_lse(q, k, v, causal):
    """Per (head, query) in float64 with Python lists: out and lse over the visible keys; none -> 0, -inf."""
    b, h, t_q, d = q.shape
    t_k = k.shape[-2]
    out = torch.zeros(b, h, t_q, v.shape[-1], dtype=torch.float64)
    lse = torch.full((b, h, t_q), -math.inf, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(t_q):
                keys = [j for j in range(t_k) if not causal or j <= t_k - t_q + i]
                if not keys:
                    continue
                s = [float(q[bi, hi, i].double() @ k[bi, hi, j].double()) / math.sqrt(d) for j in keys]
                top = max(s)
                w = [math.exp(x - top) for x in s]
                lse[bi, hi, i] = top + math.log(sum(w))
                for wj, j in zip(w, keys, strict=True):
                    out[bi, hi, i] += wj / sum(w) * v[bi, hi, j].double()
    return out, lse


@pytest.mark.parametrize("t_q, t_k, causal",
                         [(9, 13, False), (11, 11, True), (5, 12, True), (12, 5, True), (1, 7, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_attention_lse_math_fused_and_tiled_agree_with_naive(t_q, t_k, causal, dtype):
    q = randn(2, 2, t_q, 8, seed=1, dtype=dtype)
    k, v = randn(2, 2, t_k, 8, seed=2, dtype=dtype), randn(2, 2, t_k, 8, seed=3, dtype=dtype)
    want_o, want_l = naive_attention_lse(q, k, v, causal)
    atol = 1e-5 if dtype == torch.float32 else 2e-3
    for name, (out, lse) in {
        "math": R.attention_lse(q, k, v, causal, impl="math"),
        "fused": R.attention_lse(q, k, v, causal, impl="fused"),
        "tiled 4x4": R.flash_attention_tiled(q, k, v, causal, block_q=4, block_k=4),
        "tiled 16x2": R.flash_attention_tiled(q, k, v, causal, block_q=16, block_k=2),
    }.items():
        assert out.dtype == dtype and lse.dtype == torch.float32, name
        assert torch.allclose(out.double(), want_o, atol=atol), name
        assert torch.equal(torch.isneginf(lse), torch.isinf(want_l)), name  # no visible key: exactly -inf
        finite = torch.isfinite(want_l)
        assert torch.allclose(lse.double()[finite], want_l[finite], atol=1e-5), name


def test_attention_lse_out_equals_sdpa():
    q, k, v = randn(1, 3, 10, 16, seed=4), randn(1, 3, 14, 16, seed=5), randn(1, 3, 14, 16, seed=6)
    for causal in (False, True):
        out, _ = R.attention_lse(q, k, v, causal, impl="fused")
        assert torch.allclose(out, R.sdpa(q, k, v, causal=causal, impl="math"), atol=1e-6)


def test_attention_lse_rejects_bad_shapes():
    with pytest.raises(ValueError, match="do not fit"):
        R.attention_lse(randn(1, 2, 4, 8), randn(1, 2, 5, 4), randn(1, 2, 5, 8))


@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 24), (2, 2, 3, 8)])
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rms_norm_backward_closed_form_equals_autograd_and_a_loop(shape, eps):
    x, g, w = randn(*shape, seed=7), randn(*shape, seed=8), randn(shape[-1], seed=9)
    xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    (R.rms_norm(xx, ww, eps, impl="math") * g).sum().backward()
    grad_x, grad_w = R.rms_norm_backward(x, w, g, eps)
    assert torch.allclose(grad_x, xx.grad, atol=1e-5) and torch.allclose(grad_w, ww.grad, atol=1e-5)
    # the derivative written out per element, in float64: dy_i/dx_j = w_i (r d_ij - x_i x_j r^3 / d)
    d = shape[-1]
    rows_x, rows_g = x.double().reshape(-1, d), g.double().reshape(-1, d)
    loop = torch.zeros_like(rows_x)
    for n in range(rows_x.shape[0]):
        xr, gr = rows_x[n], rows_g[n]
        r = 1.0 / math.sqrt(float((xr * xr).mean()) + eps)
        for j in range(d):
            loop[n, j] = sum(float(gr[i] * w[i]) * ((r if i == j else 0.0) - float(xr[i] * xr[j]) * r**3 / d)
                             for i in range(d))
    assert torch.allclose(grad_x.double().reshape(-1, d), loop, atol=1e-5)


def test_rms_norm_backward_keeps_dtypes_and_accumulates_in_fp32():
    x = randn(2, 4, 32, seed=10, dtype=torch.float16) * 400  # squares overflow fp16
    g = randn(2, 4, 32, seed=11, dtype=torch.float16)
    w = randn(32, seed=12)
    grad_x, grad_w = R.rms_norm_backward(x, w, g, 1e-6)
    assert grad_x.dtype == torch.float16 and grad_w.dtype == torch.float32
    assert torch.isfinite(grad_x).all() and torch.isfinite(grad_w).all()
    want_x, want_w = R.rms_norm_backward(x.float(), w, g.float(), 1e-6)
    assert torch.allclose(grad_x.float(), want_x, rtol=1e-2, atol=1e-4) and torch.allclose(grad_w, want_w, atol=1e-4)
