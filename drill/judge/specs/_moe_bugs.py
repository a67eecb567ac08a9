"""Known mixture-of-experts mistakes, recomputed on a case's own inputs (parent side only).

One parameterised layer, `moe_variant`, reproduces every mistake by a knob:
whether the top-k weights are renormalised, whether they are used at all
(or scale the expert's input instead of its output), how expert outputs are
put back into token rows, in which precision the router's softmax runs, and
how the load-balancing loss is put together (which probabilities give P_e,
how f_e is counted and divided, the n_experts factor). With every knob at
its default it is the contract's layer. Exact variants run in float64 after
the router matmul, which runs in the input's dtype as the contract says; the
half-precision router variant copies the bf16 arithmetic step by step, since
its rounding is the whole point.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from drill.judge.spec import Case, Diagnosis
from drill.judge.specs._common import diagnoses

MD = diagnoses(
    Diagnosis("moe_renorm_missing", "Top-k weights not renormalised although NORM_TOPK_PROB is True",
              "With NORM_TOPK_PROB = True (or absent, which means True) each token's top_k weights must be divided "
              "by their sum (Mixtral); yours are the raw softmax probabilities, so every output is scaled by the "
              "probability mass of the chosen experts (< 1).",
              "Either divide the top-k weights by their sum (w / w.sum(-1, keepdim=True)), or declare what you "
              "implement at the top of the file: NORM_TOPK_PROB = False."),
    Diagnosis("moe_renorm_unwanted", "Top-k weights renormalised although NORM_TOPK_PROB is False",
              "With NORM_TOPK_PROB = False the weights are the top-k softmax probabilities as they are (Qwen-MoE, "
              "DeepSeek-V2); yours sum to 1 per token. Dividing by their sum and taking a softmax over only the top-k "
              "logits give the same numbers.",
              "Take the weights from the softmax over all experts and do not divide them by their sum, or declare "
              "NORM_TOPK_PROB = True if renormalising is what you mean."),
    Diagnosis("moe_softmax_topk_only", "Softmax over only the top-k logits",
              "Your router probabilities come from a softmax over each token's k largest logits, not over all experts: "
              "the weights are then renormalised (wrong with NORM_TOPK_PROB = False) and the aux loss sees a "
              "distribution over k experts instead of p over all of them.",
              "p = softmax(router(x).float(), dim=-1) over every expert first; take topk of p for the weights and "
              "use p itself for the aux loss."),
    Diagnosis("moe_aux_from_topk", "Aux loss built from the top-k weights instead of the full softmax",
              "P_e is the mean over tokens of the router probability p_e over *all* experts; yours averages the "
              "routing weights (zero for unchosen experts, renormalised when NORM_TOPK_PROB), which is not "
              "Mixtral's load_balancing_loss_func and gives the router a different gradient.",
              "Keep the full softmax p (N, n_experts) and use P = p.mean(0); the top-k weights only scale the "
              "experts."),
    Diagnosis("moe_aux_f_over_topk", "f_e divided by tokens x top_k",
              "f_e is the share of tokens whose top_k includes expert e (the f_e sum to top_k); dividing the counts "
              "by tokens * top_k makes them sum to 1 and shrinks aux by a factor top_k (some Switch-style code does "
              "this; Mixtral's loss, the contract, does not).",
              "f = F.one_hot(idx, n_experts).sum(1).float().mean(0): divide the counts by the number of tokens only."),
    Diagnosis("moe_aux_top1_counts", "f_e counts only each token's first choice",
              "With top_k > 1 a token counts for every expert in its top_k (Mixtral); counting only the argmax "
              "(Switch Transformer's top-1 rule) undercounts every other chosen expert.",
              "Count all k choices: one_hot(idx, n_experts) over the (N, k) indices, summed over k."),
    Diagnosis("moe_aux_missing_n_experts", "Aux loss without the n_experts factor",
              "aux = n_experts * sum_e f_e * P_e, so a perfectly balanced router gives top_k whatever the number of "
              "experts; yours is that divided by n_experts.",
              "Multiply sum(f * P) by n_experts."),
    Diagnosis("moe_unweighted", "Expert outputs summed without their weights",
              "Each chosen expert's output must be scaled by the token's routing weight before the sum; yours adds "
              "them with weight 1, so the router has no effect on the output (and gets no gradient through it).",
              "Multiply each expert's output by w[token, slot, None] before adding it to the token's row."),
    Diagnosis("moe_weight_on_input", "Routing weight applied to the expert's input",
              "The weight scales the expert's *output*: w * expert(x). expert(w * x) differs, since the SwiGLU is "
              "not linear.",
              "Run the expert on the token as it is, then multiply its output by the weight."),
    Diagnosis("moe_wrong_rows", "Expert outputs added to the wrong token rows",
              "After the experts run on their tokens, each result must go back to the row of the token it came "
              "from. Yours lands in other rows: a permutation applied instead of its inverse (y[order] where "
              "y[inverse] or out[order] = y was meant), or (token, slot) rows regrouped in the wrong order.",
              "Keep the token index of every dispatched row and add the result there: out.index_add_(0, token, y); "
              "after sorting by expert, undo it with the inverse permutation (order.argsort()), and reshape "
              "(N * k, d) rows as (N, k, d) if they were built token by token."),
    Diagnosis("moe_router_half", "Router softmax in half precision",
              "The router's softmax must run in fp32 whatever x's dtype (Hugging Face: softmax(logits, dtype=float)); "
              "in bf16 every probability is rounded to 8 bits, which moves the aux loss (and the weights) by up to "
              "0.4%: the router learns from a noisy signal.",
              "p = torch.softmax(router_logits.float(), dim=-1), and keep p, the weights and the aux loss in fp32."),
    Diagnosis("moe_aux_softmax_twice", "Softmax applied twice in the aux loss",
              "P_e is the mean of the router probabilities p = softmax(logits). Yours passes p through softmax "
              "once more (Hugging Face's load_balancing_loss_func takes *logits* and applies the softmax itself: "
              "handing it the probabilities does this). softmax(p) of values in [0, 1] is nearly uniform, so "
              "P_e barely moves and the loss stops pushing the router towards balance.",
              "Apply the softmax once: P = torch.softmax(router_logits.float(), dim=-1).mean(0), and if a "
              "helper applies its own softmax, give it the logits."),
    Diagnosis("moe_aux_deepseek_sequence", "DeepSeek's sequence-wise aux loss",
              "Yours is DeepSeek-V2/V3's auxiliary loss: counted per sequence (f_e and P_e over each sequence's "
              "T tokens, then averaged over the batch), f_e divided by top_k as well (n_experts * count / "
              "(T * top_k)), and multiplied by a coefficient alpha. It is a real convention, but the contract's is "
              "Mixtral's (Switch's) batch-level loss: n_experts * sum_e f_e * P_e with f_e = count_e / tokens "
              "over all B * T tokens, no 1/top_k and no coefficient (the training loop applies one).",
              "Flatten to (B * T) tokens, f = one_hot(idx, n_experts).sum(1).float().mean(0), "
              "P = p.mean(0), aux = n_experts * (f * P).sum(); leave the coefficient to the caller."),
    Diagnosis("moe_norm_topk_invalid", "NORM_TOPK_PROB has an unknown value",
              "The module-level NORM_TOPK_PROB must be True or False (absent means True).",
              "Set NORM_TOPK_PROB = True or NORM_TOPK_PROB = False, exactly as written."),
)


def _swiglu64(x: Tensor, case: Case, e: int) -> Tensor:
    w = [case.params[f"experts.{e}.{n}.weight"].double() for n in ("w_gate", "w_up", "w_down")]
    return F.linear(F.silu(F.linear(x, w[0])) * F.linear(x, w[1]), w[2])


def moe_variant(
    case: Case,
    *,
    norm: bool | None = None,
    softmax_topk: bool = False,
    unweighted: bool = False,
    weight_input: bool = False,
    rows: str | None = None,
    half: str | None = None,
    aux_p: str = "full",
    aux_f: str = "all",
    aux_n: bool = True,
    aux_seq: float | None = None,
) -> Tensor | None:
    """The case's graded element (ctx["pick"]: "out" or "aux") as the buggy layer computes it.

    norm: override the declared renormalisation (None: as declared).
    softmax_topk: weights (and, with aux_p="weights", the aux's P) from a softmax over the top-k logits.
    rows: "slot_major" ((N*k, d) rows built token by token, regrouped as (k, N, d)) or "unsort" (rows
    sorted by expert with a stable argsort, put back with y[order] instead of the inverse).
    half: "softmax" (router softmax in x's half dtype, the rest in fp32) or "mean" (P_e also
    averaged in it); None on fp32 input.
    aux_p: "full" (mean of p), "weights" (mean of the routing weights scattered over experts) or
    "softmax_twice" (mean of softmax(p)).
    aux_seq: DeepSeek's sequence-wise loss with this coefficient alpha (aux_p/aux_f/aux_n then unused).
    aux_f: "all" (every choice counts), "div_k" (divided by tokens * top_k), "top1" (first choice only).
    """
    ctx = case.ctx
    x = case.args["x"]
    dt = x.dtype
    if half is not None and dt == torch.float32:
        return None
    n_experts, top_k = ctx["n_experts"], ctx["top_k"]
    renorm = ctx.get("norm", True) if norm is None else norm
    flat = x.reshape(-1, x.shape[-1])
    logits = F.linear(flat, case.params["router.weight"].to(dt))  # the router matmul in x's dtype
    if half is not None:
        probs_h = torch.softmax(logits, dim=-1)
        probs = probs_h.double()
    else:
        probs = torch.softmax(logits.double(), dim=-1)
    top_w, idx = probs.topk(top_k, dim=-1)
    if softmax_topk:
        top_w = torch.softmax(logits.double().gather(-1, idx), dim=-1)
    elif renorm:
        if half is not None:
            hw = probs_h.gather(-1, idx)
            top_w = (hw / hw.sum(dim=-1, keepdim=True)).double()
        else:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    if ctx["pick"] == "aux" and aux_seq is not None:
        b, t = x.shape[0], flat.shape[0] // x.shape[0]
        counts = F.one_hot(idx.reshape(b, t * top_k), n_experts).sum(dim=1).double()  # (B, E) per sequence
        ce = counts / (t * top_k / n_experts)
        return (aux_seq * (ce * probs.reshape(b, t, n_experts).mean(dim=1)).sum(dim=-1).mean()).float()
    if ctx["pick"] == "aux":
        n = flat.shape[0]
        counted = idx[:, :1] if aux_f == "top1" else idx
        f = F.one_hot(counted, n_experts).sum(dim=1).double() / n
        if aux_f == "div_k":
            f = f / top_k
        if aux_p == "weights":
            p_used = torch.zeros(n, n_experts, dtype=torch.float64).scatter(1, idx, top_w)
            big_p = p_used.mean(dim=0)
        elif aux_p == "softmax_twice":
            big_p = torch.softmax(probs, dim=-1).mean(dim=0)
        elif half == "mean":
            big_p = probs_h.mean(dim=0).double()
        else:
            big_p = probs.mean(dim=0)
        aux = (f * big_p).sum() * (n_experts if aux_n else 1)
        if aux_f == "top1" and top_k > 1 and bool((top_w[:, 0] == top_w[:, 1]).any()):
            # A token whose two best experts tie (bf16 logits on the grid can): which one is "first" is
            # the code's tie-break (argmax vs topk order), so this case says nothing about the variant.
            return aux.float(), torch.ones((), dtype=torch.bool)
        return aux.float()
    xd = flat.double()
    w = torch.ones_like(top_w) if unweighted else top_w
    n, k = idx.shape
    # y[t, s]: what the code computes for token t's s-th choice
    y = torch.zeros(n, k, x.shape[-1], dtype=torch.float64)
    for e in range(n_experts):
        token, slot = torch.where(idx == e)
        if token.numel():
            inp = xd[token] * w[token, slot, None] if weight_input else xd[token]
            out_e = _swiglu64(inp, case, e)
            y[token, slot] = out_e if weight_input else out_e * w[token, slot, None]
    flat_y = y.reshape(n * k, -1)
    if rows == "slot_major":
        out = flat_y.view(k, n, -1).sum(dim=0)
    elif rows == "unsort":
        order = idx.reshape(-1).argsort(stable=True)
        out = flat_y[order][order].view(n, k, -1).sum(dim=1)  # sorted rows ys = flat_y[order]; then ys[order]
    else:
        out = y.sum(dim=1)
    return out.reshape(x.shape).float()


def _declared(value: bool, **knobs):
    """A variant that applies only when the file's NORM_TOPK_PROB (ctx["norm"]) is `value`."""

    def fn(case: Case):
        if case.ctx.get("norm", True) != value:
            return None
        return moe_variant(case, **knobs)

    return fn


def _shows(condition, **knobs):
    """A variant that equals the reference on cases where `condition(case)` is false."""
    return lambda case: moe_variant(case, **knobs) if condition(case) else None


def _k_above_1(case: Case) -> bool:
    return case.ctx["top_k"] > 1


def _weights_matter(case: Case) -> bool:
    """Not top_k = 1 with renormalisation: there every weight is exactly 1."""
    return case.ctx["top_k"] > 1 or not case.ctx.get("norm", True)


# (diagnosis id, label, fn(case) -> the graded element or None)
MOE_VARIANTS = [
    ("moe_renorm_missing", "raw top-k probabilities, though the file declares NORM_TOPK_PROB = True (or leaves it out)",
     _declared(True, norm=False)),
    ("moe_renorm_unwanted", "top-k weights divided by their sum, though the file declares NORM_TOPK_PROB = False",
     _declared(False, norm=True)),
    ("moe_softmax_topk_only", "softmax over the top-k logits, used for the weights and for the aux loss",
     _declared(False, softmax_topk=True, aux_p="weights")),
    ("moe_aux_from_topk", "P_e from the routing weights, not from the full softmax",
     lambda c: moe_variant(c, aux_p="weights")),
    ("moe_aux_f_over_topk", "f_e = counts / (tokens * top_k)", _shows(_k_above_1, aux_f="div_k")),
    ("moe_aux_top1_counts", "f_e counts each token's first choice only", _shows(_k_above_1, aux_f="top1")),
    ("moe_aux_missing_n_experts", "aux = sum_e f_e * P_e (no n_experts factor)", lambda c: moe_variant(c, aux_n=False)),
    ("moe_unweighted", "sum of the chosen experts' outputs, weight 1", _shows(_weights_matter, unweighted=True)),
    ("moe_weight_on_input", "expert(weight * x) instead of weight * expert(x)",
     _shows(_weights_matter, weight_input=True)),
    ("moe_wrong_rows", "(N * k, d) rows built token by token, summed as (k, N, d)",
     _shows(_k_above_1, rows="slot_major")),
    ("moe_wrong_rows", "rows sorted by expert, put back with y[order] instead of the inverse permutation",
     lambda c: moe_variant(c, rows="unsort")),
    ("moe_router_half", "router softmax in the input's half dtype", lambda c: moe_variant(c, half="softmax")),
    ("moe_router_half", "router softmax and P_e's mean in the input's half dtype",
     lambda c: moe_variant(c, half="mean")),
    # issue 31: seen in real code
    ("moe_aux_softmax_twice", "P_e = softmax(p).mean(0): the probabilities softmaxed again",
     lambda c: moe_variant(c, aux_p="softmax_twice")),
]

# DeepSeek's coefficient alpha: 1 (none), Switch/Mixtral's 0.01, DeepSeek-V2's 0.003, DeepSeek-MoE's and
# V2-Lite's 0.001, DeepSeek-V3's 0.0001. One variant per value, so one alpha has to fit every aux test.
DEEPSEEK_ALPHAS = (1.0, 0.01, 0.003, 0.001, 0.0001)
MOE_VARIANTS += [
    ("moe_aux_deepseek_sequence", f"DeepSeek's sequence-wise aux (per sequence, / top_k), alpha={alpha:g}",
     lambda c, alpha=alpha: moe_variant(c, aux_seq=alpha)) for alpha in DEEPSEEK_ALPHAS
]


def deepseek_gate(alpha: float):
    """DeepSeek's whole gate on a file that declares (or defaults to) NORM_TOPK_PROB = True: its top-k weights
    left as they are (DeepSeek-V2 does not renormalise) and its sequence-wise aux."""

    def fn(case: Case):
        if not case.ctx.get("norm", True):
            return None
        return moe_variant(case, norm=False, aux_seq=alpha)

    return fn
