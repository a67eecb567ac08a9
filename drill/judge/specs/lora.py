"""Hidden tests for `lora`: LoRALinear(base: nn.Linear, r, alpha) with `forward` and `merged()`.

Every case is one scenario run by the "adapter" executor (drill/judge/adapter.py): the grader builds the base
nn.Linear (fp32 or bf16, with or without a bias, in != out and in == out), the learner's layer wraps it, and
the case grades one thing. What each is built to reveal:
- forward with lora_A and lora_B set by the grader (so the init's random numbers do not matter), leading dims
  1 to 3, r from 1 to 16 and alpha never equal to r: alpha instead of alpha / r, rsLoRA's alpha / sqrt(r),
  dropout applied to the output (torch's global generator is seeded before each call, so the mask is
  reproduced by the variant);
- gradients to x, lora_A and lora_B, one case each; the parameter count and whether base.weight and base.bias
  receive a gradient (a base left trainable);
- merged()(x), and the layer's own output after merged() was called: a transposed product (in == out only:
  otherwise it cannot be added), the scale left out, BA added into the base in place;
- the init, judged in the parent on a 4096-wide layer: lora_B exactly 0, lora_A inside +-1/sqrt(in_features)
  with that uniform's law (a Kolmogorov-Smirnov test on its r * 4096 values).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from drill.judge import adapter
from drill.judge.compare import Comparison
from drill.judge.spec import Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import DTYPE_LABEL, TOLERANCES, Draw, diagnoses
from drill.reference.lora import LoRALinear as Reference

TARGET = "LoRALinear"
KIND = adapter.KIND
RETURNS = ("forward", "grad_x", "grad_A", "grad_B", "frozen", "merged", "after_merge")
WHAT = {"forward": "forward", "grad_x": "gradient of x", "grad_A": "gradient of lora_A",
        "grad_B": "gradient of lora_B", "frozen": "[trainable count, base.weight.grad set, base.bias.grad set, "
        "A in base dtype, B in base dtype]", "merged": "merged()(x)", "after_merge": "forward after merged()"}
INIT_IN, INIT_R, INIT_OUT = 4096, 8, 24
# Kolmogorov-Smirnov: P(D > c / sqrt(n)) ~ 2 exp(-2 c^2) for a right law; c = 2.5 fails a right file 1 time in 1e5.
KS_C = 2.5

LD = diagnoses(
    Diagnosis("lora_both_zero", "lora_A and lora_B both initialised to zero",
              "With A = 0 and B = 0 the gradient of B is (upstream)^T (x A^T) = 0 and the gradient of A is "
              "B^T (...) = 0: neither factor ever moves, so fine-tuning trains nothing.",
              "Initialise lora_A like nn.Linear's weight (nn.init.kaiming_uniform_(A, a=math.sqrt(5))) and only "
              "lora_B to zeros."),
    Diagnosis("lora_a_zero_b_random", "lora_A zero and lora_B random (the init swapped)",
              "PEFT's default starts B at zero and A random, so the layer starts as the base and B's gradient "
              "(upstream^T x A^T) is nonzero. A zero A with a random B also starts as the base, but then only A "
              "learns at first, and the contract fixes which factor is zero: B.",
              "lora_A: kaiming_uniform_(a=math.sqrt(5)); lora_B: zeros."),
    Diagnosis("lora_b_init_nonzero", "lora_B not initialised to zero",
              "lora_B starts at exactly zero so that the wrapped layer computes the base model's function before "
              "the first step; a random B changes the model's output the moment the adapter is attached.",
              "nn.init.zeros_(self.lora_B) (or torch.zeros for its values)."),
    Diagnosis("lora_a_init_scale", "lora_A drawn from the wrong law",
              "lora_A is initialised as nn.Linear initialises its weight: kaiming_uniform_ with a = sqrt(5), which "
              "is U(-1/sqrt(in_features), 1/sqrt(in_features)). randn (std 1), or another bound, gives values "
              "outside that range or another spread, and the effective learning rate of the adapter changes.",
              "nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5)) on the (r, in_features) tensor."),
    Diagnosis("lora_scaling_alpha", "Low-rank path scaled by alpha instead of alpha / r",
              "The update is (alpha / r) * B A x: dividing by r keeps its size stable when r changes, so one alpha "
              "works across ranks. Scaling by alpha alone is r times too large.",
              "self.scaling = alpha / r; out = base(x) + self.scaling * (x @ A.T) @ B.T."),
    Diagnosis("lora_rslora", "rsLoRA's alpha / sqrt(r) scaling",
              "alpha / sqrt(r) is rank-stabilised LoRA (PEFT's use_rslora=True). The contract is the default, "
              "use_rslora=False: alpha / r.",
              "self.scaling = alpha / r."),
    Diagnosis("lora_base_trainable", "The base layer left trainable",
              "LoRA trains only A and B, r * (in + out) numbers; the wrapped nn.Linear must be frozen "
              "(requires_grad False on its weight and bias), otherwise the optimizer updates all in * out weights "
              "and the adapter saves nothing.",
              "for p in base.parameters(): p.requires_grad_(False)   (or base.requires_grad_(False))."),
    Diagnosis("lora_merge_transposed", "merged() adds the transposed product",
              "nn.Linear's weight is (out, in) and B A is (out, r) @ (r, in) = (out, in). A.T @ B.T (or (B @ A).T) "
              "is its transpose: it only fits when in == out, and then merges the wrong matrix.",
              "weight = base.weight + (alpha / r) * (lora_B @ lora_A)."),
    Diagnosis("lora_merge_no_scaling", "merged() leaves out alpha / r",
              "forward scales B A x by alpha / r, so the merged weight must add (alpha / r) * B @ A; without it "
              "merged()(x) differs from the layer it replaces.",
              "weight = base.weight + self.scaling * (lora_B @ lora_A)."),
    Diagnosis("lora_merge_in_place", "merged() adds B A into the base's own weight",
              "merged() must leave the layer unmodified: writing into self.base.weight makes the layer count the "
              "update twice afterwards (the base now holds it and forward adds it again).",
              "Build a new nn.Linear and give it base.weight + scaling * B @ A; never write into self.base."),
    Diagnosis("lora_dropout_on_output", "Dropout applied to the output",
              "The contract is PEFT's lora_dropout=0; a dropout on the layer's output (or on the low-rank path's "
              "output) zeroes random outputs in training mode, and PEFT's own dropout acts on x before lora_A, "
              "never on what the layer returns.",
              "Drop the dropout: out = base(x) + scaling * (x @ A.T) @ B.T."),
)


# ---------------------------------------------------------------- the mistakes, as layers the executor runs

class _Variant(Reference):
    """The reference with knobs: `scale` ("r", "alpha", "sqrt"), `freeze` ("all", "none", "bias"),
    `merge` ("right", "transposed", "no_scaling", "in_place"), `dropout` (p, on "out" or "branch")."""

    scale, freeze, merge, dropout, on = "r", "all", "right", 0.0, "out"

    def __init__(self, base: nn.Linear, r: int, alpha: float) -> None:
        super().__init__(base, r, alpha)
        self.scaling = {"r": self.alpha / self.r, "alpha": self.alpha, "sqrt": self.alpha / math.sqrt(self.r)}[
            self.scale]
        if self.freeze != "all":
            base.weight.requires_grad_(True)
            if base.bias is not None and self.freeze == "none":
                base.bias.requires_grad_(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.dropout:
            return super().forward(x)
        w = self.base.weight.float()
        b = None if self.base.bias is None else self.base.bias.float()
        xf = x.float()
        base = nn.functional.linear(xf, w, b).to(x.dtype)
        branch = (self.scaling * ((xf @ self.lora_A.float().T) @ self.lora_B.float().T)).to(x.dtype)
        if self.on == "out":
            return nn.functional.dropout(base + branch, self.dropout, True)
        return base + nn.functional.dropout(branch, self.dropout, True)

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        if self.merge == "right":
            return super().merged()
        ba = self.lora_B.float() @ self.lora_A.float()
        delta = {"transposed": self.scaling * ba.T, "no_scaling": ba, "in_place": self.scaling * ba}[self.merge]
        if self.merge == "in_place":
            self.base.weight.add_(delta.to(self.base.weight.dtype))
            return self.base
        out = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None,
                        dtype=self.base.weight.dtype)
        out.weight.copy_((self.base.weight.float() + delta).to(self.base.weight.dtype))
        if self.base.bias is not None:
            out.bias.copy_(self.base.bias)
        return out


def run(cls, case: Case) -> torch.Tensor:
    """The scenario run on a layer class in the parent, leaving the parent's own global generator as it was."""
    with torch.random.fork_rng(devices=[]):
        return adapter.run_scenario(cls, case.extra, case.args, first=case.repeat)


def variant(**knobs):
    cls = type("LoRAVariant", (_Variant,), knobs)

    def simulate(case: Case):
        if case.judge is not None:
            return None
        try:
            return run(cls, case)
        except RuntimeError:  # a transposed merge with in != out cannot be added: the learner's raises too
            return None

    return simulate


DROPOUT_PS = (0.1, 0.05, 0.2, 0.3, 0.5)

LORA_VARIANTS = [
    ("lora_scaling_alpha", "scaled by alpha", variant(scale="alpha")),
    ("lora_rslora", "scaled by alpha / sqrt(r)", variant(scale="sqrt")),
    ("lora_base_trainable", "base weight and bias left trainable", variant(freeze="none")),
    ("lora_base_trainable", "base weight left trainable", variant(freeze="bias")),
    ("lora_merge_transposed", "merged weight + (B @ A).T", variant(merge="transposed")),
    ("lora_merge_no_scaling", "merged weight + B @ A", variant(merge="no_scaling")),
    ("lora_merge_in_place", "B A added into base.weight", variant(merge="in_place")),
    *(("lora_dropout_on_output", f"dropout p={p} on the output", variant(dropout=p, on="out")) for p in DROPOUT_PS),
    *(("lora_dropout_on_output", f"dropout p={p} on the low-rank path's output", variant(dropout=p, on="branch"))
      for p in DROPOUT_PS),
]


# ---------------------------------------------------------------- the cases

def _scenario(d: Draw, name: str, *, dtype: str, bias: bool, n_in: int, n_out: int, r: int, alpha: float,
              lead: tuple[int, ...]) -> list[Case]:
    half = DTYPE_LABEL[dtype]
    w = (torch.rand(n_out, n_in, generator=d.gen) * 2 - 1) / math.sqrt(n_in)
    b = (torch.rand(n_out, generator=d.gen) * 2 - 1) / math.sqrt(n_in)
    a = d.normal(r, n_in, scale=1 / math.sqrt(n_in))
    bb = d.normal(n_out, r, scale=0.5)
    x = d.normal(*lead, n_in)
    up = d.normal(*lead, n_out)
    dt = getattr(torch, dtype)
    args = {"w": w.to(dt), "A": a.to(dt), "B": bb.to(dt), "x": x.to(dt), "up": up.to(dt)}
    if bias:
        args["b"] = b.to(dt)
    extra = {"in": n_in, "out": n_out, "bias": bias, "dtype": dtype, "r": r, "alpha": alpha,
             "seed": d.int(0, 2**31 - 1)}
    label = (f"{name}: {half} base {n_out}x{n_in}{' + bias' if bias else ', no bias'}, r={r}, alpha={alpha:g}, "
             f"x {tuple(x.shape)}")
    cases = []
    for returns in RETURNS:
        grad = returns.startswith("grad_")
        if returns == "frozen":
            tol, out_dtype = "int64", torch.int64
        elif grad:
            tol, out_dtype = ("grad" if dtype == "float32" else dtype), torch.float32
        else:
            tol, out_dtype = dtype, dt
        cases.append(Case(name=f"{label}: {WHAT[returns]}", target=TARGET, kind=KIND, args=dict(args),
                          extra={**extra, "returns": returns}, out_dtype=out_dtype,
                          ctx={"dtype": dtype, "tol": tol, "returns": returns}))
    return cases


def _alpha(d: Draw, r: int) -> float:
    """An alpha whose alpha / r differs from alpha and alpha / sqrt(r) whenever r > 1."""
    return float(d.choice([a for a in (4, 8, 16, 32) if a != r]))


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    r = d.int(2, 8)
    cases += _scenario(d, "in != out", dtype="float32", bias=True, n_in=d.int(12, 24), n_out=d.int(26, 40), r=r,
                       alpha=_alpha(d, r), lead=(d.int(2, 3), d.int(3, 6)))
    n = d.int(10, 20)
    r = d.int(2, 6)
    cases += _scenario(d, "in == out", dtype="float32", bias=False, n_in=n, n_out=n, r=r, alpha=_alpha(d, r),
                       lead=(d.int(3, 7),))
    n = d.int(16, 32)
    cases += _scenario(d, "in == out, r=16", dtype="float32", bias=True, n_in=n, n_out=n, r=16, alpha=32.0,
                       lead=(2, d.int(2, 3), d.int(2, 4)))
    cases += _scenario(d, "r=1", dtype="float32", bias=True, n_in=d.int(8, 16), n_out=d.int(17, 30), r=1,
                       alpha=float(d.choice([2, 4])), lead=(d.int(2, 5),))
    n = d.int(16, 32)
    r = d.int(2, 8)
    cases += _scenario(d, "in == out", dtype="bfloat16", bias=True, n_in=n, n_out=n, r=r, alpha=_alpha(d, r),
                       lead=(2, d.int(3, 5)))
    r = d.int(2, 8)
    cases += _scenario(d, "in != out", dtype="bfloat16", bias=False, n_in=d.int(20, 40), n_out=d.int(8, 18), r=r,
                       alpha=_alpha(d, r), lead=(d.int(3, 6),))
    # Drawn after the others, so their inputs are unchanged for a seed: the same layer called on another x just
    # before the graded forward (a layer that caches its low-rank product, or x, answers from the first call).
    n = d.int(10, 20)
    r = d.int(2, 6)
    probe = _scenario(d, "repeat call: forward twice on one layer", dtype="float32", bias=True, n_in=n,
                      n_out=d.int(21, 30), r=r, alpha=_alpha(d, r), lead=(d.int(2, 5),))[0]
    probe.repeat = {**probe.args, "x": d.normal(*probe.args["x"].shape)}
    return cases + [probe, _init_case(d)]


# ---------------------------------------------------------------- the init, judged in the parent

def _init_case(d: Draw) -> Case:
    w = (torch.rand(INIT_OUT, INIT_IN, generator=d.gen) * 2 - 1) / math.sqrt(INIT_IN)
    extra = {"in": INIT_IN, "out": INIT_OUT, "bias": False, "dtype": "float32", "r": INIT_R, "alpha": 16.0,
             "seed": d.int(0, 2**31 - 1), "returns": "init"}
    case = Case(name=f"init: lora_A and lora_B of a fresh {INIT_OUT}x{INIT_IN} layer, r={INIT_R}", target=TARGET,
                kind=KIND, args={"w": w}, extra=extra, out_dtype=torch.float32,
                ctx={"dtype": "float32", "returns": "init"})
    case.judge = judge_init
    return case


def ks_statistic(values: torch.Tensor, bound: float) -> float:
    """Kolmogorov-Smirnov distance between the values' empirical law and U(-bound, bound)."""
    v = values.double().sort().values
    n = v.numel()
    cdf = ((v + bound) / (2 * bound)).clamp(0.0, 1.0)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(i / n - cdf, cdf - (i - 1) / n).max())


def _fail(message: str, short: str, diagnosis: Diagnosis) -> Comparison:
    return Comparison(False, "measurement", message, short=short, diagnosis=diagnosis)


def judge_init(got: torch.Tensor) -> Comparison:
    n_a = INIT_R * INIT_IN
    if got.numel() != n_a + INIT_OUT * INIT_R:
        return _fail(f"expected {n_a + INIT_OUT * INIT_R} values of lora_A and lora_B, got {got.numel()}",
                     "init: wrong number of values", LD["lora_a_init_scale"])
    a, b = got[:n_a].double(), got[n_a:].double()
    a_zero, b_zero = bool((a == 0).all()), bool((b == 0).all())
    if a_zero and b_zero:
        return _fail("lora_A and lora_B are both all zeros after __init__: no gradient ever reaches either",
                     "init: A and B both zero", LD["lora_both_zero"])
    if a_zero:
        return _fail(f"lora_A is all zeros and lora_B is not (max |B| = {float(b.abs().max()):.3g})",
                     "init: A zero, B random", LD["lora_a_zero_b_random"])
    if not b_zero:
        return _fail(f"lora_B holds {int((b != 0).sum())} nonzero values after __init__ (max |B| = "
                     f"{float(b.abs().max()):.3g}); it must be exactly 0", "init: B not zero",
                     LD["lora_b_init_nonzero"])
    bound = 1 / math.sqrt(INIT_IN)
    top = float(a.abs().max())
    var, want_var = float(a.var()), bound ** 2 / 3
    law = (f"max |A| = {top:.4g}, var(A) = {var:.4g}; U(-1/sqrt(in), 1/sqrt(in)) has bound {bound:.4g}, "
           f"var {want_var:.4g}")
    if top > bound * (1 + 1e-6):
        return _fail(f"lora_A has values outside +-1/sqrt(in_features) = +-{bound:.4g}: {law}",
                     "init: A outside +-1/sqrt(in)", LD["lora_a_init_scale"])
    dist = ks_statistic(a, bound)
    crit = KS_C / math.sqrt(a.numel())
    if dist > crit:
        return _fail(f"lora_A is not uniform on +-1/sqrt(in_features): Kolmogorov-Smirnov distance {dist:.4g} > "
                     f"{crit:.4g} over {a.numel()} values; {law}", "init: A not U(+-1/sqrt(in))",
                     LD["lora_a_init_scale"])
    return Comparison(True, "", "")


def reference(case: Case):
    if case.judge is not None:
        return None, {}
    return run(Reference, case), {}


SPEC = Spec(
    name="lora",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=tuple(Bug(LD[i], fn, label) for i, label, fn in LORA_VARIANTS),
    no_determinism_probes="each case seeds torch's global generator just before the call, so two calls with the "
                          "same seed agree even with dropout left on; a dropout on the output is named by its own "
                          "variants (lora_dropout_on_output), which replay the seeded mask.",
)
