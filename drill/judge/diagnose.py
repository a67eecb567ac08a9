"""Naming the mistake behind a failed check.

Two sources of evidence, both computed in the parent:
- what the child observed (an exception and its message, a forbidden op, a
  limit), mapped to a generic diagnosis or, via the spec's `exception_bugs`,
  to a specific one (e.g. the fp16 fill-overflow message);
- the learner's output tensors, matched against the spec's known-bug
  variants of the reference, recomputed on the same inputs.

A variant is accepted only if it is *consistent* with every case that
returned a tensor (the learner fails a case exactly when the variant fails
it, and where both fail their outputs agree) and explains at least one
failure. One lucky match cannot win, and a passing solution is never
diagnosed because `diagnose` is only called on failures. When nothing fits,
the diagnosis is `unknown` and the worst mismatch is shown instead of a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drill.judge.spec import Bug, Case, Diagnosis, Spec

GENERIC: dict[str, Diagnosis] = {
    d.id: d
    for d in [
        Diagnosis("not_implemented", "Not implemented yet", "The graded code still raises NotImplementedError.",
                  "Replace the `raise NotImplementedError` lines with your implementation."),
        Diagnosis("syntax_error", "Syntax error", "Python could not parse the file, so nothing could run.",
                  "Fix the line shown (run `python FILE` to see the same error)."),
        Diagnosis("missing_name", "Graded name missing", "The file does not define a name (or attribute) the contract requires.",
                  "Define it with exactly the name and attributes given in the starter file."),
        Diagnosis("forbidden_op", "Forbidden library op", "The exercise asks for a from-scratch version, and this call is the library's ready-made answer.",
                  "Replace the call on the line shown with your own tensor operations."),
        Diagnosis("policy_violation", "Not allowed in a solution",
                  "The file uses something a from-scratch solution never needs and the grader does not allow "
                  "(an import outside torch/numpy/einops/math-style helpers, eval/exec/open, getattr with a computed "
                  "name, torch.jit/compile/ops/_C/library/utils, or a dunder/private attribute); nothing was run.",
                  "Rewrite the line shown with plain torch tensor code; put experiments under "
                  "`if __name__ == \"__main__\":`, which is not checked."),
        Diagnosis("time_limit", "Wall-clock limit reached", "The code did not finish in time (an endless loop, a sleep, or something far too slow).",
                  "Look for loops that never end or waits; vectorise Python loops over elements."),
        Diagnosis("cpu_limit", "CPU-time limit reached", "The code used more CPU time than allowed (usually an endless or very slow loop).",
                  "Look for a loop that never ends; vectorise Python loops over elements."),
        Diagnosis("memory_limit", "Memory limit reached", "The code allocated more memory than allowed.",
                  "Avoid materialising huge intermediates; check shapes of what you allocate."),
        Diagnosis("output_limit", "Too much printed output", "The graded code printed (or wrote) more than the grader's 64 MB output cap, so that write failed and the tests it interrupted could not finish.",
                  "Remove print() calls and debug output from the graded code (the graded file should be silent), then check again."),
        Diagnosis("crashed", "The process ended early", "The graded code exited, was killed, or left processes behind instead of returning results.",
                  "Do not call exit()/os._exit or start processes in graded code; return the result instead."),
        Diagnosis("exception", "Your code raised an exception", "An exception escaped the graded code on at least one hidden test.",
                  "Reproduce with the shapes shown (--verbose) and fix the line shown."),
        Diagnosis("wrong_type", "Wrong return type", "The graded code returned something other than what the contract requires.",
                  "Return a torch.Tensor (keep everything in torch; no .tolist(), .numpy() or tuples)."),
        Diagnosis("wrong_shape", "Wrong shape", "An output or parameter has a different shape from the contract's.",
                  "Check the shape the contract gives; print .shape at each step with the --verbose inputs."),
        Diagnosis("wrong_dtype", "Wrong output dtype", "The output's dtype differs from the input's (e.g. fp32 returned for fp16 input).",
                  "Cast the result back with .to(x.dtype) after computing in fp32."),
        Diagnosis("grad_broken", "Gradients do not flow", "The forward result is right, but gradients are missing or wrong (detach, no_grad, NumPy, or in-place edits).",
                  "Keep every step in differentiable torch ops; no .detach(), torch.no_grad() or NumPy round trips."),
        Diagnosis("half_nonfinite", "NaN/inf in half precision", "With fp16/bf16 inputs the result has NaN or inf where the fp32 reference is finite.",
                  "Compute the sensitive steps (sums, exp, fills) in fp32 or with dtype-aware constants, then cast back."),
        # Every unit test passes and only the decoder run disagrees: no bug signature applies, and what
        # breaks a component only once composed is a short, known list (see inmodel_verdict.py).
        Diagnosis(
            "in_model_only",
            "Right alone, wrong inside the model",
            "Every unit test passes, but with your component swapped into the reference decoder the logits or the "
            "generated tokens differ. The decoder calls it many times, on changing shapes (a prompt, then one token "
            "at a time), so what breaks is usually what a single call cannot show.",
            "Look for state kept between calls (a normaliser, shape, position, mask or buffer computed once and reused), "
            "tensors created without the input's dtype or device (torch.ones(n) instead of "
            "torch.ones(n, dtype=x.dtype, device=x.device)), a result not cast back to the input's dtype, and in-place "
            "changes to your inputs; rerun with the same --seed and --verbose.",
        ),
        Diagnosis("state_between_calls", "State kept between calls",
                  "Your code keeps state between calls: a second call with the same shapes but different inputs "
                  "returned a result computed (at least partly) from an earlier call's inputs. Typically a cache "
                  "keyed on the shape (T, d_head, ...) but not on the positions or values it was computed from.",
                  "Make the output a function of this call's arguments only: drop the cache, or key it on everything "
                  "its value depends on (a cache of inv_freq keyed on d_head/base/device is fine; cos/sin depend on "
                  "the positions themselves)."),
        Diagnosis("unknown", "Mismatch with the reference", "The output differs from the reference and matches none of the known mistakes.",
                  "Compare by hand on the worst element shown; rerun with --seed and --verbose."),
    ]
}

HALF_DTYPES = ("float16", "bfloat16")

# `wrong_dtype` worded for the case where every dtype failure is a returned cache (a case whose
# ctx["what"] names a cache, e.g. kv_cache's k/v): the output itself is right, so "cast the
# result back" would send the learner to the wrong line. Same id: the mistake is the same kind.
CACHE_DTYPE = Diagnosis(
    "wrong_dtype",
    "Returned cache has the wrong dtype",
    "The returned K/V cache is not in the input's dtype (e.g. kept in fp32 for fp16/bf16 input), while "
    "every output has the right dtype: a model feeding the cache back would double its memory or mix dtypes.",
    "Keep k_all/v_all in the input dtype: store and return the cache as x.dtype (compute in fp32 "
    "if you like, then cast the cached keys/values back with .to(x.dtype) before returning them).",
)


@dataclass
class CaseEval:
    """Everything the parent knows about one case after the run."""

    case: Case
    status: str  # ok | not_run | exception | not_implemented | forbidden_op | wrong_type | ...
    record: dict[str, Any] = field(default_factory=dict)
    got: Any = None  # output tensor when the child returned one
    forward: Any = None  # Comparison of got vs expected
    grads: dict[str, Any] = field(default_factory=dict)  # key -> Comparison
    grad_error: str | None = None

    @property
    def passed(self) -> bool:
        return (
            self.status == "ok"
            and self.forward is not None
            and self.forward.ok
            and self.grad_error is None
            and all(c.ok for c in self.grads.values())
        )


@dataclass
class Verdict:
    diagnosis: Diagnosis
    detail: str  # the specific evidence: op and line, the exception, the worst mismatch
    partial: bool = False  # the named mistake explains only some failing tests (more than one mistake)


def where(record: dict[str, Any]) -> str:
    line, source = record.get("line"), record.get("source")
    if not line:
        return ""
    return f" (line {line}: {source})" if source else f" (line {line})"


def diagnose_cases(spec: Spec, evals: list[CaseEval], tolerance_of: Any) -> Verdict:
    """Pick the diagnosis for a run whose cases did not all pass."""
    by_status: dict[str, list[CaseEval]] = {}
    for ev in evals:
        by_status.setdefault(ev.status, []).append(ev)

    for status in ("forbidden_op", "not_implemented", "memory_limit", "crashed", "missing_name"):
        if status in by_status:
            ev = by_status[status][0]
            rec = ev.record
            detail = rec.get("message", "")
            if status == "forbidden_op":
                detail = f"{rec.get('op')} called{where(rec)}"
            elif status in ("crashed", "memory_limit"):
                detail = f"{detail} in test '{ev.case.name}'{where(rec)}"
            return Verdict(GENERIC[status], detail)

    # Exception messages that prove a specific bug.
    for ev in by_status.get("exception", []):
        message = ev.record.get("message", "")
        for needle, diagnosis in spec.exception_bugs:
            if needle in message:
                return Verdict(diagnosis, f"{ev.record.get('type')}: {message}{where(ev.record)} in test '{ev.case.name}'")

    state = state_failure(evals)
    if state is not None:
        return state
    tensor_evals = [ev for ev in evals if ev.status == "ok" and ev.forward is not None and ev.forward.reason != "shape"]
    bug = match_bug(spec, tensor_evals, tolerance_of)
    if bug is not None:
        return bug
    probe = probe_failure(evals)
    if probe is not None:
        return probe

    for status, reason in (("wrong_type", None), ("wrong_shape", "shape")):
        if status in by_status:
            ev = by_status[status][0]
            return Verdict(GENERIC[status], ev.record.get("message", ""))
        for ev in evals:
            if reason and ev.forward is not None and ev.forward.reason == reason:
                return Verdict(GENERIC[status], f"{ev.forward.message} in test '{ev.case.name}'")
    wrong_dtype = [ev for ev in evals if ev.forward is not None and ev.forward.reason == "dtype"]
    if wrong_dtype:
        ev = wrong_dtype[0]
        only_cache = all("cache" in str(e.case.ctx.get("what", "")) for e in wrong_dtype)
        diagnosis = CACHE_DTYPE if only_cache else GENERIC["wrong_dtype"]
        return Verdict(diagnosis, f"{ev.forward.message} in test '{ev.case.name}'")

    failing_fw = [ev for ev in evals if ev.forward is not None and not ev.forward.ok]
    if failing_fw and all(
        ev.forward.reason == "nonfinite" and ev.case.ctx.get("dtype") in HALF_DTYPES for ev in failing_fw
    ):
        ev = failing_fw[0]
        return Verdict(GENERIC["half_nonfinite"], f"{ev.forward.message} in test '{ev.case.name}'")

    if "exception" in by_status:
        ev = by_status["exception"][0]
        rec = ev.record
        return Verdict(
            GENERIC["exception"], f"{rec.get('type')}: {rec.get('message')}{where(rec)} in test '{ev.case.name}'"
        )

    if not failing_fw:
        for ev in evals:
            if ev.grad_error is not None:
                return Verdict(GENERIC["grad_broken"], f"{ev.grad_error} in test '{ev.case.name}'")
            bad = [c for c in ev.grads.values() if not c.ok]
            if bad:
                return Verdict(GENERIC["grad_broken"], f"{bad[0].message} in test '{ev.case.name}'")

    if failing_fw:
        ev = max(failing_fw, key=lambda e: e.forward.max_abs or 0.0)
        return Verdict(GENERIC["unknown"], f"{ev.forward.message} in test '{ev.case.name}'")
    for ev in evals:
        if ev.status == "not_run":
            return Verdict(GENERIC["crashed"], f"test '{ev.case.name}' did not run")
    return Verdict(GENERIC["unknown"], "the run failed without a recognisable cause")


def probe_failure(evals: list[CaseEval]) -> Verdict | None:
    """Name the contract clause a run breaks when it fails only on the cases probing that clause.

    Some cases exist to try one legal but unusual input form (a 1-D mask, a
    mask per head) and carry `ctx["probe"]`, the Diagnosis for "your code does
    not accept this form". When every failing test probes the same clause,
    each one raised or returned the wrong shape, and some other test passed,
    the code works on the usual forms and chokes on exactly this one: that is
    the mistake, and saying so beats a bare "exception". A wrong *value* on a
    probe is left to the bug variants and `unknown`: it may be any mistake.
    """
    failing = [ev for ev in evals if not ev.passed]
    if not failing or len(failing) == len(evals):
        return None
    probes = {ev.case.ctx.get("probe") for ev in failing}
    if len(probes) != 1 or None in probes:
        return None
    for ev in failing:
        if ev.status not in ("exception", "wrong_shape") and not (ev.forward is not None and ev.forward.reason == "shape"):
            return None
    ev = failing[0]
    if ev.status == "exception":
        rec = ev.record
        what = f"{rec.get('type')}: {rec.get('message')}{where(rec)}"
    else:
        what = ev.forward.message if ev.forward is not None else ev.record.get("message", "wrong shape")
    n = len(failing)
    return Verdict(
        probes.pop(),
        f"{what} in test '{ev.case.name}'; every other test passes"
        + (f" ({n} tests of this kind fail)" if n > 1 else ""),
    )


def state_failure(evals: list[CaseEval]) -> Verdict | None:
    """`state_between_calls` when the only failures are repeat-call probes with wrong values.

    A probe (`Case.repeat`) is an ordinary input form, already graded fresh by
    other tests, called right after a first call with other inputs of the same
    shapes. If every other test passes and the probes return the right shape
    and dtype but wrong values, the second call was answered from state the
    first call left behind. Checked before the bug variants: those model a
    stateless mistake, and one may happen to reproduce a stale value.
    """
    failing = [ev for ev in evals if not ev.passed]
    if not failing or len(failing) == len(evals):
        return None
    for ev in failing:
        if ev.case.repeat is None or ev.status != "ok" or ev.forward is None or ev.forward.reason not in ("values", "nonfinite"):
            return None
    ev = failing[0]
    n = len(failing)
    return Verdict(
        GENERIC["state_between_calls"],
        f"test '{ev.case.name}' calls your code twice with same-shaped inputs and grades the second call: "
        f"{ev.forward.message}; every test that calls it once passes"
        + (f" ({n} such tests fail)" if n > 1 else ""),
    )


def match_bug(spec: Spec, evals: list[CaseEval], tolerance_of: Any) -> Verdict | None:
    """The known-bug variant consistent with every tensor-returning case, if one is.

    When none is, a variant that reproduces the learner's output exactly on
    some failing tests (while other failing tests differ from it) is still
    named, flagged as a partial match: that part of the code has this mistake,
    and there is at least one more. Never a confident single name then.
    """
    if not evals or all(ev.forward.ok for ev in evals):
        return None
    n_failing = sum(not ev.forward.ok for ev in evals)
    consistent: list[tuple[int, int, Bug]] = []  # (explained, order, bug)
    partial: list[tuple[int, int, Bug]] = []
    for order, bug in enumerate(spec.bugs):
        explained, matched, is_consistent = _score_bug(bug, evals, tolerance_of)
        if is_consistent and explained:
            consistent.append((explained, -order, bug))
        elif matched:
            partial.append((matched, -order, bug))
    if consistent:
        n, _, bug = max(consistent, key=lambda t: t[:2])
        label = f" ({bug.label})" if bug.label else ""
        detail = f"your output matches this mistake{label} on {n} failing test{'s' if n != 1 else ''}"
        others = _other_ids(bug, [b for _, _, b in consistent])
        if others:
            detail += f"; also consistent with: {', '.join(others)}"
        return Verdict(bug.diagnosis, detail)
    if partial:
        n, _, bug = max(partial, key=lambda t: t[:2])
        label = f" ({bug.label})" if bug.label else ""
        rest = n_failing - n
        detail = (
            f"your output matches this mistake{label} exactly on {n} of {n_failing} failing tests, "
            f"but {rest} other failing test{'s differ' if rest != 1 else ' differs'} from it too: "
            "there is probably more than one mistake; fix this one first"
        )
        others = _other_ids(bug, [b for _, _, b in partial])
        if others:
            detail += f" (parts also match: {', '.join(others)})"
        return Verdict(bug.diagnosis, detail, partial=True)
    return None


def _other_ids(best: Bug, bugs: list[Bug]) -> list[str]:
    seen: list[str] = []
    for b in bugs:
        if b.diagnosis.id != best.diagnosis.id and b.diagnosis.id not in seen:
            seen.append(b.diagnosis.id)
    return seen


def _score_bug(bug: Bug, evals: list[CaseEval], tolerance_of: Any) -> tuple[int, int, bool]:
    """(failing cases explained if consistent, failing cases matched exactly, consistent with all cases)."""
    from drill.judge.compare import compare

    explained = matched = 0
    consistent = True
    for ev in evals:
        case = ev.case
        try:
            produced = bug.fn(case, ev.got) if bug.fit else bug.fn(case)
        except Exception:  # noqa: BLE001 - a variant that cannot run on this case says nothing
            produced = None
        tol = tolerance_of(case)
        if produced is None:
            variant, unknown = None, None
        elif isinstance(produced, tuple):
            variant, unknown = produced
        else:
            variant, unknown = produced, None
        # `zeros` only against the reference: a variant's own zeros may be underflow, and the learner's
        # output is compared with it by tolerance (a removed token's 1e-44 matches a variant's 1e-44).
        learner_ok = compare(ev.got, case.expected, tol, care=case.care, ignore=unknown, zeros=case.zeros).ok
        variant_ok = True if variant is None else compare(
            variant, case.expected, tol, care=case.care, ignore=unknown, zeros=case.zeros).ok
        if learner_ok != variant_ok:
            consistent = False
            continue
        if not learner_ok:
            if compare(ev.got, variant, tol, care=case.care, ignore=unknown).ok:
                explained += 1
                matched += _finite_evidence(variant, case, tol, unknown)
            else:
                consistent = False
    return explained, matched, consistent


def _finite_evidence(variant: Any, case: Case, tol: Any, unknown: Any) -> bool:
    """Whether the variant departs from the reference on some finite element.

    A partial match must rest on values, not on NaN alone: an output that is
    NaN everywhere "matches" every variant that is NaN where it is defined.
    """
    import torch

    from drill.judge.compare import compare

    nonfinite = ~torch.isfinite(variant.detach().to(torch.float64))
    ignore = nonfinite if unknown is None else (nonfinite | unknown)
    return not compare(variant, case.expected, tol, care=case.care, ignore=ignore, zeros=case.zeros).ok
