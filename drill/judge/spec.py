"""The data model of a hidden test suite: cases, tolerances, known bugs, specs.

An exercise is described by data, not by code paths in the engine: a `Spec`
says which names are graded, which library ops are forbidden, how to draw
test cases, how to compute the expected answer with the reference model and
which known-bug variants to try when a case fails. Adding an exercise means
writing one module under `drill/judge/specs/` that builds a `Spec`, and adding
its entry to the exercise index (`INDEX` in `drill/judge/registry.py`); the
engine needs no change.

This module imports no torch at import time (the CLI lists exercises without
it); tensors appear only as values inside the dataclasses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# What a case may ask the child to do (see child.py for the executor).
# Times a reference computation (Case.reference_s): this thread's CPU time, which the parent's other threads
# (batch workers, the grading server) and a loaded machine's waits leave out, like the child's per-test CPU.
reference_clock: Callable[[], float] = time.thread_time

KIND_CALL = "call"  # call a graded function: target(*args) -> tensor
KIND_MODULE = "module"  # build target(*init), load params, call it: module(*args) -> tensor
KIND_MAP = "map"  # call target(*row) for every row of `rows`: ints -> int64 tensor


@dataclass(frozen=True)
class Tolerance:
    """|got - expected| <= atol * max(1, max|expected|) + rtol * |expected|, elementwise.

    atol is scaled by the expected tensor's magnitude so that one table works
    for activations of size ~1 and for large-magnitude edge cases alike.
    """

    atol: float
    rtol: float


@dataclass(frozen=True)
class Diagnosis:
    """A named mistake: stable id (binding, see the fixture names), title, why and fix."""

    id: str
    title: str
    why: str
    fix: str


@dataclass(frozen=True)
class Bug:
    """One known-bug variant of the reference.

    `fn(case)` recomputes the case's output the way the buggy code would
    (in the parent, on the same inputs). It returns None when the bug cannot
    show on that case (the variant then counts as equal to the reference), a
    tensor, or (tensor, unknown) where `unknown` is a bool mask of output
    elements whose buggy value depends on details we do not model (e.g. the
    fill value of a row the bug leaves fully masked): those are ignored.
    """

    diagnosis: Diagnosis
    fn: Callable[..., Any]
    label: str = ""
    # A family of mistakes with a free parameter (e.g. "some other scale factor"): fn(case, got)
    # receives the learner's output and returns the family member closest to it. The
    # consistency rule still applies to every case, so a fit can only name a mistake whose
    # every failing case is reproduced exactly by one member of the family.
    fit: bool = False
    # A composed variant, two mistakes at once (e.g. K/V tiled *and* no scale): the id of the second one. It is
    # named like any variant (the first mistake, the one showing on more tests) and the verdict says two are present.
    also: str = ""


@dataclass
class Case:
    """One hidden test. Tensors here are drawn by the parent and sent to the child.

    args are passed positionally in order; for KIND_MODULE, `init` goes to the
    constructor and `params` (attribute path -> tensor) are copied into the
    learner's module before the call. `grad_inputs` names the args whose
    gradients (for `upstream`) are compared; `grad_params` adds the params'.
    `care` (bool, output-shaped, optional): False marks elements whose value
    is free (only finiteness is required), e.g. fully masked attention rows.
    `zeros` (bool, output-shaped, optional): elements the contract fixes at
    exactly 0 (sampling's removed tokens): any other value there fails,
    however small, where a tolerance would let 1e-30 pass.
    `ctx` carries whatever the spec's reference and bug functions need.
    """

    name: str
    target: str
    kind: str = KIND_CALL
    args: dict[str, Any] = field(default_factory=dict)
    init: tuple[Any, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    module_dtype: Any = None
    rows: list[tuple[int, ...]] = field(default_factory=list)
    grad_inputs: tuple[str, ...] = ()
    grad_params: bool = False
    upstream: Any = None
    care: Any = None
    zeros: Any = None
    out_dtype: Any = None
    ctx: dict[str, Any] = field(default_factory=dict)
    # JSON-safe details the child's executor of a non-basic kind needs (e.g. how to split calls):
    extra: dict[str, Any] = field(default_factory=dict)
    # A "repeat call" probe: args (same names, shapes and dtypes as `args`, other values) of a
    # first call made on the same function, or the same module instance, just before the graded
    # call. Its output is not graded: a solution that keeps state between calls (a cache keyed on
    # the shape, not on positions or values) then answers the graded call from the first call's
    # inputs. The diagnosis `state_between_calls` applies when only such probes fail.
    repeat: dict[str, Any] | None = None
    # Parent-side: turn the learner's output into what `expected` describes (a property check,
    # e.g. per-vector norms); compared instead of the raw output. Never sent to the child.
    derive: Callable[[Any], Any] | None = None
    # Module-level names of the learner's file set to these values (JSON scalars) just before
    # this case runs and restored after it (flash_attention's BLOCK_Q / BLOCK_K chosen by the grader).
    module_attrs: dict[str, Any] = field(default_factory=dict)
    # Parent-side: judges the output itself instead of comparing it with `expected` (a measurement,
    # e.g. flash_attention's tiling): returns a compare.Comparison whose `diagnosis` names the
    # mistake when it fails. Judged cases never enter the bug-variant matching. Never sent to the child.
    judge: Callable[[Any], Any] | None = None
    # filled by the engine from the spec's reference:
    expected: Any = None
    expected_grads: dict[str, Any] = field(default_factory=dict)
    # CPU seconds the reference took on this case in the parent, this run (the "slow" advisory's yardstick)
    reference_s: float | None = None

    @property
    def wants_grads(self) -> bool:
        return self.upstream is not None and (bool(self.grad_inputs) or self.grad_params)

    def describe(self) -> str:
        """Shapes/dtypes of the inputs, for --verbose reports."""
        parts = []
        for name, value in self.args.items():
            parts.append(f"{name}={_describe(value)}")
        if self.init:
            parts.insert(0, f"init={self.init}")
        if self.rows:
            parts.append(f"calls={self.rows}")
        if self.module_attrs:
            parts.append(", ".join(f"{k}={v!r}" for k, v in self.module_attrs.items()) + " set by the grader")
        if self.repeat:
            parts.append("after a first call with other inputs of the same shapes")
        return ", ".join(parts)


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        dtype = str(getattr(value, "dtype", "")).replace("torch.", "")
        return f"{dtype}{list(shape)}"
    return repr(value)


@dataclass(frozen=True)
class Spec:
    """Everything the engine needs to grade one exercise.

    make_cases(seed) -> list[Case] draws fresh inputs; reference(case) returns
    (expected_output, {grad_key: expected_grad}) computed with drill.reference
    in fp32; grad keys are "input:<arg>" and "param:<path>". tolerances maps a
    dtype name ("float32", "float16", "bfloat16", "int64", "grad") to a
    Tolerance. exception_bugs maps a substring of an exception message to the
    diagnosis it proves. forbidden are fnmatch patterns of torch function /
    aten op names trapped in the child; forbidden_classes are dotted class
    names whose construction is trapped.
    """

    name: str
    graded: tuple[str, ...]
    make_cases: Callable[[int], list[Case]]
    reference: Callable[[Case], tuple[Any, dict[str, Any]]]
    tolerances: dict[str, Tolerance]
    bugs: Sequence[Bug] = ()
    exception_bugs: Sequence[tuple[str, Diagnosis]] = ()
    forbidden: tuple[str, ...] = ()
    forbidden_classes: tuple[str, ...] = ()
    # The aten ops a from-scratch exercise may use (drill/judge/allowance.py); None: only `forbidden` is trapped.
    allowance: Any = None
    advise: Callable[[list[Case], list[Any]], list[str]] | None = None
    # Module-level names the child reports back (JSON scalars), e.g. rope's CONVENTION;
    # `prepare(cases, attrs)` may then adjust expectations, or return (Diagnosis, detail) to fail.
    report_attrs: tuple[str, ...] = ()
    prepare: Callable[[list[Case], dict[str, Any]], Any] | None = None
    # Advisory audit run in the child after the cases (see drill/judge/audit.py): {"name": ..., config}.
    audit: dict[str, Any] | None = None
    # (argument name, Diagnosis): an optional argument some cases leave out (attention's mask). When every
    # case without it raises and no case with it does, the code does not handle its absence (mask=None).
    absent_arg_bugs: Sequence[tuple[str, Diagnosis]] = ()
    # Why this exercise has no determinism probes (`_common.twice_probes`), or "" (the rule: every exercise
    # has them). triton_rmsnorm: a kernel that leaves columns unwritten returns torch.empty's leftovers,
    # which differ between calls, and a second-call comparison would name that "nondeterministic" instead
    # of the block-size mistake its variants name.
    no_determinism_probes: str = ""
    # Cases drawn from the learner's source as well as the seed (debug_gpt: line 1 says what was planted):
    # source_cases(source, seed, where) replaces make_cases(seed) in a check; may raise UserError.
    source_cases: Callable[[str, int, str], list[Case]] | None = None
    # The diagnosis of a failing run whose cases all ran (debug_gpt: how many planted bugs remain):
    # verdict(evals) -> (Diagnosis, detail), instead of the bug-variant matching.
    verdict: Callable[[list[Any]], tuple[Diagnosis, str]] | None = None


# The forbidden-op sets of exercises/README.md (the exercise contract), shared by the specs that use them.
# Patterns match torch function names (F.scaled_dot_product_attention reaches
# the mode as "scaled_dot_product_attention") and aten op names without the
# "aten." prefix and overload suffix. Measured on torch 2.13 CPU: F.sdpa
# (direct, via torch._C._nn, via torch.ops.aten) reaches the function mode as
# scaled_dot_product_attention and dispatches to
# aten._scaled_dot_product_flash_attention_for_cpu; the math kernel is
# aten._scaled_dot_product_attention_math; F.layer_norm reaches
# aten.native_layer_norm; F.rms_norm decomposes on CPU (no aten op of its own
# reaches the dispatch mode), so only the function-level name catches it.
FORBIDDEN_ATTENTION = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_*",
    "multi_head_attention_forward",
    "_native_multi_head_attention",
    # the fused kernels F.sdpa dispatches to on CUDA, callable directly (torch.nn.attention.varlen) or from
    # TorchScript/C++: blocked themselves, not only through the op above them
    "_flash_attention_*",
    "_efficient_attention_*",
    "_cudnn_attention_*",
    "_triton_scaled_dot_attention",
    "_triton_multi_head_attention",
    "_transformer_encoder_layer_fwd",
    # torch.nn.attention.flex_attention: a higher-order op whose eager path is a whole attention in Python
    # (the child blocks the HOP itself, process-wide)
    "flex_attention",
)
FORBIDDEN_ATTENTION_CLASSES = ("torch.nn.MultiheadAttention",)
FORBIDDEN_NORM = ("rms_norm", "_fused_rms_norm", "layer_norm", "native_layer_norm")
FORBIDDEN_NORM_CLASSES = ("torch.nn.RMSNorm", "torch.nn.LayerNorm")
# layernorm: the norm set plus group norm, which is LayerNorm over one group (measured on torch
# 2.13 CPU: F.group_norm reaches aten.native_group_norm; F.layer_norm, torch.layer_norm and
# nn.LayerNorm all reach aten.native_layer_norm).
FORBIDDEN_LAYER_NORM = (*FORBIDDEN_NORM, "group_norm", "native_group_norm")
FORBIDDEN_LAYER_NORM_CLASSES = (*FORBIDDEN_NORM_CLASSES, "torch.nn.GroupNorm")
# cross_entropy: the loss and every ready-made log-softmax or logsumexp. Measured on torch 2.13
# CPU: F.cross_entropy (and nn.CrossEntropyLoss, torch._C._nn.cross_entropy_loss) reaches the
# function mode as cross_entropy / cross_entropy_loss and dispatches to aten._log_softmax then
# aten.nll_loss_forward (aten.nll_loss2d_forward for a (N, C, d) input); F.nll_loss reaches
# nll_loss_forward; F.log_softmax, Tensor.log_softmax and nn.LogSoftmax reach the mode as
# log_softmax, torch.special.log_softmax as special_log_softmax, all dispatching to
# aten._log_softmax; torch.logsumexp and Tensor.logsumexp reach it as logsumexp,
# torch.special.logsumexp as special_logsumexp, all dispatching to aten.logsumexp (which
# torch.distributions.Categorical uses too).
FORBIDDEN_CROSS_ENTROPY = ("cross_entropy", "cross_entropy_loss", "nll_loss*", "*log_softmax", "*logsumexp")
FORBIDDEN_CROSS_ENTROPY_CLASSES = ("torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss", "torch.nn.LogSoftmax")
# Autograd in every form (rmsnorm_backward): dotted paths, replaced by tripwires in the child
# (child.block_paths), and the aten ops of forward-mode AD. Every reverse-mode path (torch.autograd.grad
# and .backward, Tensor.backward, torch.autograd.functional, torch.func's grad/vjp/jacrev/hessian,
# the functorch package) runs through Variable._execution_engine, blocked too, so a reference taken
# under another name still trips; forward mode (torch.func.jvp/jacfwd, forward_ad) needs
# aten._make_dual / aten._unpack_dual. Measured on torch 2.13 CPU: _make_dual is handled above the
# dispatcher's backend keys, _unpack_dual's kernel trips.
FORBIDDEN_AUTOGRAD = (
    "torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward", "torch.autograd.functional.*",
    "torch.autograd.forward_ad.make_dual", "torch.autograd.forward_ad.unpack_dual",
    "torch.func.grad", "torch.func.grad_and_value", "torch.func.vjp", "torch.func.jvp", "torch.func.jacrev",
    "torch.func.jacfwd", "torch.func.hessian", "torch.func.linearize",
    "torch.autograd.variable.Variable._execution_engine", "_make_dual", "_unpack_dual",
    # the recorded graph itself: calling y.grad_fn(...) and its next_functions is backpropagation by hand-picked
    # nodes (issue 30 §3); reading the attribute trips
    "torch.Tensor.grad_fn", "torch.Tensor._grad_fn",
)
# layernorm_backward: autograd in every form, layernorm's set, and the aten backward kernel itself
# (torch.ops.aten.native_layer_norm_backward is callable from Python).
FORBIDDEN_LAYER_NORM_BACKWARD = (*FORBIDDEN_AUTOGRAD, *FORBIDDEN_LAYER_NORM, "native_layer_norm_backward")
# cross_entropy_backward: autograd, cross_entropy's set (softmax stays allowed), and the aten backward
# kernels of log_softmax and nll_loss (nll_loss* already covers nll_loss_backward and nll_loss2d_backward).
FORBIDDEN_CROSS_ENTROPY_BACKWARD = (*FORBIDDEN_AUTOGRAD, *FORBIDDEN_CROSS_ENTROPY, "_log_softmax_backward_data",
                                    "nll_loss_backward")
