"""Tensor comparison in the parent: the only place a verdict is made.

The rule for one output tensor, in order:
1. shape must equal the expected shape, dtype must equal the required dtype;
2. wherever the fp32 reference is finite, the output must be finite (NaN/inf
   in a half-precision result is a failure even if "close" elsewhere);
3. where the case fixes a value at exactly 0 (`zeros`, e.g. sampling's
   removed tokens), the output must be exactly 0: no tolerance;
4. on the elements the case cares about (`care`, default all), elementwise
   |got - expected| <= atol * max(1, max|expected|) + rtol * |expected|,
   computed in float64 so the check itself cannot overflow.

Reported errors (information, never a verdict): `max_abs` is the largest
|got - expected| over the compared elements; `max_rel` is that divided by the
largest |expected| over the same elements (a normwise relative error: 1e-3
means "off by 0.1% of the output's scale"). An elementwise ratio would be
dominated by noise on near-zero expected values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import torch

from drill.judge.spec import Tolerance


@dataclass
class Comparison:
    ok: bool
    reason: str  # "" when ok; else "shape" | "dtype" | "nonfinite" | "values"
    message: str
    max_abs: float | None = None
    max_rel: float | None = None
    worst_index: tuple[int, ...] | None = None
    worst_got: float | None = None
    worst_expected: float | None = None
    short: str = ""  # one line for the compact report; falls back to `message`
    # Set only by a case's own judge (spec.Case.judge): the mistake a failing measurement proves.
    diagnosis: Any = None
    nonfinite: int = 0  # NaN/inf elements where finite values were expected (left out of max_abs/max_rel)
    # On a pass, the largest |diff| as a share of the tolerance allowed at that element (0.02: 2% of it);
    # None on a failure, in `quick` mode, and where nothing was compared.
    tol_used: float | None = None
    # Where the worst (or first non-finite) element lies, in the case's own terms ("after step 3, parameter 1
    # ..."), set by a spec's locate (spec.Case.ctx["locate"], adamw); "" shows the index instead.
    where: str = ""

    @property
    def brief(self) -> str:
        return self.short or self.message


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def compare(
    got: torch.Tensor,
    expected: torch.Tensor,
    tol: Tolerance,
    *,
    care: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    ignore: torch.Tensor | None = None,
    zeros: torch.Tensor | None = None,
    what: str = "output",
    quick: bool = False,
) -> Comparison:
    """Compare `got` with `expected` (see the module docstring).

    `ignore` (bool, same shape) removes elements from every check; bug
    matching uses it for elements a variant cannot predict. `zeros` (bool,
    same shape) marks elements that must be exactly 0. `quick`: only
    the verdict (ok, reason) is wanted, a failure gets no message or numbers
    (bug matching compares thousands of tensors per failing file).
    """
    if tuple(got.shape) != tuple(expected.shape):
        return Comparison(False, "shape", f"{what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    if dtype is not None and got.dtype != dtype:
        return Comparison(False, "dtype", f"{what} has dtype {dtype_name(got.dtype)}, expected {dtype_name(dtype)}")
    if got.is_complex() or expected.is_complex():
        return Comparison(False, "dtype", f"{what} is complex")
    g = got.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    if ignore is None and care is None and zeros is None:
        fast = _all_finite_within(g, e, tol, share=not quick)
        if fast is not None:
            return fast
    keep = torch.ones_like(e, dtype=torch.bool) if ignore is None else ~ignore
    exp_finite = torch.isfinite(e)
    bad_finite = exp_finite & ~torch.isfinite(g) & keep
    # Where the expectation itself is NaN/inf (a bug variant), the output must match it exactly.
    nonfinite_mismatch = ~exp_finite & keep & ~(_same_nonfinite(g, e))
    cared = keep & (care if care is not None else torch.ones_like(keep))
    region = cared & exp_finite & torch.isfinite(g)
    abs_err = torch.where(region, (g - e).abs(), torch.zeros_like(e))
    scale = max(1.0, float(e[exp_finite & keep].abs().max()) if bool((exp_finite & keep).any()) else 1.0)
    allowed = tol.atol * scale + tol.rtol * e.abs()
    over = region & (abs_err > allowed)
    if quick:
        if bool(bad_finite.any()) or bool(nonfinite_mismatch.any()):
            return Comparison(False, "nonfinite", "")
        if zeros is not None and bool((zeros & keep & (g != 0)).any()):
            return Comparison(False, "values", "")
        return Comparison(not bool(over.any()), "values" if bool(over.any()) else "", "")
    max_abs = float(abs_err.max()) if abs_err.numel() else 0.0
    ref_scale = float(torch.where(region, e.abs(), torch.zeros_like(e)).max()) if e.numel() else 0.0
    max_rel = max_abs / ref_scale if ref_scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    if bool(bad_finite.any()) or bool(nonfinite_mismatch.any()):
        bad = bad_finite | nonfinite_mismatch
        idx = _first(bad)
        n = int(bad.sum())
        short = (f"{what}: {n} NaN/inf where finite expected" if bool(bad_finite.any())
                 else f"{what}: finite where NaN/inf expected")
        return Comparison(
            False,
            "nonfinite",
            (f"{what} is {float(g):g} where {float(e):g} was expected (a scalar)" if e.dim() == 0 else
             f"{what} has {n} NaN/inf value{'s' if n != 1 else ''} where finite values were expected (first at "
             f"{list(idx)})"
             if bool(bad_finite.any())
             else f"{what} is finite where NaN/inf was expected (first at {list(idx)})"),
            max_abs,
            max_rel,
            idx,
            float(g[idx]),
            float(e[idx]),
            short,
            nonfinite=int(bad_finite.sum()),
        )
    if zeros is not None and bool((stray := zeros & keep & (g != 0)).any()):
        idx = _first(stray)
        n = int(stray.sum())
        return Comparison(
            False, "values",
            f"{what}: {n} of {int((zeros & keep).sum())} values that must be exactly 0 are not; "
            f"first at {list(idx)}: got {float(g[idx]):.6g}",
            max_abs, max_rel, idx, float(g[idx]), 0.0,
            f"{'' if what == 'output' else what + ': '}{n} values not exactly 0; first got {float(g[idx]):.4g}",
        )
    if bool(over.any()):
        excess = torch.where(over, abs_err - allowed, torch.full_like(e, -1.0))
        idx = _unravel(int(excess.argmax()), tuple(e.shape))
        n = int(over.sum())
        # Integer answers (ffn_hidden_dim) read as integers: "got 10752, expected 11008", not 1.075e+04.
        integral = not (got.is_floating_point() or expected.is_floating_point())
        # Floats get the digits that tell the two apart, at least the usual ones: under a tight or exact
        # tolerance (quant_matmul's scales) "got 14666.1, expected 14666.1" would say nothing.
        pair = (float(g), float(e)) if e.dim() == 0 else (float(g[idx]), float(e[idx]))

        def num(x: float, digits: int) -> str:
            if integral:
                return f"{int(x)}"
            n = next((k for k in range(digits, 18) if f"{pair[0]:.{k}g}" != f"{pair[1]:.{k}g}"), digits)
            return f"{x:.{n}g}"
        if e.dim() == 0:  # a scalar (a loss): its value, not "1 of 1 values ... worst at []"
            return Comparison(
                False, "values", f"{what}: got {num(float(g), 6)}, expected {num(float(e), 6)} (a scalar)",
                max_abs, max_rel, idx, float(g), float(e),
                f"{'' if what == 'output' else what + ': '}got {num(float(g), 4)}, expected {num(float(e), 4)}",
            )
        return Comparison(
            False,
            "values",
            f"{what}: {n} of {int(region.sum())} values outside tolerance; worst at {list(idx)}: "
            f"got {num(float(g[idx]), 6)}, expected {num(float(e[idx]), 6)}",
            max_abs,
            max_rel,
            idx,
            float(g[idx]),
            float(e[idx]),
            f"{'' if what == 'output' else what + ': '}{n}/{int(region.sum())} values off; "
            f"worst got {num(float(g[idx]), 4)}, expected {num(float(e[idx]), 4)}",
        )
    return Comparison(True, "", "", max_abs, max_rel, tol_used=_share(abs_err, allowed, region))


def _share(diff: torch.Tensor, allowed: torch.Tensor, region: torch.Tensor | None = None) -> float | None:
    """max(|diff| / allowed) over the compared elements: how much of the tolerance a passing output used."""
    if not diff.numel() or (region is not None and not bool(region.any())):
        return None
    ratio = torch.where(allowed > 0, diff / allowed.clamp_min(torch.finfo(torch.float64).tiny),
                        torch.zeros_like(diff))
    if region is not None:
        ratio = torch.where(region, ratio, torch.zeros_like(ratio))
    return float(ratio.max())


def _all_finite_within(g: torch.Tensor, e: torch.Tensor, tol: Tolerance, *, share: bool = True) -> Comparison | None:
    """The common case in a few ops: every element finite on both sides and within tolerance; None otherwise.

    Bug matching compares thousands of tensors per failing file; this gives
    the same verdict and numbers as the full rule below whenever it applies
    and leaves every failure (and its message) to the full rule.
    """
    if not e.numel() or not (bool(torch.isfinite(e).all()) and bool(torch.isfinite(g).all())):
        return None
    diff = (g - e).abs()
    magnitude = e.abs()
    ref_scale = float(magnitude.max())
    allowed = tol.atol * max(1.0, ref_scale) + tol.rtol * magnitude
    if bool((diff > allowed).any()):
        return None
    max_abs = float(diff.max())
    max_rel = max_abs / ref_scale if ref_scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    return Comparison(True, "", "", max_abs, max_rel, tol_used=_share(diff, allowed) if share else None)


def _same_nonfinite(g: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    both_nan = torch.isnan(g) & torch.isnan(e)
    same_inf = torch.isinf(g) & torch.isinf(e) & (torch.sign(g) == torch.sign(e))
    return both_nan | same_inf


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(mask.reshape(-1).to(torch.uint8).argmax())
    return _unravel(flat, tuple(mask.shape))


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(reversed(idx))


def name_the_call(comparison: Comparison, target: str, rows: list[tuple]) -> Comparison:
    """A failing map case (one call per row, a Python number each) said as the call that is off.

    "cosine_lr(21, 1.0, 0.1, 7, 21): got 0.19821627, expected 0.1" tells the learner what to
    run; "worst at [21]" of an answer tensor they never built does not. The numbers are shown
    to the last digit that tells them apart (schedules differ in the 5th digit, not the 2nd).
    """
    if comparison.ok or comparison.worst_index is None or len(comparison.worst_index) != 1:
        return comparison
    row = rows[comparison.worst_index[0]]
    got, want = comparison.worst_got, comparison.worst_expected
    if got is None or want is None:
        return comparison
    integral = all(float(x).is_integer() for x in (got, want)) and abs(want) < 2**53
    digits = next((n for n in range(4, 18) if f"{got:.{n}g}" != f"{want:.{n}g}"), 17)
    show = (lambda x: f"{int(x)}") if integral else (lambda x: f"{x:.{digits}g}")
    call = f"{target}({', '.join(repr(a) for a in row)})"
    counted = re.search(r"(\d+) of \d+ values|(\d+) NaN/inf", comparison.message)
    n_off = next((g for g in counted.groups() if g), "") if counted else ""
    detail = f"{call}: got {show(got)}, expected {show(want)}"
    detail += f" ({n_off} of {len(rows)} calls off)" if n_off else ""
    return replace(comparison, message=detail, short=detail)


def name_the_list(comparison: Comparison, got: Any, expected: Any) -> Comparison:
    """A failing list-of-ints answer (a call case with extra "returns": "int_list") said as the lists themselves,
    the first position where they differ and whether the lengths differ: "got [1, 3], expected [1, 2, 4]: first
    differs at position 1 (got 3, expected 2); 2 ints instead of 3". An index into a tensor the learner never
    built, or "shape (2,) vs (3,)", says less."""
    if comparison.ok or not isinstance(got, torch.Tensor) or got.dim() != 1:
        return comparison
    a, b = [int(v) for v in got.tolist()], [int(v) for v in expected.tolist()]

    def show(xs: list[int]) -> str:
        return f"[{', '.join(map(str, xs[:12]))}{', ...' if len(xs) > 12 else ''}]"

    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    detail = f"got {show(a)}, expected {show(b)}: "
    if at < min(len(a), len(b)):
        detail += f"first differs at position {at} (got {a[at]}, expected {b[at]})"
    else:
        detail += f"the same up to position {at - 1}" if at else "one of them is empty"
    if len(a) != len(b):
        detail += f"; {len(a)} ints instead of {len(b)}"
    # the bug matching's "simplest failing test" line: "got 3, expected 2 at position 1 of [1, 3] vs [1, 2, 4]"
    # or, with the same prefix, "got 2, expected 3 ints in [1, 2] vs [1, 2, 4]"
    if at < min(len(a), len(b)):
        got_v, want_v, where = a[at], b[at], f"at position {at} of {show(a)} vs {show(b)}"
    else:
        got_v, want_v, where = len(a), len(b), f"ints in {show(a)} vs {show(b)}"
    return replace(comparison, message=detail, short=detail, worst_got=float(got_v), worst_expected=float(want_v),
                   where=where)
