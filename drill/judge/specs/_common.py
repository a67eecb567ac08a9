"""Helpers every spec uses: drawing inputs, tolerances, reference gradients.

Tolerances (the grader's contract with the learner; compared against the fp32
reference computed from the very same, already-rounded inputs):

| dtype    | atol  | rtol  | why                                                        |
|----------|-------|-------|------------------------------------------------------------|
| float32  | 2e-5  | 1e-4  | different op orders (einsum vs matmul, loops) differ ~1e-6 |
| float16  | 1e-2  | 1e-2  | 10-bit mantissa (eps 9.8e-4), a few roundings per element  |
| bfloat16 | 6e-2  | 4e-2  | 7-bit mantissa (eps 7.8e-3)                                |
| grad     | 1e-4  | 1e-3  | fp32 backward sums over many more terms than the forward   |
| int64    | 0     | 0     | integer answers (ffn_hidden_dim) are exact                 |
| float32_large_logits | 5e-4 | 1e-3 | fp32 cases with logits ~1e3 (see below)          |

Cases with logits of order 1e3 exist only to catch exp() overflow (NaN/inf);
there the fp32 reference itself is ill-conditioned: its rounding of the logits
(~1e3 x 6e-8) moves near-tied softmax weights, and a float64 solution differs
from it by up to 7.7e-5 x max|expected| (measured over 300 seeds of gqa's
case, 3e-5 for attention's). `float32_large_logits` leaves ~6x headroom;
every known bug moves these outputs by far more, or to NaN.

atol is multiplied by max(1, max|expected|) (see compare.py), so the same
table works for outputs of any magnitude. Every known bug the specs test for
moves the output by far more than these bounds on the cases built to reveal it.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from drill.judge.spec import KIND_CALL, KIND_MODULE, Bug, Case, Diagnosis, Tolerance

TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(atol=2e-5, rtol=1e-4),
    "float16": Tolerance(atol=1e-2, rtol=1e-2),
    "bfloat16": Tolerance(atol=6e-2, rtol=4e-2),
    "grad": Tolerance(atol=1e-4, rtol=1e-3),
    "int64": Tolerance(atol=0.0, rtol=0.0),
    "float32_large_logits": Tolerance(atol=5e-4, rtol=1e-3),
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# The dtype sweep every exercise with float inputs runs (fp32 first: gradients are graded there),
# its half-precision part, and how case names spell each dtype.
DTYPE_SWEEP = ("float32", "float16", "bfloat16")
HALF_DTYPES = ("float16", "bfloat16")
DTYPE_LABEL = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


class Draw:
    """Seeded source of shapes (Python RNG) and tensors (torch Generator)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: list[Any]) -> Any:
        return self.rng.choice(options)

    def normal(self, *shape: int, dtype: str = "float32", scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        t = torch.randn(shape, generator=self.gen) * scale + shift  # shape () gives a 0-dim tensor
        return t.to(DTYPES[dtype])

    def bools(self, *shape: int, p: float = 0.6) -> torch.Tensor:
        return torch.rand(*shape, generator=self.gen) < p

    def weight(self, out_features: int, in_features: int, dtype: str = "float32") -> torch.Tensor:
        """An nn.Linear-like weight (std 1/sqrt(in)), so activations stay of order 1."""
        return self.normal(out_features, in_features, dtype=dtype, scale=in_features**-0.5)


class _Device(threading.local):
    name = "cpu"


_DEVICE = _Device()


class reference_device:
    """Compute `reference_with_grads` expectations on `device` ("cpu" or "cuda") inside this block, this thread.

    `drill check --device cuda` grades against the reference run on the GPU, i.e. its fused CUDA kernels
    (SDPA flash / memory-efficient / cuDNN, F.rms_norm); inputs are drawn on the CPU (seeded) and copied
    there, results come back to the CPU for the comparison. TF32 is switched off for CUDA matmuls (it is
    off by default; a TF32 reference would be off by ~1e-3 in fp32). Thread-local: `drill check DIR` grades
    several files at once.
    """

    def __init__(self, device: str) -> None:
        self.device = device

    def __enter__(self) -> str:
        self.before = _DEVICE.name
        if self.device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        _DEVICE.name = self.device
        return self.device

    def __exit__(self, *exc: object) -> None:
        _DEVICE.name = self.before


def reference_on() -> str:
    """The device `reference_with_grads` computes on in this thread ("cpu" unless in a `reference_device`)."""
    return _DEVICE.name


def reference_with_grads(
    case: Case, forward: Callable[..., torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Run `forward(**inputs, **params)` in fp32 and, if the case wants them, backprop `upstream`.

    Inputs (case.args) and params are upcast to fp32 copies, on the `reference_device` (the CPU unless a
    check grades on CUDA); grads come back keyed "input:<name>" / "param:<path>" as the child names them.
    Everything returned is on the CPU.
    """
    dev = _DEVICE.name
    place = (lambda t: t) if dev == "cpu" else (lambda t: t.to(dev))
    home = (lambda t: t) if dev == "cpu" else (lambda t: t.cpu())
    wants = case.wants_grads
    args = {}
    for name, value in case.args.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            value = place(value.detach().float()).clone().requires_grad_(wants and name in case.grad_inputs)
        elif isinstance(value, torch.Tensor):
            value = place(value)
        args[name] = value
    params = {
        path: place(t.detach().float()).clone().requires_grad_(wants and case.grad_params)
        for path, t in case.params.items()
    }
    out = forward(args, params)
    grads: dict[str, torch.Tensor] = {}
    if wants:
        # sum(out * upstream) has exactly the gradient `upstream`; unlike
        # out.backward(upstream) it does not import torch.fx's symbolic_shapes
        # (0.5 s measured on torch 2.13), which matters for `drill check` start-up.
        (out * place(case.upstream.float())).sum().backward()
        for name in case.grad_inputs:
            grads["input:" + name] = home(args[name].grad.detach().clone())
        if case.grad_params:
            for path, t in params.items():  # a parameter the output does not depend on has gradient zero
                grads["param:" + path] = home(t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t))
    return home(out.detach()), grads


class one_thread:
    """Run tiny tensor work on one intra-op thread, restoring the count after.

    Some CPU kernels (measured on a loaded 2-core machine: index_add 0.1 s
    per call instead of 10 us, tril and softmax on 8x8 inputs 13 ms) hand
    even tiny inputs to the OpenMP pool, whose threads then wait for a busy
    core; every tensor the grader's parent builds is tiny. The count is a
    process-wide setting and `drill check DIR` grades on several threads at
    once, so nested and concurrent uses share one count: the first to enter
    saves it, the last to leave restores it.
    """

    _lock = threading.Lock()
    _depth = 0
    _saved = 1

    def __enter__(self) -> None:
        with one_thread._lock:
            if one_thread._depth == 0:
                one_thread._saved = torch.get_num_threads()
            torch.set_num_threads(1)  # also in this thread, should the count be kept per OS thread
            one_thread._depth += 1

    def __exit__(self, *exc: object) -> None:
        with one_thread._lock:
            one_thread._depth -= 1
            if one_thread._depth == 0:
                torch.set_num_threads(one_thread._saved)
# Positional exercises (rope, sinusoidal): correct fp32-angle solutions differ from each other by about
# 1e-7 x position (the fp32 spacing of the angle), so the atol of a case grows with its largest position,
# in power-of-two buckets: "<dtype>@<bucket>" entries of the spec's tolerance table.
POSITION_BUCKETS = tuple(2**k for k in range(10, 18))  # 1024 .. 131072
ANGLE_ERROR_PER_POSITION = 3e-7  # measured spread of correct fp32-angle solutions, ~1e-7 x position, with headroom


def position_bucket(max_position: int) -> int:
    """The smallest bucket holding `max_position` (the last one beyond it)."""
    return next((b for b in POSITION_BUCKETS if max_position <= b), POSITION_BUCKETS[-1])


def position_tol(dtype: str, max_position: int) -> str:
    """The tolerance key (`Case.ctx["tol"]`) of a `dtype` case whose positions reach `max_position`."""
    return f"{dtype}@{position_bucket(int(max_position))}"


def position_tolerances(per_position: float) -> dict[str, Tolerance]:
    """The shared table plus "<dtype>@<bucket>" entries whose atol grows by `per_position` x the bucket."""
    table = dict(TOLERANCES)
    for dtype in DTYPE_SWEEP:
        base = TOLERANCES[dtype]
        for b in POSITION_BUCKETS:
            table[f"{dtype}@{b}"] = Tolerance(atol=base.atol + per_position * b, rtol=base.rtol)
    return table


def tolerance_for(case: Case) -> Tolerance:
    return TOLERANCES[case.ctx.get("dtype", "float32")]


def repeat_probe(case: Case, first: dict[str, Any], *, vary: tuple[str, ...] = ()) -> Case:
    """Make `case` a repeat-call probe: `first` is called before it on the same function/module.

    `first` holds the same argument names, shapes and dtypes as `case.args`
    and other values (scalars such as rope's base stay equal): code that
    caches anything keyed on shapes alone answers the graded call from the
    first call's inputs. The child makes that first call twice (a cache used only from the third call of a
    shape on is caught too) and grades the third; see
    `diagnose.state_failure` for the verdict when only these probes fail.
    `vary` names scalar args that may differ too, for functions of sizes
    alone (alibi: a bias built for the prompt's length, then sliced for a
    decode step).
    """
    for name, value in case.args.items():
        other = first.get(name)
        if isinstance(value, torch.Tensor):
            assert isinstance(other, torch.Tensor) and other.shape == value.shape and other.dtype == value.dtype, name
            assert not torch.equal(other, value) or name == "mask", name
        else:
            assert other == value or name in vary, name
    case.repeat = {name: first[name] for name in case.args}  # the child passes them in the graded call's order
    # Values only: a backward through the graded call could also reach the first call's graph (the loss specs
    # build theirs with gradients to logp; their other cases grade those).
    case.upstream, case.grad_inputs, case.grad_params = None, (), False
    if vary:
        case.ctx["repeat_vary"] = tuple(vary)
    return case


# ---------------------------------------------------------------- building blocks for specs
#
# Each block draws at most one thing (the upstream gradient, last), so a spec that switches to
# one keeps its cases' drawing order, hence the same cases for a seed.


def diagnoses(*items: Diagnosis) -> dict[str, Diagnosis]:
    """A spec's diagnosis table, id -> Diagnosis; two with one id are a mistake in the spec."""
    table: dict[str, Diagnosis] = {}
    for item in items:
        assert item.id not in table, f"diagnosis id {item.id} defined twice"
        table[item.id] = item
    return table


def module_dtype(dtype: str) -> Any:
    """What `Case.module_dtype` holds for a case of `dtype`: the grader casts the module for half only."""
    return DTYPES[dtype] if dtype != "float32" else None


def module_case(
    d: Draw, name: str, target: str, args: dict[str, Any], *, init: tuple[Any, ...], params: dict[str, Any],
    dtype: str = "float32", grads: bool = False, grad_inputs: tuple[str, ...] = ("x",),
    out_shape: Sequence[int] | None = None, care: Any = None, ctx: dict[str, Any] | None = None,
) -> Case:
    """A KIND_MODULE case: `target(*init)` loaded with `params`, called on `args` (already drawn).

    With `grads`, the gradients of `grad_inputs` and of every param are graded
    against an upstream gradient of `out_shape` (default: the first arg's
    shape), drawn here, after everything the caller drew.
    """
    shape = tuple(out_shape) if out_shape is not None else tuple(next(iter(args.values())).shape)
    return Case(
        name=name, target=target, kind=KIND_MODULE, args=args, init=init, params=params,
        module_dtype=module_dtype(dtype), grad_inputs=grad_inputs if grads else (), grad_params=grads,
        upstream=d.normal(*shape) if grads else None, care=care, out_dtype=DTYPES[dtype],
        ctx={"dtype": dtype, **(ctx or {})},
    )


def call_case(
    d: Draw, name: str, target: str, args: dict[str, Any], *, dtype: str = "float32", grads: tuple[str, ...] = (),
    out_shape: Sequence[int] | None = None, out_dtype: Any = None, care: Any = None, ctx: dict[str, Any] | None = None,
    module_attrs: dict[str, Any] | None = None,
) -> Case:
    """A KIND_CALL case: `target(*args)` (args already drawn); `grads` names the args whose gradients are graded.

    The upstream gradient (of `out_shape`, default the first arg's shape; `()`
    for a scalar loss) is drawn here, last. `out_dtype` defaults to `dtype`'s.
    `module_attrs`: module-level names the grader sets for this call (spec.Case.module_attrs).
    """
    shape = tuple(out_shape) if out_shape is not None else tuple(next(iter(args.values())).shape)
    return Case(
        name=name, target=target, kind=KIND_CALL, args=args, grad_inputs=tuple(grads),
        upstream=d.normal(*shape) if grads else None, care=care, module_attrs=dict(module_attrs or {}),
        out_dtype=out_dtype if out_dtype is not None else DTYPES[dtype], ctx={"dtype": dtype, **(ctx or {})},
    )


def sweep(build: Callable[[str], Case], dtypes: Iterable[str] = DTYPE_SWEEP) -> list[Case]:
    """One case per dtype, built (and drawn) in the order given: `build(dtype)` names and draws its case."""
    return [build(dtype) for dtype in dtypes]


def repeat_after(d: Draw, case: Case, first: dict[str, Any] | None = None, *, scale: float = 1.0,
                 shift: float = 0.5) -> Case:
    """`case` made a repeat-call probe whose first call gets fresh values (drawn here, after the case).

    Every floating-point tensor arg the caller does not give in `first` is
    redrawn with its shape and dtype (scaled and shifted, so a cached
    statistic of the first call differs); any other arg must be given in
    `first` or is reused as it is (scalars, sizes). For specs whose probe is
    drawn before its case, call `repeat_probe` directly.
    """
    given = dict(first or {})
    for name, value in case.args.items():
        if name in given:
            continue
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            dtype = next(k for k, v in DTYPES.items() if v == value.dtype)
            given[name] = d.normal(*value.shape, dtype=dtype, scale=scale, shift=shift)
        else:
            given[name] = value
    return repeat_probe(case, given)


def variant_bugs(
    table: dict[str, Diagnosis], variants: Iterable[tuple[str, str, Callable[..., Any]]],
    wrap: Callable[[Callable[..., Any]], Callable[[Case], Any]] = lambda fn: fn, only: Iterable[str] | None = None,
) -> tuple[Bug, ...]:
    """Bugs from a (diagnosis id, label, variant fn) list; `wrap` turns a variant into `fn(case)`.

    `only` keeps the ids that apply to this exercise (e.g. gqa's subset of the
    attention mistakes), in the list's order.
    """
    keep = None if only is None else set(only)
    return tuple(Bug(table[i], wrap(fn), label) for i, label, fn in variants if keep is None or i in keep)


def knob_pair_bugs(
    table: dict[str, Diagnosis], knobs: Sequence[tuple[str, str, dict[str, Any]]],
    make: Callable[[dict[str, Any]], Callable[[Case], Any]],
) -> tuple[Bug, ...]:
    """A composed variant (`Bug.also`, issue 31) for every two knobs that set different arguments.

    `knobs`: (diagnosis id, label, the keyword arguments that make the mistake) in the order they are named
    when two are present; `make(arguments)` -> the variant `fn(case)` with both mistakes. List the result after
    the single variants: where one of the two changes nothing on a failing test, the pair ties with the single
    variant there and the tie goes to the single one, so one mistake is never called two.
    """
    return tuple(Bug(table[first], make({**a, **b}), f"{first_label}, and {second_label}", also=second)
                 for i, (first, first_label, a) in enumerate(knobs)
                 for second, second_label, b in knobs[i + 1:]
                 if not set(a) & set(b))  # two values of one argument cannot both be in one file


class Distinct:
    """Draws that do not repeat across one spec's cases (shapes, sizes): code caching on them then collides
    only in the repeat-call probe, which names it `state_between_calls`, and not in some other case.

    `pick(draw)` calls `draw()` until it returns a value not seen before (at most `tries` times; then the
    last one, repeated: a draw space too small to avoid it is the spec's choice).
    """

    def __init__(self, tries: int = 50) -> None:
        self.seen: set = set()
        self.tries = tries

    def pick(self, draw: Callable[[], Any]) -> Any:
        for _ in range(self.tries):
            value = draw()
            if value not in self.seen:
                break
        self.seen.add(value)
        return value


def causal_mask(t_q: int, t_k: int | None = None) -> torch.Tensor:
    """(t_q, t_k) bool, True = may attend, bottom-right aligned: query i sits at position t_k - t_q + i.

    With t_q == t_k it is the usual lower triangle; with t_q > t_k the first
    t_q - t_k queries see no key (FlashAttention-2 and `causal_lower_right`'s
    alignment; `F.scaled_dot_product_attention(is_causal=True)` is top-left).
    """
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)


def measured_calls(cases: list[Case], audit: str, keep: Callable[[Case], bool]) -> list[Case]:
    """Mark the module cases `keep` picks to be measured by `audit` during their graded call; returns `cases`.

    Why graded calls (issue 30 §2): an audit that makes calls of its own, under no_grad or on a module it
    builds, can be told apart from grading (`torch.is_grad_enabled()`), and a file then grouped, tiled or
    routed only while measured. Measuring the graded calls themselves leaves nothing to tell apart, and
    their values are graded like any other case's."""
    for case in cases:
        if case.kind == "module" and keep(case):
            case.extra = {**case.extra, "measure": audit}
    return cases


def interleaved(cases: list[Case], measured: list[Case], seed: int) -> list[Case]:
    """`measured` placed among `cases` at positions drawn from `seed` (their own order kept; the draws of
    `cases` are untouched): measurement cases always last could be recognised by counting calls."""
    rng = random.Random(seed * 7919 + 17)
    out = list(cases)
    slots = sorted(rng.randint(0, len(cases)) for _ in measured)
    for offset, (slot, case) in enumerate(zip(slots, measured, strict=True)):
        out.insert(slot + offset, case)
    return out


def twice_probes(cases: list[Case], n: int = 3) -> list[Case]:
    """Mark the first `n` plain fp32 cases as determinism probes; returns `cases` (draws nothing).

    The child then calls the same function or module instance a second time
    on fresh copies of the same inputs, after the graded call and its
    backward, and the parent compares the two outputs
    (`diagnose.nondeterministic_failure`): dropout left active, or any random
    op, is named directly instead of showing as wrong values everywhere.
    Several cases, because a dropout mask over a few dozen elements can
    happen to drop nothing (p = 0.1 over 16 elements: 19% of draws).
    Only cases graded on their raw output (no repeat call, no derived
    property) qualify; a second call costs one more forward of a tiny input.
    """
    marked = 0
    for case in cases:
        if marked == n:
            break
        if (case.ctx.get("dtype") == "float32" and case.repeat is None and case.derive is None
                and case.kind in ("call", "module")):
            case.extra = {**case.extra, "twice": True}
            marked += 1
    return cases
