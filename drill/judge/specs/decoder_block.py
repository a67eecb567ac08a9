"""Hidden tests for `decoder_block`: DecoderBlock(d_model, n_heads, n_kv_heads, d_ff, eps, rope_base), and CONVENTION.

The grader loads its weights through the contract's attribute paths
(`attn.q_proj.weight` ... `mlp.w_down.weight`, `attn_norm.weight`,
`mlp_norm.weight`) and compares the output and the gradients of x and of
all nine parameters with drill.reference's Llama layer (`llama_block`).
What the cases reveal:
- random norm weights (not ones) and inputs of RMS far from 1: a norm
  without its weight, one norm for both branches, the residual added to the
  normalised input, post-norm;
- positions from 0, with an offset, with gaps, and a base of 500000: RoPE
  missing, rotated from position 0, on v, with a hard-coded base, and every
  RoPE mistake of the `rope` exercise;
- MHA, MQA and groups of 2 and 3; one token alone (T = 1); causal by index
  while the positions jump: no mask, a mask hiding the diagonal, tiled K/V;
- random MLP weights: silu on the up projection, another activation;
- fp16 and bf16 (the whole block cast with `.to(dtype)`), and fp16 inputs
  of magnitude ~400 whose squares overflow: statistics or angles in half
  precision;
- a repeat call on one module (other x, other positions, same shapes): a
  RoPE table cached per length.
CONVENTION is applied like rope's (`_rope_bugs.apply_convention`). The
atol grows with the largest position, as for rope (fp32 angles differ from
one correct code to another by ~1e-7 x position).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from drill.judge.decoder import BLOCK_PATHS
from drill.judge.registry import default
from drill.judge.spec import (
    FORBIDDEN_ATTENTION,
    FORBIDDEN_ATTENTION_CLASSES,
    FORBIDDEN_NORM,
    FORBIDDEN_NORM_CLASSES,
    Bug,
    Case,
    Diagnosis,
    Spec,
)
from drill.judge.specs._attention_bugs import ATTENTION_VARIANTS, attend, merge_heads, split_heads
from drill.judge.specs._attention_bugs import D as AD
from drill.judge.specs._common import (
    ANGLE_ERROR_PER_POSITION,
    DTYPES,
    Draw,
    causal_mask,
    diagnoses,
    module_case,
    position_tol,
    position_tolerances,
    repeat_probe,
    twice_probes,
    variant_bugs,
)
from drill.judge.specs._norm import EPS_ON_RECIPROCAL, EPS_OUTSIDE, normalise
from drill.judge.specs._rope_bugs import (
    RD as ROPE_D,
)
from drill.judge.specs._rope_bugs import (
    ROPE_VARIANTS,
    apply_convention,
    rotate,
)
from drill.judge.specs.gqa import APPLICABLE, GD
from drill.judge.specs.rmsnorm import RD as NORM_D
from drill.judge.specs.swiglu import SD

TARGET = "DecoderBlock"
DEFAULT_EPS = default("decoder_block", "eps")
DEFAULT_BASE = default("decoder_block", "rope_base")
DEFAULT_CONVENTION = default("decoder_block", "CONVENTION")
PATHS = tuple(BLOCK_PATHS)

BD = diagnoses(
    Diagnosis("block_post_norm", "Post-norm instead of pre-norm",
              "The Llama block normalises each branch's *input* and adds the branch output to the raw stream: "
              "h = x + attn(norm(x)). Yours normalises after the residual add, h = norm(x + attn(x)) (the original "
              "Transformer's post-norm), so the stream is renormalised at every layer and the branches see raw x.",
              "h = x + attn(attn_norm(x)); out = h + mlp(mlp_norm(h)); no norm after the additions."),
    Diagnosis("block_residual_missing", "A residual connection is missing",
              "Each branch adds to the residual stream: h = x + attn(...), out = h + mlp(...). One of yours returns "
              "the branch output alone, so that branch's input is lost (and deep stacks stop training).",
              "Add the branch's input back: h = x + attn(attn_norm(x)) and out = h + mlp(mlp_norm(h))."),
    Diagnosis("block_residual_normed", "Residual added to the normalised input",
              "The residual must carry the raw stream: h = x + attn(attn_norm(x)). Yours adds the branch output to "
              "the *normalised* x (n = norm(x); h = n + attn(n)), so the stream's scale is reset at every branch.",
              "Keep x (and h) for the addition and feed only the branch with the normalised copy."),
    Diagnosis("block_norm_shared", "One norm used for both branches",
              "attn_norm and mlp_norm have their own weights; your block normalises both branches with the same one.",
              "Call self.attn_norm before attention and self.mlp_norm before the MLP."),
    Diagnosis("block_rope_missing", "RoPE not applied to q and k",
              "Attention without RoPE on both q and k (or on only one of them) has no relative-position signal: "
              "the scores do not depend on how far apart two tokens are.",
              "Rotate q and k (after the head split, before the scores) at `positions`."),
    Diagnosis("block_rope_on_values", "RoPE applied to the values",
              "Only q and k are rotated: RoPE encodes position in the scores q.k; rotating v mixes the features of "
              "the attention output instead.",
              "Rotate q and k only; attend with v as projected."),
    Diagnosis("block_norm_on_output", "Norm on the sub-layer's output (OLMo 2's placement)",
              "Yours normalises what each branch returns before adding it: h = x + norm(attn(x)), "
              "out = h + norm(mlp(h)). That is OLMo 2's layout (a real one, chosen for training stability), "
              "but the contract's block is Llama's pre-norm: the norm is applied to the branch's *input*, "
              "and the branch output is added as it is.",
              "h = x + attn(attn_norm(x)); out = h + mlp(mlp_norm(h))."),
    Diagnosis("block_qk_norm", "QK-norm added (another architecture's convention)",
              "Yours RMS-normalises q and k before the scores (QK-norm, as in OLMo 2, Qwen3 or Gemma 3: per head, "
              "or over the whole projection). It is a real convention, but the contract's block is Llama's, which "
              "has no q/k norm: the scores are q.k of the projections as they are, rotated by RoPE.",
              "Drop the q_norm / k_norm step: q = rope(q_proj(x)), k = rope(k_proj(x)), with no normalisation."),
)

MASKS = ("causal", "none", "strict")


def _case(d: Draw, name: str, *, B: int, T: int, h: int, h_kv: int, dh: int, d_ff: int, positions: torch.Tensor,
          dtype: str = "float32", grads: bool = False, eps: float | None = None, base: float | None = None,
          scale: float = 1.5, gain: float = 1.0) -> Case:
    dm = h * dh
    x = d.normal(B, T, dm, dtype=dtype, scale=scale)
    params = {
        "attn.q_proj.weight": d.weight(h * dh, dm, dtype=dtype),
        "attn.k_proj.weight": d.weight(h_kv * dh, dm, dtype=dtype),
        "attn.v_proj.weight": d.weight(h_kv * dh, dm, dtype=dtype),
        "attn.o_proj.weight": (d.weight(dm, h * dh) * gain).to(DTYPES[dtype]),
        "mlp.w_gate.weight": d.weight(d_ff, dm, dtype=dtype),
        "mlp.w_up.weight": d.weight(d_ff, dm, dtype=dtype),
        "mlp.w_down.weight": (d.weight(dm, d_ff) * gain).to(DTYPES[dtype]),
        "attn_norm.weight": d.normal(dm, scale=0.5, shift=1.0).to(DTYPES[dtype]),
        "mlp_norm.weight": d.normal(dm, scale=0.5, shift=1.0).to(DTYPES[dtype]),
    }
    init: tuple = (dm, h, h_kv, d_ff)
    if eps is not None or base is not None:
        init += (DEFAULT_EPS if eps is None else eps, DEFAULT_BASE if base is None else base)
    case = module_case(d, name, TARGET, {"x": x, "positions": positions}, init=init, params=params, dtype=dtype,
                       grads=grads, ctx={"n_heads": h, "n_kv_heads": h_kv, "eps": DEFAULT_EPS if eps is None else eps,
                                         "base": DEFAULT_BASE if base is None else base})
    case.ctx["tol"] = position_tol(dtype, int(positions.max()))
    return case


def _gaps(d: Draw, t: int, lo: int, hi: int) -> torch.Tensor:
    """t strictly increasing positions in [lo, hi] with gaps."""
    return torch.tensor(sorted(d.rng.sample(range(lo, hi + 1), t)), dtype=torch.int64)


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    T = lambda: d.int(4, 8)  # noqa: E731 - a fresh length per case
    cases = []
    t = T()
    cases.append(_case(d, f"fp32 GQA n_heads=4, n_kv_heads=2, positions 0..{t - 1}", B=2, T=t, h=4, h_kv=2, dh=8,
                       d_ff=48, positions=torch.arange(t), grads=True))
    t, start = T(), d.int(40, 400)
    cases.append(_case(d, f"fp32 MHA n_heads=n_kv_heads=4, positions from {start}", B=1, T=t, h=4, h_kv=4, dh=8,
                       d_ff=40, positions=torch.arange(start, start + t), grads=True))
    t = T()
    cases.append(_case(d, "fp32 MQA n_heads=4, n_kv_heads=1, positions with gaps up to 500", B=2, T=t, h=4, h_kv=1,
                       dh=16, d_ff=64, positions=_gaps(d, t, 0, 500), grads=True))
    t = T()
    cases.append(_case(d, "fp32 GQA n_heads=6, n_kv_heads=2 (group 3), eps=1e-5, rope_base=500000, gaps from 100",
                       B=2, T=t, h=6, h_kv=2, dh=8, d_ff=64, positions=_gaps(d, t, 100, 900), eps=1e-5, base=500000.0))
    p = d.int(5, 300)
    cases.append(_case(d, f"fp32 one token (T=1) at position {p}", B=3, T=1, h=4, h_kv=2, dh=8, d_ff=32,
                       positions=torch.tensor([p])))
    t = T()
    cases.append(_case(d, "fp16 GQA n_heads=4, n_kv_heads=2, positions with gaps up to 300", B=2, T=t, h=4, h_kv=2,
                       dh=16, d_ff=64, positions=_gaps(d, t, 0, 300), dtype="float16"))
    t = T()
    cases.append(_case(d, "bf16 GQA n_heads=8, n_kv_heads=2, positions with gaps up to 300", B=2, T=t, h=8, h_kv=2,
                       dh=8, d_ff=96, positions=_gaps(d, t, 0, 300), dtype="bfloat16"))
    t = T()
    cases.append(_case(d, "fp16 inputs of magnitude ~400 (their squares overflow fp16)", B=1, T=t, h=4, h_kv=2, dh=8,
                       d_ff=48, positions=_gaps(d, t, 0, 200), dtype="float16", scale=400.0,
                       gain=200.0))  # branch outputs as large as the stream, so losing one shows
    cases.append(_repeat_case(d))  # drawn last: the cases above are unchanged for a seed
    return twice_probes(cases)  # the first plain fp32 cases are also called twice: non-determinism shows


def _repeat_case(d: Draw) -> Case:
    """One module called first on another x at other positions of the same length; the second call graded."""
    t = d.int(4, 7)
    first = {"x": d.normal(1, t, 32, scale=1.5), "positions": _gaps(d, t, 0, 400)}
    pos = _gaps(d, t, 0, 400)
    while torch.equal(pos, first["positions"]):
        pos = _gaps(d, t, 0, 400)
    case = _case(d, f"repeat call: one module called twice, T={t}, other positions", B=1, T=t, h=4, h_kv=2, dh=8,
                 d_ff=48, positions=pos)
    case.ctx["tol"] = position_tol("float32", int(max(pos.max(), first['positions'].max())))
    return repeat_probe(case, first)


def _expected(case: Case, convention: str):
    """The reference layer in fp32 with the case's weights; gradients of x and of every parameter if wanted."""
    from drill.reference.model import llama_block

    ctx, wants = case.ctx, case.wants_grads
    dm, d_ff = case.args["x"].shape[-1], case.params["mlp.w_gate.weight"].shape[0]
    block = llama_block(dm, ctx["n_heads"], ctx["n_kv_heads"], d_ff, ctx["eps"], ctx["base"], convention, impl="math")
    ref = dict(block.named_parameters())
    with torch.no_grad():
        for path, t in case.params.items():
            ref[BLOCK_PATHS[path]].copy_(t.float())
    x = case.args["x"].detach().float().clone().requires_grad_(wants)
    block.requires_grad_(wants)
    out = block(x, case.args["positions"])
    if not wants:
        return out.detach(), {}
    (out * case.upstream.float()).sum().backward()
    grads = {"input:x": x.grad.detach().clone()}
    grads.update({f"param:{path}": ref[BLOCK_PATHS[path]].grad.detach().clone() for path in PATHS})
    return out.detach(), grads


def reference(case: Case):
    """Expected values for "half"; both conventions are kept in ctx["alt"] for `prepare`."""
    case.ctx["alt"] = {c: _expected(case, c) for c in ("half", "interleaved")}
    return case.ctx["alt"][DEFAULT_CONVENTION]


def prepare(cases: list[Case], attrs: dict) -> tuple | None:
    return apply_convention(cases, attrs, DEFAULT_CONVENTION)


# ---------------------------------------------------------------- the buggy block


def _rms(x: torch.Tensor, w: torch.Tensor | None, eps: float, **knobs) -> torch.Tensor:
    return normalise(x, w, None, eps, **knobs).double()


def block_variant(
    case: Case,
    *,
    layout: str = "pre",
    norm_weights: str = "own",
    norm: dict | None = None,
    rope="default",
    rope_on: tuple[str, ...] = ("q", "k"),
    mask: str = "causal",
    core=None,
    tiled: bool = False,
    strided: bool = False,
    mlp: str = "silu_gate",
    qk_norm: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The block recomputed (float64 after each norm) with one mistake; returns (output, unknown elements).

    layout: "pre" (right), "post" (norm after each residual add), "no_res_attn" / "no_res_mlp" (a branch
    without its residual), "normed_res" / "normed_res_attn" / "normed_res_mlp" (residual from the
    normalised input), "norm_out" (the norm on each branch's output, OLMo 2). norm_weights: "own", "attn"
    or "mlp" (both branches use that norm's weight), "none".
    norm: `normalise` knobs (eps_at, upcast, centre). rope: fn(t, positions, base, convention),
    "default" (the exact rotation) or "none"; rope_on: which of q, k, v it rotates.
    mask/core/tiled/strided: as gqa's variants.
    mlp: "silu_gate" (right), "silu_up" (silu on w_up), or an activation function for the gate.
    qk_norm: "head" (q and k RMS-normalised per head, Qwen3 / Gemma 3) or "full" (over the whole projection,
    OLMo 2), weight 1, before RoPE; None (right).
    """
    a, p, ctx = case.args, case.params, case.ctx
    x = a["x"]
    dt, eps, base = x.dtype, ctx["eps"], ctx["base"]
    convention = ctx.get("convention", DEFAULT_CONVENTION)
    h, h_kv = ctx["n_heads"], ctx["n_kv_heads"]
    g = h // h_kv
    if tiled and (g == 1 or h_kv == 1):
        return None
    knobs = norm or {}
    if knobs.get("upcast") is False and dt == torch.float32:
        return None
    w = {"attn": p["attn_norm.weight"], "mlp": p["mlp_norm.weight"]}
    if norm_weights == "none":
        w = {"attn": None, "mlp": None}
    elif norm_weights in w:
        w = {"attn": w[norm_weights], "mlp": w[norm_weights]}

    def n(which: str, t: torch.Tensor) -> torch.Tensor:
        # a learner's norm reads its input in the block's dtype
        return _rms(t.to(dt), None if w[which] is None else w[which], eps, **knobs)

    W = {k: v.double() for k, v in p.items()}
    rot = {"default": rotate, "none": None}.get(rope, rope) if isinstance(rope, str) else rope
    positions = a["positions"]
    unknown_rows = torch.zeros(x.shape[:2], dtype=torch.bool)

    def attn(t: torch.Tensor) -> torch.Tensor:
        B, T, _ = t.shape
        proj = {n_: F.linear(t, W[f"attn.{n_}_proj.weight"]) for n_ in ("q", "k", "v")}
        if qk_norm == "full":
            proj["q"], proj["k"] = (_rms(proj[n_].to(dt), None, eps) for n_ in ("q", "k"))
        q, k, v = (split_heads(proj[n_], m, strided) for n_, m in (("q", h), ("k", h_kv), ("v", h_kv)))
        if qk_norm == "head":
            q, k = _rms(q.to(dt), None, eps), _rms(k.to(dt), None, eps)
        turned = {"q": q, "k": k, "v": v}
        if rot is not None:
            for name in rope_on:
                r = rot(turned[name].to(dt), positions, base, convention)
                if r is None:
                    raise _NotShown
                turned[name] = r.double()
        q, k, v = turned["q"], turned["k"], turned["v"]
        if tiled:
            k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
        else:
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        m = {"causal": causal_mask(T), "none": None, "strict": torch.ones(T, T, dtype=torch.bool).tril(-1)}[mask]
        if core is None:
            o = attend(q, k, v, m, dtype=torch.float64)
            if m is not None:
                unknown_rows[:] |= ~m.any(dim=-1)[None, :]
        else:
            produced = core(q, k, v, m, dt)
            if produced is None:
                raise _NotShown
            o, unknown = produced if isinstance(produced, tuple) else (produced, None)
            o = o.double()
            if unknown is not None:
                unknown_rows[:] |= unknown.reshape(B, h, T, -1).any(dim=-1).any(dim=1)
        return F.linear(merge_heads(o, strided), W["attn.o_proj.weight"])

    def ffn(t: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(t, W["mlp.w_gate.weight"]), F.linear(t, W["mlp.w_up.weight"])
        hidden = {"silu_gate": lambda: F.silu(gate) * up, "silu_up": lambda: F.silu(up) * gate}.get(
            mlp, lambda: mlp(gate) * up)()
        return F.linear(hidden, W["mlp.w_down.weight"])

    xd = x.double()
    try:
        if layout == "post":
            hs = n("attn", xd + attn(xd))
            out = n("mlp", hs + ffn(hs))
        elif layout == "norm_out":
            hs = xd + n("attn", attn(xd))
            out = hs + n("mlp", ffn(hs))
        else:
            na = n("attn", xd)
            hs = attn(na) + {"no_res_attn": 0.0, "normed_res": na, "normed_res_attn": na}.get(layout, xd)
            nm = n("mlp", hs)
            out = ffn(nm) + {"no_res_mlp": 0.0, "normed_res": nm, "normed_res_mlp": nm}.get(layout, hs)
    except _NotShown:
        return None
    unknown = unknown_rows[:, :, None].expand(out.shape).clone() | torch.isnan(out)
    return out.float(), (unknown if bool(unknown.any()) else None)  # None: nothing left out of the comparison


class _NotShown(Exception):
    """A sub-variant that cannot show on this case (e.g. half-precision angles on fp32 input)."""


def _v(**knobs):
    return lambda case: block_variant(case, **knobs)


BLOCK_VARIANTS = [
    ("block_post_norm", "h = attn_norm(x + attn(x)); out = mlp_norm(h + mlp(h))", {"layout": "post"}),
    ("block_residual_missing", "h = attn(attn_norm(x)): no residual on the attention branch",
     {"layout": "no_res_attn"}),
    ("block_residual_missing", "out = mlp(mlp_norm(h)): no residual on the MLP branch", {"layout": "no_res_mlp"}),
    ("block_residual_normed", "n = norm(x); h = n + attn(n) (both branches)", {"layout": "normed_res"}),
    ("block_residual_normed", "n = attn_norm(x); h = n + attn(n) (the attention branch)",
     {"layout": "normed_res_attn"}),
    ("block_residual_normed", "n = mlp_norm(h); out = n + mlp(n) (the MLP branch)", {"layout": "normed_res_mlp"}),
    ("block_norm_shared", "attn_norm used before the MLP too", {"norm_weights": "attn"}),
    ("block_norm_shared", "mlp_norm used before attention too", {"norm_weights": "mlp"}),
    ("block_rope_missing", "no RoPE", {"rope": "none"}),
    ("block_rope_missing", "RoPE on q only", {"rope_on": ("q",)}),
    ("block_rope_missing", "RoPE on k only", {"rope_on": ("k",)}),
    ("block_rope_on_values", "RoPE on q, k and v", {"rope_on": ("q", "k", "v")}),
    ("gqa_not_causal", "no causal mask", {"mask": "none"}),
    ("gqa_diagonal_masked", "mask hides the diagonal", {"mask": "strict"}),
    ("gqa_tiled_kv", "query head h reads kv head h % n_kv_heads", {"tiled": True}),
    ("heads_strided_split", "heads split as view(B, T, d_head, heads)", {"strided": True}),
    ("swiglu_gate_up_swapped", "silu on w_up, times w_gate", {"mlp": "silu_up"}),
    ("swiglu_wrong_activation", "relu instead of silu", {"mlp": F.relu}),
    ("swiglu_wrong_activation", "gelu instead of silu", {"mlp": F.gelu}),
    ("rms_missing_weight", "both norms without their weight", {"norm_weights": "none"}),
    ("rms_eps_outside_sqrt", "sqrt(mean(x**2)) + eps", {"norm": {"eps_at": EPS_OUTSIDE}}),
    ("rms_eps_outside_sqrt", "rsqrt(mean(x**2)) + eps", {"norm": {"eps_at": EPS_ON_RECIPROCAL}}),
    ("rms_no_fp32_upcast", "norm statistics in the input dtype", {"norm": {"upcast": False}}),
    ("rms_subtracts_mean", "x - mean in the norm", {"norm": {"centre": True}}),
    # issue 31: other architectures' conventions, and the scale the Why text of wrong_scale names
    ("block_norm_on_output", "h = x + attn_norm(attn(x)); out = h + mlp_norm(mlp(h))", {"layout": "norm_out"}),
    ("block_qk_norm", "q and k RMS-normalised per head before RoPE", {"qk_norm": "head"}),
    ("block_qk_norm", "q and k RMS-normalised over the whole projection before RoPE", {"qk_norm": "full"}),
    ("wrong_scale", "scaled by 1/sqrt(d_model)", {"core": lambda q, k, v, m, dt: attend(
        q, k, v, m, scale=(q.shape[1] * q.shape[-1]) ** -0.5, dtype=torch.float64)}),
]


def _rope_variant(fn):
    """A `rope` exercise mistake (fn(x, positions, base, convention)) inside the block."""
    return lambda case: block_variant(case, rope=fn)


TABLE = {**BD, **GD, **AD, **SD, **NORM_D, **ROPE_D}
# OLMo 2's whole block makes both of its conventions' changes at once: composed, it is one consistent variant.
OLMO2 = Bug(BD["block_norm_on_output"], _v(layout="norm_out", qk_norm="full"),
            "OLMo 2's block: norms on the branch outputs and q/k normalised over the whole projection",
            also="block_qk_norm")
BUGS = (
    variant_bugs(TABLE, [(i, label, _v(**knobs)) for i, label, knobs in BLOCK_VARIANTS])
    + variant_bugs(TABLE, ROPE_VARIANTS, _rope_variant)
    + variant_bugs(TABLE, ATTENTION_VARIANTS, lambda fn: (lambda c: block_variant(c, core=fn)),
                   only=APPLICABLE)
    + (OLMO2,)
)

SPEC = Spec(
    name="decoder_block",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=position_tolerances(ANGLE_ERROR_PER_POSITION),
    bugs=BUGS,
    exception_bugs=(("without overflow", AD["fp16_fill_overflow"]),),
    forbidden=FORBIDDEN_ATTENTION + FORBIDDEN_NORM,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES + FORBIDDEN_NORM_CLASSES,
    report_attrs=("CONVENTION",),
    prepare=prepare,
)
