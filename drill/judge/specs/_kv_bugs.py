"""Known KV-cache mistakes, replayed call by call on a chain case's inputs (parent side).

`replay` walks the same split of the sequence as the learner's module did
and keeps the cache the buggy code would keep, with one knob per mistake:
positions restarting at 0, a top-left causal mask, a mask only on the first
call, keys cached before RoPE (two ways code ends up there), RoPE applied to
the values. With every knob off it is the correct algorithm (and equals the
reference), which the tests use to check the replay itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from drill.judge.spec import Case, Diagnosis
from drill.judge.specs._attention_bugs import merge_heads, split_heads

KD = {
    d.id: d
    for d in [
        Diagnosis("kv_rope_positions_restart", "New tokens rotated from position 0",
                  "On every call the new tokens were rotated as positions 0..T_new-1; they sit at T_past .. "
                  "T_past+T_new-1, so after the first call queries and keys get the wrong angles.",
                  "Take T_past = past_kv[0].shape[2] (0 without a cache) and rotate at torch.arange(T_past, T_past + "
                  "T_new)."),
        Diagnosis("kv_mask_top_left", "Causal mask aligned top-left",
                  "tril() of the (T_new, T_past + T_new) score rectangle (or SDPA's is_causal) lets new query i see "
                  "only keys 0..i; with a cache the queries are the *last* T_new positions, so the mask must be "
                  "aligned bottom-right.",
                  "Build the mask from absolute positions (key_pos <= query_pos), or tril(diagonal=T_past)."),
        Diagnosis("kv_mask_first_call_only", "Causal mask only on the first call",
                  "With a cache, a chunk of several new tokens still needs the causal mask among themselves; "
                  "without it earlier tokens of the chunk see later ones.",
                  "Apply the (bottom-right) causal mask on every call with T_new > 1, cache or not."),
        Diagnosis("kv_cache_unrotated_keys", "Cache holds keys before RoPE",
                  "The returned cache must hold keys *after* RoPE (the reference cache and any later call assume it); "
                  "yours stores raw keys, so a cache from elsewhere is rotated twice, or yours is read as if rotated.",
                  "Rotate the new keys at their positions first, then append them to the cache; never rotate cached "
                  "keys again."),
        Diagnosis("kv_rope_positions_shifted", "New tokens' positions shifted by T_new",
                  "The new tokens sit at T_past .. T_past + T_new - 1; yours are rotated T_new further along, as if "
                  "T_past were read after the new keys were appended (k_all.shape[2] instead of past_kv[0].shape[2]). "
                  "A single call still looks right (RoPE depends on relative positions), but the cached keys hold the "
                  "wrong angles and every later call sees them at the wrong distance.",
                  "Read T_past from past_kv before appending anything (0 without a cache) and rotate the new tokens at "
                  "torch.arange(T_past, T_past + T_new)."),
        Diagnosis("kv_rope_on_values", "RoPE applied to the values",
                  "Only queries and keys are rotated: RoPE encodes relative position in the scores; rotated values "
                  "mix features of the output.",
                  "Rotate q and k only; cache and attend with the values as projected."),
    ]
}


def _rope(t: Tensor, positions: Tensor, base: float, convention: str = "half") -> Tensor:
    from drill.reference.rope import apply_rope

    return apply_rope(t, positions, base, convention, impl="math")




def _once_per_scenario(fn):
    """Replay a scenario's sequence once per mistake; its cases (outputs, key cache, value cache) pick from it.

    The cases of one `_scenario` share a `ctx["replays"]` dict (made with the
    cases, so nothing outlives one check). The memo key is every argument but
    the case, whatever knobs `replay` grows, plus the stale positions the
    case's own `ctx["stale"]` gives (they differ between cases of one scenario).
    Before it, a failing kv_cache file replayed every chain three times per variant.
    """
    import functools
    import inspect

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(case: Case, **knobs):
        bound = sig.bind(case, **knobs)
        bound.apply_defaults()
        memo = case.ctx.get("replays")
        if memo is None:
            return fn(case, **knobs)[case.extra["returns"]]
        stale = bound.arguments.get("stale")
        positions = case.ctx["stale"][stale] if stale else None
        key = (tuple((k, repr(v)) for k, v in bound.arguments.items() if k != "case"),
               None if positions is None else tuple(tuple(p.tolist()) for p in positions))
        if key not in memo:
            memo[key] = fn(case, **knobs)
        return memo[key][case.extra["returns"]]

    return wrapper


@_once_per_scenario
def replay(
    case: Case,
    *,
    restart: bool = False,
    top_left: bool | str = False,
    first_only: bool = False,
    unrotated: str | None = None,
    rope_v: bool = False,
    scale: float | None = None,
    scale_after: bool = False,
    strided: bool = False,
    stale: str | None = None,
    shifted: bool = False,
    convention: str | None = None,
) -> Tensor:
    """The chain case's chosen output (extra["returns"]) as the buggy code computes it (fp32).

    top_left: True (tril of the (T_new, T_total) rectangle on every call) or "chunks"
    (only when T_new > 1; a single token unmasked, which is right).
    unrotated: None (correct), "append" (raw keys appended to the cache, this call
    attends with its rotated keys, the past is read as rotated) or "rerotate"
    (raw keys cached, the whole cache rotated at 0..T_total-1 on every call).
    scale_after: unscaled softmax, probabilities divided by sqrt(d_head) (= the attention output divided).
    strided: heads split (and merged) as (d_head, heads): head h reads every heads-th feature.
    stale: a RoPE cos/sin cache keyed without the positions; the key of ctx["stale"] (see
    `annotate_stale`) giving, per call, the positions whose angles the cache returns.
    shifted: new tokens rotated at T_past + T_new .. T_past + 2 T_new - 1 (T_past read after appending).
    convention: the RoPE pairing used (default: the file's declared one, ctx["convention"], "half" when unset).
    """
    from drill.reference.attention import sdpa

    a, ctx, extra = case.args, case.ctx, case.extra
    h, h_kv, base = ctx["n_heads"], ctx["n_kv_heads"], ctx["base"]
    wq, wk, wv, wo = (case.params[f"{p}.weight"].float() for p in ("q_proj", "k_proj", "v_proj", "o_proj"))
    x = a["x"].float()
    past = (a["past_k"].float(), a["past_v"].float()) if extra.get("past") else None
    outs, start = [], 0
    stale_positions = ctx["stale"][stale] if stale else None
    conv = convention or ctx.get("convention", "half")
    # One scenario's projected and rotated q, k, v per call, shared by its replays (ctx["replay_parts"]): most
    # mistakes (the masks, the cache, the scale) change nothing before the attention, and recomputing these was
    # a third of a failing kv_cache check's diagnosis. Keyed by all they depend on; never changed in place.
    parts = ctx.get("replay_parts", {})
    for i, n in enumerate(extra["calls"]):
        t_past = 0 if past is None else past[0].shape[2]
        pos = torch.arange(n) if restart else torch.arange(t_past, t_past + n)
        if shifted:
            pos = pos + n
        if stale_positions is not None:
            pos = stale_positions[i]
        key = (i, strided, tuple(pos.tolist()), conv, rope_v)
        if key not in parts:
            xc = x[:, start : start + n]
            q, k, v = (split_heads(F.linear(xc, w), n_h, strided) for w, n_h in ((wq, h), (wk, h_kv), (wv, h_kv)))
            parts[key] = (_rope(q, pos, base, conv), k, _rope(k, pos, base, conv),
                          _rope(v, pos, base, conv) if rope_v else v)
        q, k, k_rot, v = parts[key]
        past_k, past_v = (past if past is not None else (k.new_zeros(*k.shape[:2], 0, k.shape[3]),) * 2)
        v_all = torch.cat([past_v, v], dim=2)
        if unrotated == "rerotate":
            cache_k = torch.cat([past_k, k], dim=2)
            k_att = _rope(cache_k, torch.arange(cache_k.shape[2]), base, conv)
        elif unrotated == "append":
            k_att, cache_k = torch.cat([past_k, k_rot], dim=2), torch.cat([past_k, k], dim=2)
        else:
            k_att = cache_k = torch.cat([past_k, k_rot], dim=2)
        t_total = k_att.shape[2]
        if top_left == "chunks" and n == 1:
            mask = None  # a lone new token may see everything: correct without a mask
        elif top_left:
            mask = torch.ones(n, t_total, dtype=torch.bool).tril()
        elif first_only and past is not None:
            mask = None
        else:
            mask = torch.ones(n, t_total, dtype=torch.bool).tril(diagonal=t_total - n)
        if scale_after:
            o = sdpa(q, k_att, v_all, mask, scale=1.0, impl="math") / q.shape[-1] ** 0.5
        else:
            o = sdpa(q, k_att, v_all, mask, scale=scale, impl="math")
        outs.append(F.linear(merge_heads(o, strided), wo))
        past = (cache_k, v_all)
        start += n
    return {"out": torch.cat(outs, dim=1), "k": past[0], "v": past[1]}  # the wrapper picks extra["returns"]


# How a RoPE cache keyed without the positions can be keyed: (label, fields of the key, whether it
# lives for the whole run (module level) or for one module instance). The child runs the cases in
# order in one process, so a module-level cache carries angles from one case to the next.
STALE_KEYS = (
    ("RoPE cos/sin cached at module level per (T_new, d_head, base), not per position", ("n", "dh", "base"), True),
    ("RoPE cos/sin cached at module level per (T_new, d_head), not per position", ("n", "dh"), True),
    ("RoPE cos/sin cached at module level per (T_new, d_head, base, dtype), not per position",
     ("n", "dh", "base", "dtype"), True),
    ("RoPE cos/sin cached on the module per T_new, not per position", ("n",), False),
)


def annotate_stale(cases: list[Case]) -> None:
    """ctx["stale"][key name] = per call, the positions a shape-keyed RoPE cache would return.

    Simulates the cache over the cases in the order the child runs them:
    the first call with a given key stores its own positions, every later
    call with that key gets them back.
    """
    for name, fields, whole_run in STALE_KEYS:
        table: dict = {}
        for case in cases:
            if not whole_run:
                table = {}
            ctx, extra = case.ctx, case.extra
            dh = case.init[0] // ctx["n_heads"]
            t_past = case.args["past_k"].shape[2] if extra.get("past") else 0
            got = []
            for n in extra["calls"]:
                values = {"n": n, "dh": dh, "base": ctx["base"], "dtype": ctx["dtype"]}
                key = tuple(values[f] for f in fields)
                got.append(table.setdefault(key, torch.arange(t_past, t_past + n)))
                t_past += n
            ctx.setdefault("stale", {})[name] = got


def stale_rope(key: str):
    return lambda case: replay(case, stale=key)


KV_VARIANTS = [
    ("kv_rope_positions_restart", "positions 0..T_new-1 on every call", {"restart": True}),
    ("kv_mask_top_left", "tril of the score rectangle (top-left)", {"top_left": True}),
    ("kv_mask_top_left", "top-left tril for chunks, no mask for single tokens", {"top_left": "chunks"}),
    ("kv_mask_first_call_only", "no mask once a cache exists", {"first_only": True}),
    ("kv_cache_unrotated_keys", "raw keys appended to the cache", {"unrotated": "append"}),
    ("kv_cache_unrotated_keys", "raw keys cached, whole cache re-rotated every call", {"unrotated": "rerotate"}),
    ("kv_rope_on_values", "values rotated too", {"rope_v": True}),
    # Issue 18: a mistake seen in real code, after the planted ones.
    ("kv_rope_positions_shifted", "positions T_past + T_new .. T_past + 2 T_new - 1", {"shifted": True}),
]


def convention_swapped(declared_is: str):
    """The other convention's RoPE inside the cache, when the file declares `declared_is` (None otherwise)."""
    from drill.judge.specs._rope_bugs import other

    def fn(case: Case) -> Tensor | None:
        declared = case.ctx.get("convention", "half")
        return None if declared != declared_is else replay(case, convention=other(declared))

    return fn


def missing_scale(case: Case) -> Tensor:
    return replay(case, scale=1.0)


def scale_after_softmax(case: Case) -> Tensor:
    return replay(case, scale_after=True)


def heads_strided(case: Case) -> Tensor:
    return replay(case, strided=True)
