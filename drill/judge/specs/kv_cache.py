"""Hidden tests for `kv_cache`: CachedSelfAttention(d_model, n_heads, n_kv_heads, rope_base).

Every case is a "chain" (see drill/judge/chain.py): the child builds the
learner's module with the parent's weights and feeds one sequence through
it in a given split, chaining the cache each call returns. The expected
answer is always one full causal pass of the reference over the whole
sequence, so any correct split-invariant implementation passes whatever it
does inside. The splits are chosen to reveal the known mistakes:
- all at once (plain causal attention with RoPE; values must not be rotated);
- a prompt then one token at a time (positions must continue from T_past;
  a top-left mask hides all but the first key from a decode step);
- chunks of several tokens (the mask is still needed after the first call);
- uneven mixes of both;
- continuing from a cache built by the reference (the cache holds rotated
  keys: code that stores raw keys and re-rotates them fails here);
- the returned cache itself: rotated keys and values, in order.
Every decode step repeats T_new = 1 at a new position, so a RoPE cos/sin
cache keyed on the length (module-wide or per instance) shows without a
repeat-call probe; `annotate_stale` records what such caches would return.
Configs cover MHA (n_kv = n_heads), MQA (n_kv = 1) and real GQA, bases
10000 and 500000, fp32, bf16 and fp16 (the bf16 and fp16 chains check the dtype
of the outputs and of the returned cache; fp16 catches a mask fill that overflows).
One chained fp32 case also compares the gradients of x and of the four weights
(they flow through the cache).

The work audit (decode-step FLOPs against the cache length, rows fed to the
projections) runs after the cases; see drill/judge/audit.py.
"""

from __future__ import annotations

import torch

from drill.judge.diagnose import GENERIC
from drill.judge.registry import default
from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Bug, Case, Spec
from drill.judge.specs._attention_bugs import D as AD
from drill.judge.specs._common import (
    DTYPES,
    TOLERANCES,
    Draw,
    knob_pair_bugs,
    module_dtype,
    reference_with_grads,
    variant_bugs,
)
from drill.judge.specs._kv_bugs import (
    KD,
    KV_VARIANTS,
    STALE_KEYS,
    annotate_stale,
    convention_swapped,
    heads_strided,
    missing_scale,
    replay,
    scale_after_softmax,
    stale_rope,
)
from drill.judge.specs._rope_bugs import CONVENTIONS, RD, apply_convention

TARGET = "CachedSelfAttention"
DEFAULT_BASE = default("kv_cache", "rope_base")
KIND_CHAIN = "chain"
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")
WHAT = {"out": "outputs", "k": "returned cache keys", "v": "returned cache values"}
# How a failure message names the tensor compared (ctx["what"]; compare's default is "output").
NOUN = {"out": "output", "k": "returned key cache", "v": "returned value cache"}
LABEL = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def _weights(d: Draw, d_model: int, h: int, h_kv: int, dtype: str) -> dict[str, torch.Tensor]:
    dh = d_model // h
    return {
        "q_proj.weight": d.weight(h * dh, d_model, dtype=dtype),
        "k_proj.weight": d.weight(h_kv * dh, d_model, dtype=dtype),
        "v_proj.weight": d.weight(h_kv * dh, d_model, dtype=dtype),
        "o_proj.weight": d.weight(d_model, h * dh, dtype=dtype),
    }


def _scenario(
    d: Draw, label: str, *, h: int, h_kv: int, dh: int, calls: list[int], returns=("out",), past_len: int = 0,
    base: float = DEFAULT_BASE, dtype: str = "float32", batch: int = 2, grads: bool = False,
) -> list[Case]:
    """Cases sharing one sequence and one set of weights: one per output checked."""
    d_model = h * dh
    params = _weights(d, d_model, h, h_kv, dtype)
    x = d.normal(batch, sum(calls), d_model, dtype=dtype)
    args = {"x": x}
    if past_len:
        from drill.reference.attention import grouped_query_attention

        prefix = d.normal(batch, past_len, d_model, dtype=dtype).float()
        w = [params[f"{p}.weight"].float() for p in PROJ]
        _, (pk, pv) = grouped_query_attention(prefix, *w, h, h_kv, rope_base=base, impl="math")
        args.update(past_k=pk.to(DTYPES[dtype]), past_v=pv.to(DTYPES[dtype]))
    config = f"n_heads={h}, n_kv_heads={h_kv}, d_head={dh}" + ("" if base == DEFAULT_BASE else f", base {base:g}")
    split = "+".join(str(n) for n in calls)
    replays: dict = {}  # this check's bug replays of the shared sequence (specs/_kv_bugs.replay); dies with the cases
    parts: dict = {}  # and the per-call q, k, v those replays share (specs/_kv_bugs._parts)
    cases = []
    for what in returns:
        with_grads = grads and what == "out"
        cases.append(
            Case(
                name=f"{LABEL[dtype]} {label} [{split}], {config}: {WHAT[what]}",
                target=TARGET,
                kind=KIND_CHAIN,
                args=dict(args),
                init=(d_model, h, h_kv, float(base)),
                params=params,
                module_dtype=module_dtype(dtype),
                out_dtype=DTYPES[dtype],
                grad_inputs=("x",) if with_grads else (),
                grad_params=with_grads,
                upstream=d.normal(batch, sum(calls), d_model) if with_grads else None,
                extra={"calls": list(calls), "returns": what, "past": bool(past_len)},
                ctx={"dtype": dtype, "n_heads": h, "n_kv_heads": h_kv, "base": float(base), "what": NOUN[what],
                     "replays": replays, "replay_parts": parts},
            )
        )
    return cases


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    t = d.int(6, 9)
    cases += _scenario(d, "all at once", h=4, h_kv=2, dh=8, calls=[t], returns=("out", "k", "v"))
    p = d.int(3, 6)
    cases += _scenario(d, "prompt then one token at a time", h=4, h_kv=2, dh=16, calls=[p, 1, 1, 1, 1],
                       returns=("out", "k", "v"), grads=True)
    c = d.int(2, 4)
    cases += _scenario(d, "chunks of several tokens", h=6, h_kv=3, dh=8, calls=[c, c, c], returns=("out", "k"))
    cases += _scenario(d, "uneven mix", h=8, h_kv=2, dh=8, calls=[d.int(2, 4), 1, d.int(2, 5), 1, 2], base=500000.0)
    cases += _scenario(d, "MHA, prompt then tokens", h=4, h_kv=4, dh=8, calls=[d.int(2, 4), 1, 1, 3])
    cases += _scenario(d, "MQA, chunks", h=4, h_kv=1, dh=16, calls=[d.int(2, 4), 2, 1, 3], returns=("out", "k"))
    cases += _scenario(d, "continuing a reference-built cache", h=4, h_kv=2, dh=8, calls=[d.int(2, 4), 1, 2],
                       past_len=d.int(3, 7), returns=("out", "k", "v"))
    # The bf16 cache is checked like the fp16 one below (dtype and values); the extra cases draw nothing.
    cases += _scenario(d, "prompt then tokens", h=4, h_kv=2, dh=16, calls=[d.int(3, 5), 1, 1, 2], dtype="bfloat16",
                       returns=("out", "k", "v"))
    # Drawn last so the cases above are unchanged for a given seed. fp16 is where a -1e9 or
    # finfo(float32).min mask fill overflows, and where the cache must stay in the input dtype.
    cases += _scenario(d, "prompt, a chunk, then tokens", h=4, h_kv=2, dh=16, calls=[d.int(3, 5), 2, 1, 1],
                       returns=("out", "k", "v"), dtype="float16")
    annotate_stale(cases)  # for the stale-RoPE-cache variants (state_between_calls); draws nothing
    for case in [c for c in cases if c.extra["returns"] == "out" and c.ctx["dtype"] == "float32"][:2]:
        case.extra["twice"] = True  # determinism probes (see _common.twice_probes): the chain run a second time
    return cases


def reference(case: Case):
    """One full causal pass over the whole sequence (after the given cache, if any), in fp32.

    Computed for both RoPE conventions (ctx["alt"]); `prepare` keeps the one the
    file's CONVENTION declares, as for rope. A reference-built past cache is the
    same data for both: correct code appends to whatever rotated keys it is given.
    """
    from drill.reference.attention import grouped_query_attention

    ctx, returns = case.ctx, case.extra["returns"]

    def forward(convention):
        def run(a, p):
            past = (a["past_k"], a["past_v"]) if case.extra.get("past") else None
            out, (k, v) = grouped_query_attention(
                a["x"], *(p[f"{n}.weight"] for n in PROJ), ctx["n_heads"], ctx["n_kv_heads"], rope_base=ctx["base"],
                past_kv=past, impl="math", rope_convention=convention,
            )
            return {"out": out, "k": k, "v": v}[returns]

        return run

    ctx["alt"] = {c: reference_with_grads(case, forward(c)) for c in CONVENTIONS}
    return ctx["alt"]["half"]


def _bug(knobs: dict):
    return lambda case: replay(case, **knobs)


# Two mistakes in one file (issue 31): every two of the cache's knobs replayed together, the cache's own mistakes
# first, then the attention's (the scale, the heads' layout) that ride along in the same replay.
KV_KNOBS = (
    *KV_VARIANTS,
    ("missing_scale", "no 1/sqrt(d_head) scaling", {"scale": 1.0}),
    ("scale_after_softmax", "probabilities divided by sqrt(d_head) after the softmax", {"scale_after": True}),
    ("heads_strided_split", "heads split as (d_head, heads)", {"strided": True}),
)


SPEC = Spec(
    name="kv_cache",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=variant_bugs(KD, KV_VARIANTS, _bug)
    + (
        Bug(AD["missing_scale"], missing_scale, "no 1/sqrt(d_head) scaling"),
        Bug(AD["scale_after_softmax"], scale_after_softmax, "probabilities divided by sqrt(d_head) after the softmax"),
        Bug(AD["heads_strided_split"], heads_strided, "view(B, T, d_head, heads) to split, the same layout to merge"),
        # As in rope: the convention the math implements is not the one declared (labels say what to declare).
        Bug(RD["rope_convention_swapped"], convention_swapped("half"),
            "your RoPE pairs features the 'interleaved' way (2i, 2i+1) but the file declares 'half' or no "
            "CONVENTION: declare CONVENTION = \"interleaved\""),
        Bug(RD["rope_convention_swapped"], convention_swapped("interleaved"),
            "your RoPE pairs features the 'half' way (i, i + d/2) but the file declares CONVENTION = "
            "\"interleaved\": declare CONVENTION = \"half\" (or delete the line)"),
    )
    + tuple(
        Bug(GENERIC["state_between_calls"], stale_rope(label),
            f"{label}: a later call of the same length reuses an earlier call's angles")
        for label, _, _ in STALE_KEYS
    )
    + knob_pair_bugs({**KD, **AD}, KV_KNOBS, _bug),
    exception_bugs=(("without overflow", AD["fp16_fill_overflow"]),),
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    report_attrs=("CONVENTION",),
    prepare=lambda cases, attrs: apply_convention(cases, attrs, default("kv_cache", "CONVENTION")),
    audit={"name": "kv_work", "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "prompt": 8, "lengths": [16, 32, 48, 64]},
)
