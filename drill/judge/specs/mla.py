"""Hidden tests for `mla`: MLA(d_model, n_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
rope_base, eps), DeepSeek-V2's multi-head latent attention with decoupled RoPE and a latent cache.

Every case is a "chain" (drill/judge/chain.py, as for kv_cache): the child
builds the learner's module with the parent's weights (transformers'
DeepseekV2Attention names) and feeds one sequence through `forward(x, past)`
in a given split, handing each call the cache the previous one returned.
The expected answer is one full causal pass of the reference over the whole
sequence: its outputs, or the two tensors of its cache (c_kv after
kv_a_layernorm, k_rope after RoPE; a cache of another shape or content
fails). The splits: all at once, a prompt then single tokens, chunks, an
uneven mix; one case interleaves a second sequence's calls through the same
module (a module that keeps its cache on itself mixes the two). Sizes keep
d_n, d_v and d_n + d_r apart, so each wrong softmax scale shows; fp32 (with
the gradients of x and of all five parameters through the chain), bf16 and
fp16 (outputs and cache in x's dtype).

Every named mistake is replayed call by call (`replay`) on the same split,
with one knob per mistake; with every knob off it is the reference (the
tests check that).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from drill.judge.diagnose import GENERIC
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
from drill.judge.specs._common import DTYPES, TOLERANCES, Draw, module_dtype, reference_with_grads
from drill.judge.specs._rope_bugs import CONVENTIONS, RD, apply_convention, other

TARGET = "MLA"
KIND_CHAIN = "chain"
DEFAULT_BASE = default("mla", "rope_base")
EPS = default("mla", "eps")
PARAMS = ("q_proj.weight", "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight")
WHAT = {"out": "outputs", "k": "returned c_kv cache", "v": "returned k_rope cache"}
NOUN = {"out": "output", "k": "returned c_kv cache", "v": "returned k_rope cache"}
LABEL = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

MD = {
    d.id: d
    for d in [
        Diagnosis("mla_rope_on_latent", "RoPE applied to the latent c_kv",
                  "Only q_rope and the shared k_rope are rotated. Your code rotates the compressed latent c_kv too "
                  "(so the keys and values expanded from it carry positions, and the cache holds rotated latents). "
                  "That is exactly what MLA's decoupled RoPE avoids: a rotation between the latent and kv_b_proj "
                  "would stop kv_b_proj from being folded into the query.",
                  "Rotate q_rope (the last d_r features of each query head) and k_rope (a[..., r:]) only; c_kv is "
                  "normalised and cached as it is."),
        Diagnosis("mla_k_rope_per_head", "k_rope stored per head",
                  "k_rope is one d_r vector per token shared by every head (the 'mqa' in kv_a_proj_with_mqa). Your "
                  "cache holds it expanded to (B, n_heads, T, d_r): the outputs are right, but the cache is "
                  "n_heads times larger than the contract's (B, T, d_r).",
                  "Keep k_rope as (B, T, d_r) in the cache and broadcast it over heads only inside the score "
                  "(k_rope[:, None])."),
        Diagnosis("mla_full_kv_cached", "Expanded keys and values cached",
                  "The point of MLA is its cache: r + d_r numbers per token, (c_kv, k_rope). Your cache holds the "
                  "per-head keys and values after kv_b_proj, as a plain KV cache would: right outputs, a cache "
                  "n_heads * (d_n + d_r + d_v) numbers per token.",
                  "Return (c_kv_all, k_rope_all) as the cache and expand (or absorb) kv_b_proj on every call."),
        Diagnosis("mla_scale_nope", "Scores scaled by 1/sqrt(qk_nope_head_dim)",
                  "A query head is d_n + d_r features long (its nope and rope parts together), and the score sums "
                  "both dot products, so the softmax scale is 1/sqrt(d_n + d_r). Yours uses 1/sqrt(d_n).",
                  "scale = 1 / math.sqrt(qk_nope_head_dim + qk_rope_head_dim)."),
        Diagnosis("mla_scale_v", "Scores scaled by 1/sqrt(v_head_dim)",
                  "The softmax scale comes from the query/key length d_n + d_r, not from the value head size d_v "
                  "(they differ in MLA: DeepSeek-V2 has 192 and 128).",
                  "scale = 1 / math.sqrt(qk_nope_head_dim + qk_rope_head_dim)."),
        Diagnosis("mla_no_kv_norm", "kv_a_layernorm not applied",
                  "The latent a[..., :r] goes through kv_a_layernorm (an RMSNorm with its own weight) before it is "
                  "cached and expanded; yours uses it raw, so the outputs and the cached c_kv differ.",
                  "c_kv = kv_a_layernorm(a[..., :kv_lora_rank]), then cache and expand that."),
        Diagnosis("mla_norm_after_b", "RMS norm applied after kv_b_proj",
                  "The norm belongs on the latent, before kv_b_proj: c_kv = kv_a_layernorm(a[..., :r]). Yours "
                  "expands the raw latent and normalises kv_b_proj's output instead (and caches the raw latent).",
                  "Normalise a[..., :r] with kv_a_layernorm (weight included) first; kv_b_proj reads the normalised "
                  "latent."),
        Diagnosis("mla_cache_prenorm", "Cache holds c_kv before the norm",
                  "The cache must hold c_kv after kv_a_layernorm (a cache built elsewhere, such as transformers', "
                  "holds it so). Yours stores the raw latent and normalises the whole cache on every call: right "
                  "outputs, a different cache.",
                  "Normalise the new tokens' latent first, then append it; never normalise cached entries again."),
        Diagnosis("mla_cache_unrotated", "Cache holds k_rope before RoPE",
                  "The cached k_rope must already be rotated at its position. Yours stores it raw and rotates the "
                  "whole cache at 0 .. T-1 on every read: right outputs, a different cache (and wasted work).",
                  "Rotate the new k_rope at its positions, then append it; cached k_rope is never rotated again."),
        Diagnosis("mla_split_order", "Rope part taken first",
                  "Per head the query is [q_nope (d_n), q_rope (d_r)], and kv_a_proj_with_mqa's output is "
                  "[latent (r), k_rope (d_r)]: the rotary part comes last in both. Yours takes it from the front.",
                  "q_nope, q_rope = q.split([d_n, d_r], -1); c, k_rope = a.split([kv_lora_rank, d_r], -1)."),
        Diagnosis("mla_positions_from_zero", "New tokens rotated from position 0",
                  "On every call the new tokens were rotated as positions 0 .. T_new-1; they sit at T_past .. "
                  "T_past + T_new - 1, so after the first call q_rope and the new k_rope get the wrong angles.",
                  "T_past = past[0].shape[1] (0 without a cache); rotate at torch.arange(T_past, T_past + T_new)."),
    ]
}


def _rope(t: Tensor, positions: Tensor, base: float, convention: str) -> Tensor:
    from drill.reference.rope import apply_rope

    return apply_rope(t, positions, base, convention, impl="math")


def _rms(t: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    out = t * torch.rsqrt(t.pow(2).mean(dim=-1, keepdim=True) + eps)
    return out if weight is None else out * weight


def _weights(d: Draw, d_model: int, h: int, r: int, dn: int, dr: int, dv: int, dtype: str) -> dict[str, Tensor]:
    return {
        "q_proj.weight": d.weight(h * (dn + dr), d_model, dtype=dtype),
        "kv_a_proj_with_mqa.weight": d.weight(r + dr, d_model, dtype=dtype),
        "kv_a_layernorm.weight": d.normal(r, dtype=dtype, scale=0.3, shift=1.0),
        "kv_b_proj.weight": d.weight(h * (dn + dv), r, dtype=dtype),
        "o_proj.weight": d.weight(d_model, h * dv, dtype=dtype),
    }


def _scenario(
    d: Draw, label: str, *, h: int, r: int, dn: int, dr: int, dv: int, calls: list[int], returns=("out",),
    base: float = DEFAULT_BASE, dtype: str = "float32", batch: int = 2, grads: bool = False,
    interleave: list[int] | None = None, d_model: int = 32,
) -> list[Case]:
    """Cases sharing one sequence and one set of weights: one per tensor checked (outputs, c_kv, k_rope)."""
    params = _weights(d, d_model, h, r, dn, dr, dv, dtype)
    x = d.normal(batch, sum(calls), d_model, dtype=dtype)
    args = {"x": x}
    if interleave:
        args["x2"] = d.normal(batch, sum(interleave), d_model, dtype=dtype)
    sizes = dict(n_heads=h, kv_lora_rank=r, qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv)
    config = f"n_heads={h}, r={r}, d_n={dn}, d_r={dr}, d_v={dv}" + ("" if base == DEFAULT_BASE else f", base {base:g}")
    split = "+".join(str(n) for n in calls)
    if interleave:
        split += " interleaved with [" + "+".join(str(n) for n in interleave) + "]"
    replays: dict = {}
    cases = []
    for what in returns:
        with_grads = grads and what == "out"
        extra = {"calls": list(calls), "returns": what, "past_arg": "past"}
        if interleave:
            extra["calls2"] = list(interleave)
        cases.append(
            Case(
                name=f"{LABEL[dtype]} {label} [{split}], {config}: {WHAT[what]}",
                target=TARGET,
                kind=KIND_CHAIN,
                args=dict(args),
                init=(d_model, h, r, dn, dr, dv, float(base), EPS),
                params=params,
                module_dtype=module_dtype(dtype),
                out_dtype=DTYPES[dtype],
                grad_inputs=("x",) if with_grads else (),
                grad_params=with_grads,
                upstream=d.normal(batch, sum(calls), d_model) if with_grads else None,
                extra=extra,
                ctx={"dtype": dtype, **sizes, "base": float(base), "what": NOUN[what], "replays": replays},
            )
        )
    return cases


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    all3 = ("out", "k", "v")
    cases += _scenario(d, "all at once", h=2, r=8, dn=4, dr=4, dv=6, calls=[d.int(5, 8)], returns=all3, grads=True)
    cases += _scenario(d, "prompt then one token at a time", h=3, r=12, dn=6, dr=4, dv=8,
                       calls=[d.int(3, 5), 1, 1, 1], returns=all3, grads=True)
    c = d.int(2, 3)
    cases += _scenario(d, "chunks of several tokens", h=4, r=16, dn=8, dr=4, dv=6, calls=[c, c, c],
                       returns=all3)
    cases += _scenario(d, "uneven mix", h=2, r=8, dn=6, dr=8, dv=4, calls=[d.int(2, 4), 1, d.int(2, 4), 1],
                       base=500000.0)
    cases += _scenario(d, "two sequences through one module", h=2, r=8, dn=4, dr=4, dv=6,
                       calls=[d.int(2, 4), 1, 2, 1], interleave=[d.int(2, 4), 2, 1, 1], returns=("out", "k"))
    cases += _scenario(d, "prompt then tokens", h=2, r=16, dn=8, dr=8, dv=12, calls=[d.int(3, 5), 1, 2],
                       dtype="bfloat16", returns=all3)
    cases += _scenario(d, "prompt, a chunk, then a token", h=2, r=16, dn=8, dr=8, dv=12, calls=[d.int(3, 5), 2, 1],
                       dtype="float16", returns=all3)
    for case in [c for c in cases if c.extra["returns"] == "out" and c.ctx["dtype"] == "float32"][1:3]:
        if not case.extra.get("calls2"):
            # Determinism probe: the same chain again through a fresh module with the same weights (a module
            # keeping state between calls is the interleaved case's mistake, named state_between_calls there).
            case.extra["twice"] = "fresh"
    return cases


def _sizes(ctx: dict) -> tuple[int, int, int, int, int]:
    return ctx["n_heads"], ctx["kv_lora_rank"], ctx["qk_nope_head_dim"], ctx["qk_rope_head_dim"], ctx["v_head_dim"]


def reference(case: Case):
    """One full causal pass over the whole sequence in fp32, for both RoPE conventions (ctx["alt"])."""
    from drill.reference.mla import mla_attention

    ctx, returns = case.ctx, case.extra["returns"]

    def forward(convention):
        def run(a, p):
            out, (c_kv, k_rope) = mla_attention(a["x"], p, *_sizes(ctx), rope_base=ctx["base"], eps=EPS,
                                                convention=convention)
            return {"out": out, "k": c_kv, "v": k_rope}[returns]

        return run

    ctx["alt"] = {c: reference_with_grads(case, forward(c)) for c in CONVENTIONS}
    return ctx["alt"]["half"]


def replay(case: Case, **knobs) -> Tensor:
    """The chain case's chosen tensor (extra["returns"]) as code with the given mistakes computes it (fp32).

    Memoised per scenario (its cases share ctx["replays"]). Knobs: rope_latent, per_head (k_rope cached
    per head), full_kv (k and v cached), scale ("nope", "v"), no_norm, norm_after_b, prenorm (c_kv cached
    raw), unrotated (k_rope cached raw, rotated at 0..T-1 on read), split ("q", "a", "both"), restart
    (positions from 0 each call), stateful (one cache kept on the module for both sequences), convention.
    """
    memo = case.ctx.get("replays")
    key = tuple(sorted((k, repr(v)) for k, v in knobs.items()))
    if memo is None:
        return _replay(case, **knobs)[case.extra["returns"]]
    if key not in memo:
        memo[key] = _replay(case, **knobs)
    return memo[key][case.extra["returns"]]


def _replay(
    case: Case, *, rope_latent: bool = False, per_head: bool = False, full_kv: bool = False, scale: str | None = None,
    no_norm: bool = False, norm_after_b: bool = False, prenorm: bool = False, unrotated: bool = False,
    split: str | None = None, restart: bool = False, stateful: bool = False, convention: str | None = None,
    layout: str = "bhtd",
) -> dict[str, Tensor]:
    from drill.reference.attention import sdpa

    ctx, extra = case.ctx, case.extra
    h, r, dn, dr, dv = _sizes(ctx)
    base = ctx["base"]
    conv = convention or ctx.get("convention", "half")
    p = {k: case.params[k].float() for k in PARAMS}
    x = case.args["x"].float()
    chunks, start = [], 0
    for n in extra["calls"]:
        chunks.append((x[:, start : start + n], True))
        start += n
    if stateful and extra.get("calls2"):
        x2, start, mixed = case.args["x2"].float(), 0, []
        for i in range(max(len(chunks), len(extra["calls2"]))):
            if i < len(chunks):
                mixed.append(chunks[i])
            if i < len(extra["calls2"]):
                n = extra["calls2"][i]
                mixed.append((x2[:, start : start + n], False))
                start += n
        chunks = mixed
    b = x.shape[0]
    c_store = x.new_zeros(b, 0, r)
    kr_store = x.new_zeros(b, 0, dr)
    outs = []
    cache: tuple[Tensor, Tensor] = (c_store, kr_store)
    for xc, mine in chunks:
        n = xc.shape[1]
        t_past = c_store.shape[1]
        pos = torch.arange(n) if restart else torch.arange(t_past, t_past + n)
        q = F.linear(xc, p["q_proj.weight"]).view(b, n, h, dn + dr).transpose(1, 2)
        if split in ("q", "both"):
            q_rope, q_nope = q.split([dr, dn], dim=-1)
        else:
            q_nope, q_rope = q.split([dn, dr], dim=-1)
        a = F.linear(xc, p["kv_a_proj_with_mqa.weight"])
        if split in ("a", "both"):
            kr_raw, c_raw = a[..., :dr], a[..., dr:]
        else:
            c_raw, kr_raw = a[..., :r], a[..., r:]
        c_new = c_raw if (no_norm or norm_after_b or prenorm) else _rms(c_raw, p["kv_a_layernorm.weight"], EPS)
        if rope_latent:
            c_new = _rope(c_new, pos, base, conv)
        q_rope = _rope(q_rope, pos, base, conv)
        kr_new = kr_raw if unrotated else _rope(kr_raw, pos, base, conv)
        c_store = torch.cat([c_store, c_new], dim=1)
        kr_store = torch.cat([kr_store, kr_new], dim=1)
        t_all = c_store.shape[1]
        c_use = _rms(c_store, p["kv_a_layernorm.weight"], EPS) if prenorm else c_store
        kr_use = _rope(kr_store, torch.arange(t_all), base, conv) if unrotated else kr_store
        kv = F.linear(c_use, p["kv_b_proj.weight"])
        if norm_after_b:
            kv = _rms(kv, None, EPS)
        kv = kv.view(b, t_all, h, dn + dv).transpose(1, 2)
        k_nope, v = kv.split([dn, dv], dim=-1)
        k = torch.cat([k_nope, kr_use[:, None].expand(b, h, t_all, dr)], dim=-1)
        s = 1.0 / math.sqrt({"nope": dn, "v": dv}.get(scale or "", dn + dr))
        o = sdpa(torch.cat([q_nope, q_rope], dim=-1), k, v, causal=True, scale=s, impl="math")
        out = F.linear(o.transpose(1, 2).reshape(b, n, h * dv), p["o_proj.weight"])
        if mine:
            outs.append(out)
            if full_kv:
                cache = (_layout(k, layout), _layout(v, layout))
            elif per_head:
                cache = (c_store, _layout(kr_store[:, None].expand(b, h, t_all, dr), layout))
            else:
                cache = (c_store, kr_store)
    return {"out": torch.cat(outs, dim=1), "k": cache[0], "v": cache[1]}


def _layout(t: Tensor, layout: str) -> Tensor:
    """A per-head cache tensor (B, H, T, d) as code keeping it another way holds it."""
    if layout == "bthd":
        return t.transpose(1, 2)
    if layout == "flat":
        return t.transpose(1, 2).flatten(2)
    return t


LAYOUTS = {"bhtd": "(B, H, T, d)", "bthd": "(B, T, H, d)", "flat": "(B, T, H * d)"}


def _bug(**knobs):
    return lambda case: replay(case, **knobs)


def convention_swapped(declared_is: str):
    """The other convention's RoPE (q_rope and k_rope), when the file declares `declared_is` (None otherwise)."""

    def fn(case: Case) -> Tensor | None:
        declared = case.ctx.get("convention", "half")
        return None if declared != declared_is else replay(case, convention=other(declared))

    return fn


BUGS = (
    Bug(MD["mla_rope_on_latent"], _bug(rope_latent=True), "c_kv rotated at its positions (after the norm)"),
    *(Bug(MD["mla_k_rope_per_head"], _bug(per_head=True, layout=lay), f"k_rope cached per head as {shape}")
      for lay, shape in LAYOUTS.items()),
    *(Bug(MD["mla_full_kv_cached"], _bug(full_kv=True, layout=lay),
          f"cache = (k with k_rope broadcast, v), each per head as {shape}") for lay, shape in LAYOUTS.items()),
    Bug(MD["mla_scale_nope"], _bug(scale="nope"), "scores times 1/sqrt(d_n)"),
    Bug(MD["mla_scale_v"], _bug(scale="v"), "scores times 1/sqrt(d_v)"),
    Bug(MD["mla_no_kv_norm"], _bug(no_norm=True), "c_kv = a[..., :r] unnormalised"),
    Bug(MD["mla_norm_after_b"], _bug(norm_after_b=True),
        "kv_b_proj on the raw latent, its whole output RMS-normalised without a weight; raw latent cached"),
    Bug(MD["mla_cache_prenorm"], _bug(prenorm=True), "raw latent cached, the whole cache normalised on each call"),
    Bug(MD["mla_cache_unrotated"], _bug(unrotated=True), "raw k_rope cached, the whole cache rotated at 0..T-1"),
    Bug(MD["mla_split_order"], _bug(split="both"), "rope part first in the query heads and in kv_a's output"),
    Bug(MD["mla_split_order"], _bug(split="q"), "rope part first in the query heads"),
    Bug(MD["mla_split_order"], _bug(split="a"), "k_rope taken from the front of kv_a's output"),
    Bug(MD["mla_positions_from_zero"], _bug(restart=True), "each call rotated at 0 .. T_new - 1"),
    Bug(MD["mla_positions_from_zero"], _bug(restart=True, unrotated=True),
        "raw k_rope cached and rotated on read, new queries at 0 .. T_new - 1"),
    Bug(GENERIC["state_between_calls"], _bug(stateful=True),
        "the module keeps its own cache: a second sequence's calls append to the first's"),
    Bug(RD["rope_convention_swapped"], convention_swapped("half"),
        "your RoPE pairs features the 'interleaved' way (2i, 2i+1) but the file declares 'half' or no "
        "CONVENTION: declare CONVENTION = \"interleaved\""),
    Bug(RD["rope_convention_swapped"], convention_swapped("interleaved"),
        "your RoPE pairs features the 'half' way (i, i + d/2) but the file declares CONVENTION = "
        "\"interleaved\": declare CONVENTION = \"half\" (or delete the line)"),
)


SPEC = Spec(
    name="mla",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=BUGS,
    forbidden=FORBIDDEN_ATTENTION + FORBIDDEN_NORM,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES + FORBIDDEN_NORM_CLASSES,
    report_attrs=("CONVENTION",),
    prepare=lambda cases, attrs: apply_convention(cases, attrs, default("mla", "CONVENTION")),
    audit={"name": "mla_work", "d_model": 64, "n_heads": 4, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
           "qk_rope_head_dim": 8, "v_head_dim": 16, "prompt": 8, "lengths": [16, 32, 48, 64]},
)
