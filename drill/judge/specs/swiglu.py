"""Hidden tests for `swiglu`: ffn_hidden_dim(d_model, multiple_of=256) and SwiGLU(d_model, d_ff).

ffn_hidden_dim is checked on many d_model values (not only 4096 -> 11008) and
several `multiple_of`, so rounding down, not rounding, or rounding to the
nearest multiple all show. The module gets random weights in w_gate, w_up and
w_down; swapping gate and up, or using another activation, moves the output
far beyond tolerance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from drill.judge.registry import default
from drill.judge.spec import KIND_MAP, KIND_MODULE, Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import (
    TOLERANCES,
    Draw,
    knob_pair_bugs,
    module_case,
    reference_with_grads,
    repeat_probe,
    twice_probes,
)

MULTIPLE_OF = default("swiglu", "multiple_of")  # the contract's default

SD = {
    d.id: d
    for d in [
        Diagnosis("swiglu_gate_up_swapped", "Gate and up projections swapped",
                  "silu must be applied to w_gate(x), and the result multiplied by w_up(x); with random weights the "
                  "two are not interchangeable.",
                  "Return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))."),
        Diagnosis("swiglu_wrong_activation", "Wrong activation in the gate",
                  "SwiGLU gates with SiLU (x * sigmoid(x)); ReLU, GELU or a bare sigmoid give a different function.",
                  "Use F.silu (or g * torch.sigmoid(g)) on the gate projection."),
        Diagnosis("swiglu_silu_of_product", "SiLU applied to gate * up",
                  "SwiGLU gates the up projection: silu(w_gate(x)) * w_up(x). Taking silu(w_gate(x) * w_up(x)) "
                  "applies the activation to the product, so the gate no longer scales the up projection linearly.",
                  "Activate the gate alone, then multiply: self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))."),
        Diagnosis("ffn_hidden_rounding", "Hidden size rounded wrongly",
                  "The hidden size is int(8 * d_model / 3) rounded UP to a multiple of `multiple_of` (4096 -> 11008).",
                  "hidden = int(8 * d_model / 3); return multiple_of * ((hidden + multiple_of - 1) // multiple_of)."),
    ]
}

D_MODELS = [4096, 512, 768, 1000, 1, 3, 96, 5120, 2048, 4097, 300, 8192]
# (8, 7), (2, 5), (5, 1): int(8d/3) is already a multiple while 8d/3 is not an
# integer, so ceil-before-truncate shows (impossible when multiple_of is 256).
WITH_MULTIPLE = [(4096, 256), (1000, 64), (768, 100), (500, 32), (3, 7), (2048, 128), (100, 1000), (4096, 64),
                 (8, 7), (2, 5), (5, 1)]


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    sizes = D_MODELS + [d.int(2, 9000) for _ in range(4)]
    pairs = WITH_MULTIPLE + [(d.int(2, 6000), d.choice([16, 48, 128, 256])) for _ in range(3)]
    cases = [
        Case(name=f"ffn_hidden_dim(d_model) for {len(sizes)} sizes", target="ffn_hidden_dim", kind=KIND_MAP,
             rows=[(s,) for s in sizes], out_dtype=torch.int64, ctx={"dtype": "int64", "tol": "int64"}),
        Case(name=f"ffn_hidden_dim(d_model, multiple_of) for {len(pairs)} pairs", target="ffn_hidden_dim",
             kind=KIND_MAP, rows=list(pairs), out_dtype=torch.int64, ctx={"dtype": "int64", "tol": "int64"}),
    ]
    for name, shape, dtype, grads in [
        ("fp32 (B,T,d)", (2, d.int(3, 6), d.choice([16, 24])), "float32", True),
        ("fp32 2-D (N,d)", (d.int(3, 7), d.choice([8, 32])), "float32", True),
        ("fp32 4-D (2,2,T,d)", (2, 2, d.int(2, 5), 12), "float32", False),
        ("fp16 (B,T,d)", (2, 4, 32), "float16", False),
        ("bf16 (B,T,d)", (2, 3, 16), "bfloat16", False),
    ]:
        dm = shape[-1]
        dff = d.choice([2 * dm, 3 * dm, 40])
        params = {
            "w_gate.weight": d.weight(dff, dm, dtype=dtype),
            "w_up.weight": d.weight(dff, dm, dtype=dtype),
            "w_down.weight": d.weight(dm, dff, dtype=dtype),
        }
        cases.append(_module_case(d, f"{name}, d_model={dm}, d_ff={dff}", shape, dff, params, dtype, grads))
    # Drawn last, so the cases above are unchanged for a given seed: the same module instance
    # called first on other inputs of the same shape, the second call graded.
    shape, dff = (2, d.int(3, 6), 16), 48
    params = {"w_gate.weight": d.weight(dff, 16), "w_up.weight": d.weight(dff, 16), "w_down.weight": d.weight(16, dff)}
    first = d.normal(*shape)
    probe = _module_case(d, f"repeat call: one module called twice, x {shape}, d_ff={dff}",
                         shape, dff, params, "float32", False)
    cases.append(repeat_probe(probe, {"x": first}))
    return twice_probes(cases)  # draws nothing


def _module_case(d: Draw, name: str, shape: tuple, dff: int, params: dict, dtype: str, grads: bool) -> Case:
    x = d.normal(*shape, dtype=dtype)
    return module_case(d, name, "SwiGLU", {"x": x}, init=(shape[-1], dff), params=params, dtype=dtype, grads=grads)


def reference(case: Case):
    from drill.reference.mlp import ffn_hidden_dim, swiglu

    if case.kind == KIND_MAP:
        return torch.tensor([ffn_hidden_dim(*row) for row in case.rows], dtype=torch.int64), {}
    return reference_with_grads(
        case, lambda a, p: swiglu(a["x"], p["w_gate.weight"], p["w_up.weight"], p["w_down.weight"])
    )


def _mlp(act, swap=False):
    def run(case: Case):
        if case.kind != KIND_MODULE:
            return None
        x = case.args["x"].float()
        g, u, dn = (case.params[k].float() for k in ("w_gate.weight", "w_up.weight", "w_down.weight"))
        if swap:
            g, u = u, g
        return F.linear(act(F.linear(x, g)) * F.linear(x, u), dn)

    return run


def _silu_of_product(case: Case):
    if case.kind != KIND_MODULE:
        return None
    x = case.args["x"].float()
    g, u, dn = (case.params[k].float() for k in ("w_gate.weight", "w_up.weight", "w_down.weight"))
    return F.linear(F.silu(F.linear(x, g) * F.linear(x, u)), dn)


def _rounding(rule):
    def run(case: Case):
        if case.kind != KIND_MAP:
            return None
        out = []
        for row in case.rows:
            d_model, m = (row[0], MULTIPLE_OF) if len(row) == 1 else row
            out.append(rule(d_model, m))
        return torch.tensor(out, dtype=torch.int64)

    return run


def _up(h, m):
    return m * -(-h // m)


BUGS = (
    Bug(SD["swiglu_gate_up_swapped"], _mlp(F.silu, swap=True), "silu on w_up"),
    Bug(SD["swiglu_wrong_activation"], _mlp(F.relu), "relu"),
    Bug(SD["swiglu_wrong_activation"], _mlp(F.gelu), "gelu"),
    Bug(SD["swiglu_wrong_activation"], _mlp(lambda t: F.gelu(t, approximate="tanh")), "gelu (tanh)"),
    Bug(SD["swiglu_wrong_activation"], _mlp(torch.sigmoid), "sigmoid"),
    Bug(SD["swiglu_silu_of_product"], _silu_of_product, "silu(w_gate(x) * w_up(x))"),
    Bug(SD["ffn_hidden_rounding"], _rounding(lambda d, m: (int(8 * d / 3) // m) * m), "rounded down"),
    Bug(SD["ffn_hidden_rounding"], _rounding(lambda d, m: int(8 * d / 3)), "not rounded"),
    Bug(SD["ffn_hidden_rounding"], _rounding(lambda d, m: int(round(int(8 * d / 3) / m)) * m), "rounded to nearest"),
    Bug(SD["ffn_hidden_rounding"], _rounding(lambda d, m: _up(int(8 * d / 3), MULTIPLE_OF)), "ignores multiple_of"),
    Bug(SD["ffn_hidden_rounding"],
        _rounding(lambda d, m: _up(int(8 * d / 3), m) + (m if int(8 * d / 3) % m == 0 else 0)),
        "always adds a multiple"),
    Bug(SD["ffn_hidden_rounding"], _rounding(lambda d, m: _up(4 * d, m)), "4 * d_model"),
    Bug(SD["ffn_hidden_rounding"], _rounding(lambda d, m: _up(-(-8 * d // 3), m)),
        "ceil(8 * d_model / 3) before rounding up"),
)

# Two mistakes in one file (issue 31): the gate and up weights swapped together with another activation.
SWIGLU_KNOBS: tuple[tuple[str, str, dict], ...] = (
    ("swiglu_gate_up_swapped", "the activation on w_up", {"swap": True}),
    ("swiglu_wrong_activation", "relu", {"act": F.relu}),
    ("swiglu_wrong_activation", "gelu", {"act": F.gelu}),
    ("swiglu_wrong_activation", "gelu (tanh)", {"act": lambda t: F.gelu(t, approximate="tanh")}),
    ("swiglu_wrong_activation", "sigmoid", {"act": torch.sigmoid}),
)
BUGS += knob_pair_bugs(SD, SWIGLU_KNOBS, lambda knobs: _mlp(knobs.get("act", F.silu), knobs.get("swap", False)))

SPEC = Spec(
    name="swiglu",
    graded=("ffn_hidden_dim", "SwiGLU"),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=BUGS,
)
