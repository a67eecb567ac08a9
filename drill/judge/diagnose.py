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
the diagnosis is `unknown` and the simplest failing case is shown instead of
a guess. The rules every verdict follows (no name from a small minority, two
known mistakes both named, nothing counted twice, the simplest case shown)
are listed in drill/judge/README.md, "The rules every diagnosis follows".
"""

from __future__ import annotations

from collections.abc import Iterable
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
        Diagnosis("empty_file", "The file is empty", "There is no code in it (nothing but blank lines, comments or a "
                  "docstring), so no hidden test could run.",
                  "Write your solution in this file, or copy the exercise's starter file (`drill start EXERCISE DIR`; "
                  "--force replaces a file)."),
        Diagnosis("missing_name", "Graded name missing",
                  "The file does not define a name (or attribute) the contract requires.",
                  "Define it with exactly the name and attributes given in the starter file."),
        Diagnosis("forbidden_op", "Forbidden library op",
                  "The exercise asks for a from-scratch version, and this call is the library's ready-made answer.",
                  "Replace the call on the line shown with your own tensor operations."),
        Diagnosis("policy_violation", "Not allowed in a solution",
                  "The file uses something a from-scratch solution never needs and the grader does not allow "
                  "(an import outside torch/numpy/einops/math-style helpers, eval/exec/open, getattr with a computed "
                  "name, torch.jit/compile/ops/_C/library/utils, or a dunder/private attribute); nothing was run.",
                  "Rewrite the line shown with plain torch tensor code; put experiments under "
                  "`if __name__ == \"__main__\":`, which is not checked."),
        Diagnosis("time_limit", "Wall-clock limit reached",
                  "The code did not finish in time (an endless loop, a sleep, or something far too slow).",
                  "Look for loops that never end or waits; vectorise Python loops over elements."),
        Diagnosis("cpu_limit", "CPU-time limit reached",
                  "The code used more CPU time than allowed (usually an endless or very slow loop).",
                  "Look for a loop that never ends; vectorise Python loops over elements."),
        Diagnosis("memory_limit", "Memory limit reached", "The code allocated more memory than allowed.",
                  "Avoid materialising huge intermediates; check shapes of what you allocate."),
        Diagnosis("output_limit", "Too much printed output",
                  "The graded code printed (or wrote) more than the grader's 64 MB output cap, so that write failed "
                  "and the tests it interrupted could not finish.",
                  "Remove print() calls and debug output from the graded code (the graded file should be silent), then "
                  "check again."),
        Diagnosis("crashed", "The process ended early",
                  "The graded code exited, was killed, or left processes behind instead of returning results.",
                  "Do not call exit()/os._exit or start processes in graded code; return the result instead."),
        Diagnosis("exception", "Your code raised an exception",
                  "An exception escaped the graded code on at least one hidden test.",
                  "Reproduce with the shapes shown (--verbose) and fix the line shown."),
        Diagnosis("wrong_type", "Wrong return type",
                  "The graded code returned something other than what the contract requires.",
                  "Return a torch.Tensor (keep everything in torch; no .tolist(), .numpy() or tuples)."),
        Diagnosis("wrong_shape", "Wrong shape", "An output or parameter has a different shape from the contract's.",
                  "Check the shape the contract gives; print .shape at each step with the --verbose inputs."),
        Diagnosis("wrong_dtype", "Wrong output dtype",
                  "The output's dtype differs from the input's (e.g. fp32 returned for fp16 input).",
                  "Cast the result back with .to(x.dtype) after computing in fp32."),
        Diagnosis("grad_broken", "Gradients do not flow",
                  "The forward result is right, but gradients are missing or wrong (detach, no_grad, NumPy, or "
                  "in-place edits).",
                  "Keep every step in differentiable torch ops; no .detach(), torch.no_grad() or NumPy round trips."),
        Diagnosis("half_nonfinite", "NaN/inf in half precision",
                  "With fp16/bf16 inputs the result has NaN or inf where the fp32 reference is finite.",
                  "Compute the sensitive steps (sums, exp, fills) in fp32 or with dtype-aware constants, then cast "
                  "back."),
        # Every unit test passes and only the decoder run disagrees: no bug signature applies, and what
        # breaks a component only once composed is a short, known list (see inmodel_verdict.py).
        Diagnosis(
            "in_model_only",
            "Right alone, wrong inside the model",
            "Every unit test passes, but with your component swapped into the reference decoder the logits or the "
            "generated tokens differ. The decoder calls it many times, on changing shapes (a prompt, then one token "
            "at a time), so what breaks is usually what a single call cannot show.",
            "Look for state kept between calls (a normaliser, shape, position, mask or buffer computed once and "
            "reused), tensors created without the input's dtype or device (torch.ones(n) instead of "
            "torch.ones(n, dtype=x.dtype, device=x.device)), a result not cast back to the input's dtype, and in-place "
            "changes to your inputs; rerun with the same --seed and --verbose.",
        ),
        Diagnosis("state_between_calls", "State kept between calls",
                  "Your code keeps state between calls: a later call with the same shapes but different inputs "
                  "returned a result computed (at least partly) from an earlier call's inputs. Typically a cache "
                  "keyed on the shape (T, d_head, ...) but not on the positions or values it was computed from.",
                  "Make the output a function of this call's arguments only: drop the cache, or key it on everything "
                  "its value depends on (a cache of inv_freq keyed on d_head/base/device is fine; cos/sin depend on "
                  "the positions themselves)."),
        # Two identical calls disagree (spec._common.twice_probe): checked before every value-based signature,
        # since a random output can match no variant and explains every failing test at once.
        Diagnosis("nondeterministic", "Two identical calls disagree",
                  "Called twice on identical inputs (the same function, or the same module instance in training mode, "
                  "as the grader calls it), your code returned different outputs. Something random runs in the graded "
                  "code: dropout left active (nn.Dropout with p > 0, F.dropout, whose training flag defaults to True), "
                  "torch.rand/randn/bernoulli, or state that changes on every call. A random output cannot be compared "
                  "with the reference, so every test it touches fails.",
                  "Remove dropout from the graded code (or build it with p = 0): the contract's modules hold no "
                  "dropout. Draw no random numbers in forward and keep no state that changes from call to call."),
        Diagnosis("unknown", "Mismatch with the reference",
                  "The output differs from the reference and matches none of the known mistakes.",
                  "Compare by hand on the worst element shown; rerun with --seed and --verbose."),
    ]
}

HALF_DTYPES = ("float16", "bfloat16")

# `exception` worded for an exception raised while the file is imported (its top-level code): no hidden
# test ran at all, so "on at least one hidden test" would send the learner looking for a failing test.
IMPORT_EXCEPTION = Diagnosis(
    "exception",
    "Your file raised an exception when imported",
    "The file's top-level code (run when the grader imports it, before any hidden test) raised, so none of "
    "the hidden tests could run.",
    "Run `python FILE` to see the same error and fix the line shown; keep experiments and test calls under "
    "`if __name__ == \"__main__\":`, which the grader does not run.",
)

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


# `wrong_type` worded for a graded call that must return a tuple (moe's (out, aux); the child's
# `tuple_element` says "instead of a tuple" or "in the tuple"): the generic fix ("no tuples") would contradict it.
TUPLE_TYPE = Diagnosis(
    "wrong_type",
    "Wrong return type: the contract returns a tuple",
    "The graded call must return a tuple of tensors (the contract lists its elements, e.g. (out, aux)); yours "
    "returned something else, or an element that is not a tensor.",
    "Return exactly the tuple the contract gives, each element a torch.Tensor: return out, aux.",
)


# `wrong_type` worded for an "exact" case (exact.py: plain Python answers such as bpe's merges): the generic fix
# ("return a torch.Tensor") would contradict the contract there.
EXACT_TYPE = Diagnosis(
    "wrong_type",
    "Wrong return type: not the contract's Python types",
    "The graded call must return the plain Python values the contract gives (bytes, int, str, lists, tuples, "
    "dicts of those); yours returned another type at the place the detail names.",
    "Return exactly the types of the contract's signature: e.g. bytes, not str, for tokens and merges.",
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
    again: Any = None  # a determinism probe's second output (same inputs), when the case asked for one

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
    explained: int = 0  # how many failing tests the named mistake explains (0: not counted)
    cases: list[CaseEval] = field(default_factory=list)  # the failing tests it explains, where known
    second: str = ""  # a second known mistake named in the detail (two mistakes in one file)
    weak: bool = False  # a partial match too small to head the verdict: `hint` is added to the `unknown` one
    hint: str = ""


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

    random = nondeterministic_failure(evals, tolerance_of)
    if random is not None:
        return random

    # Shape failures enter the matching too, but count only for a variant that predicts a shape (see _score_bug);
    # a case that judges a measurement itself (Case.judge) never does.
    tensor_evals = [ev for ev in evals if ev.status == "ok" and ev.forward is not None and ev.case.judge is None]
    # Exception messages that prove a specific bug.
    for ev in by_status.get("exception", []):
        message = ev.record.get("message", "")
        for needle, diagnosis in spec.exception_bugs:
            if needle in message:
                proved = Verdict(diagnosis,
                                 f"{ev.record.get('type')}: {message}{where(ev.record)} in test '{ev.case.name}'")
                return _with_second_in_values(proved, spec, tensor_evals, tolerance_of)

    absent = absent_arg_failure(spec, evals)
    state = state_failure(evals) if absent is None else None
    if state is not None:
        return state
    bug = match_bug(spec, tensor_evals, tolerance_of)
    hint = ""
    if bug is not None and bug.weak:  # too small a partial match to head the verdict: listed under `unknown`
        hint, bug = bug.hint, None
    verdict = _from_values(evals, by_status, bug, absent)
    if hint and (verdict is absent or verdict.diagnosis.id == "unknown"):
        verdict.detail += f"; {hint}"
    return verdict


def _with_second_in_values(proved: Verdict, spec: Spec, tensor_evals: list[CaseEval], tolerance_of: Any) -> Verdict:
    """An exception that proves one mistake, and the tests that returned a value wrong: a second known mistake
    matched there is named too (cross_entropy: indexing with -100 raises, smoothing over V - 1 shows in values).
    Only a match that explains failing tests of its own counts, never a weak one."""
    if not any(not ev.forward.ok for ev in tensor_evals):
        return proved
    other = match_bug(spec, tensor_evals, tolerance_of)
    if other is None or other.weak or other.diagnosis.id == proved.diagnosis.id or not other.explained:
        return proved
    n = other.explained
    proved.detail += (f"; there is more than one mistake: {other.diagnosis.title} ({other.diagnosis.id}) "
                      f"shows on {n} other failing test{'s' if n != 1 else ''}")
    proved.partial, proved.second = True, other.diagnosis.id
    return proved


def _from_values(evals: list[CaseEval], by_status: dict[str, list[CaseEval]], bug: Verdict | None,
                 absent: Verdict | None) -> Verdict:
    """The verdict once the bug variants have spoken: named mistakes, measurements, probes, then the generic ones."""
    judged = judged_failure(evals, bug.cases if bug is not None else [])
    if bug is not None and judged is not None:  # values first: the measurement of wrong code matters less; listed
        bug.detail += f"; also failing: {judged.diagnosis.id} ({judged.detail})"
    if bug is not None and absent is not None:  # two mistakes: name the one explaining more failing tests
        first, second = (bug, absent) if bug.explained >= absent.explained else (absent, bug)
        n = second.explained
        first.detail += (f"; there is more than one mistake: {second.diagnosis.title} ({second.diagnosis.id}) "
                         f"shows on {n} other failing test{'s' if n != 1 else ''}")
        first.partial, first.second = True, second.diagnosis.id
        return first
    if bug is not None or absent is not None:
        return bug or absent
    if judged is not None:
        return judged
    probe = probe_failure(evals)
    if probe is not None:
        return probe

    for status, reason in (("wrong_type", None), ("wrong_shape", "shape")):
        if status in by_status:
            ev = by_status[status][0]
            message = ev.record.get("message", "")
            tuple_wanted = status == "wrong_type" and ("instead of a tuple" in str(message)
                                                       or "in the tuple" in str(message))
            if status == "wrong_type" and ev.case.kind in ("exact", "beam"):  # plain Python answers (beam.py too)
                return Verdict(EXACT_TYPE, message)
            return Verdict(TUPLE_TYPE if tuple_wanted else GENERIC[status], message)
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

    if failing_fw:  # the smallest failing case, the one a learner can redo by hand, not the largest error
        ev = min(failing_fw, key=simplicity)
        n = len(failing_fw)
        more = f" (the simplest of {n} failing tests)" if n > 1 else ""
        return Verdict(GENERIC["unknown"], f"{ev.forward.message} in test '{ev.case.name}'{more}")
    for ev in evals:
        if ev.status == "not_run":
            return Verdict(GENERIC["crashed"], f"test '{ev.case.name}' did not run")
    return Verdict(GENERIC["unknown"], "the run failed without a recognisable cause")


def again_check(forward: Any, got: Any, again: Any, tol: Any, care: Any = None) -> Any:
    """The case's Comparison, failed when a determinism probe's second output differs from the first.

    `again` is the output of the same call made a second time on fresh copies
    of the same inputs (spec._common.twice_probe). A passing first output is
    not enough: the contract says two identical calls give identical outputs,
    and an output that changes from call to call matches the reference only
    by luck (a dropout mask that happened to drop nothing on this test).
    """
    from drill.judge.compare import Comparison

    if again is None or not forward.ok:
        return forward
    same = _again_comparison(got, again, tol, care)
    if same.ok:
        return forward
    return Comparison(False, "values", f"a second call with identical inputs returned other values: {same.message}",
                      short="a second call with identical inputs returned other values")


def _again_comparison(got: Any, again: Any, tol: Any, care: Any) -> Any:
    from drill.judge.compare import compare

    return compare(again, got, tol, care=care, dtype=got.dtype, what="second call")


def nondeterministic_failure(evals: list[CaseEval], tolerance_of: Any) -> Verdict | None:
    """`nondeterministic` when a test called the code twice on identical inputs and the outputs differ.

    Direct evidence, cheaper and surer than any variant: dropout left active
    (or any random op) changes every output, so no bug signature can match,
    while the cases it happens to spare say nothing. Checked before the
    value-based diagnoses for that reason.
    """
    for ev in evals:
        if ev.again is None or ev.got is None:
            continue
        same = _again_comparison(ev.got, ev.again, tolerance_of(ev.case), ev.case.care)
        if not same.ok:
            failing = sum(not e.passed for e in evals)
            return Verdict(
                GENERIC["nondeterministic"],
                f"test '{ev.case.name}' calls your code twice on identical inputs and the outputs disagree: "
                f"{same.message} (expected = the first call's output); "
                f"{failing} test{'s' if failing != 1 else ''} fail",
                explained=failing,
            )
    return None


def absent_arg_failure(spec: Spec, evals: list[CaseEval]) -> Verdict | None:
    """The spec's diagnosis for an optional argument whose absence the code does not handle (mask=None).

    Some cases leave an optional argument out (attention's and mha's mask).
    When every one of them raised and no case passing the argument did, the
    exception comes from the missing argument itself (`~None`, `None == 0`
    handed to masked_fill, `mask.dim()` on None): that is the mistake, and
    saying so beats a bare "exception" or a name for what the other tests show.
    """
    for arg, diagnosis in spec.absent_arg_bugs:
        without = [ev for ev in evals if arg not in ev.case.args]
        given = [ev for ev in evals if arg in ev.case.args]
        if not without or not given:
            continue
        if all(ev.status == "exception" for ev in without) and not any(ev.status == "exception" for ev in given):
            ev, n = without[0], len(without)
            rec = ev.record
            first_line = (str(rec.get("message") or "").splitlines() or [""])[0]  # TypeError lists every overload
            return Verdict(
                diagnosis,
                f"{rec.get('type')}: {first_line}{where(rec)} in test '{ev.case.name}'; every test without a "
                f"{arg} raises ({n} test{'s' if n != 1 else ''}), no test with one does",
                explained=n,
            )
    return None


def judged_failure(evals: list[CaseEval], explained: Iterable[CaseEval] = ()) -> Verdict | None:
    """The mistake a case's own judge named (spec.Case.judge: a measurement, e.g. flash_attention's tiling).

    Named after the bug variants (right values come first) and before the
    generic shape/dtype/unknown verdicts, which a measurement never is. The
    first failing judged case in order names it; other judged ids and failing
    tests of other kinds are listed, and with the latter the name is partial.
    `explained`: value failures a named variant already explains (left out of
    "N other failing tests match no known mistake").
    """
    failing = [ev for ev in evals if not ev.passed]
    values_fail = any(ev.case.judge is None for ev in failing)
    # A measured call's wrong answer (tiling.MEASURED_VALUES) says something only where the value tests pass.
    judged = [ev for ev in failing if ev.case.judge is not None and ev.forward is not None and not ev.forward.ok
              and ev.forward.diagnosis is not None and not (values_fail and ev.forward.reason == "measured_values")]
    if not judged:
        return None
    first = judged[0]
    detail = f"{first.forward.message} in test '{first.case.name}'"
    others = []
    for ev in judged[1:]:
        if ev.forward.diagnosis.id != first.forward.diagnosis.id and ev.forward.diagnosis.id not in others:
            others.append(ev.forward.diagnosis.id)
    if others:
        detail += f"; other measurements fail too: {', '.join(others)}"
    known = {id(ev) for ev in explained}  # value failures a named mistake already explains are not counted again
    rest = [ev for ev in failing if ev.case.judge is None and id(ev) not in known]
    if rest:
        detail += (f"; {len(rest)} other failing test{'s' if len(rest) != 1 else ''} (values) match no known mistake: "
                   "there is probably more than one mistake")
    return Verdict(first.forward.diagnosis, detail, partial=bool(rest), explained=len(judged))


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
        shape_mismatch = ev.forward is not None and ev.forward.reason == "shape"
        if ev.status not in ("exception", "wrong_shape") and not shape_mismatch:
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
        if (ev.case.repeat is None or ev.status != "ok" or ev.forward is None
                or ev.forward.reason not in ("values", "nonfinite")):
            return None
    ev = failing[0]
    n = len(failing)
    return Verdict(
        GENERIC["state_between_calls"],
        f"test '{ev.case.name}' calls your code twice with other same-shaped inputs, then grades a third call: "
        f"{ev.forward.message}; every test that calls it once passes"
        + (f" ({n} such tests fail)" if n > 1 else ""),
    )


# A partial match heads the verdict only when the mistakes it names (the best one, and a second known one on the
# tests the first leaves) reproduce at least this share of the failing tests. Below it a coincidence is as likely
# as a mistake (decoder_block's 1/sqrt(d_model) equals "divided by d_k" on the 1 test of 8 where d_head = 4), and
# a name would send the learner to the wrong line: the verdict is `unknown`, the partial match listed in its detail.
# One in six keeps a real partial match of two mistakes (layernorm's missing bias on 2 of 11 failing tests).
MINORITY = 1 / 6


def match_bug(spec: Spec, evals: list[CaseEval], tolerance_of: Any) -> Verdict | None:
    """The known-bug variant consistent with every tensor-returning case, if one is.

    When none is, a variant that reproduces the learner's output exactly on
    some failing tests (while other failing tests differ from it) is still
    named, flagged as a partial match: that part of the code has this mistake,
    and there is at least one more. Never a confident single name then. A
    partial match that explains only a small minority of the failing tests
    (below MINORITY, with a second known mistake's share added) is not
    named: the verdict is then a `weak` one (see `Verdict.hint`), whose detail
    `diagnose_cases` adds to its `unknown`.
    """
    if not evals or all(ev.forward.ok for ev in evals):
        return None
    failing = [ev for ev in evals if not ev.forward.ok]
    n_failing = len(failing)
    # Failing cases first: a variant that is not the learner's mistake almost always differs from the
    # learner's output on the first of them, and is dropped after one evaluation instead of len(evals).
    order = failing + [ev for ev in evals if ev.forward.ok]
    learner_ok: dict[int, bool] = {}  # per case, without an ignore mask: the same for every variant
    scores = [_Score() for _ in spec.bugs]
    for score, bug in zip(scores, spec.bugs, strict=True):
        _advance(bug, order, score, tolerance_of, learner_ok, to_end=False)
    consistent = [(s.explained, -i, bug, s) for i, (s, bug) in enumerate(zip(scores, spec.bugs, strict=True))
                  if s.consistent and s.explained]
    if consistent:
        n, _, bug, score = max(consistent, key=lambda t: t[:2])
        n, bug, score = _fuller(n, bug, score, consistent)
        label = f" ({bug.label})" if bug.label else ""
        detail = f"your output matches this mistake{label} on {n} failing test{'s' if n != 1 else ''}"
        if bug.also:  # a composed variant: both mistakes are in the code, and both are named
            other = _title_of(spec, bug.also)
            detail = (f"your output matches this mistake and {bug.also} together{label} on {n} failing "
                      f"test{'s' if n != 1 else ''}: there is more than one mistake, the other being "
                      f"{other} ({bug.also}); fix this one first")
        detail += example(score.explains)
        others = _other_ids(bug, [b for _, _, b, _ in consistent])
        if others:
            detail += f"; also consistent with: {', '.join(others)}"
        return Verdict(bug.diagnosis, detail, partial=bool(bug.also), explained=n, cases=list(score.explains),
                       second=bug.also)
    # No variant explains everything: the partial counts need every case of the variants dropped early.
    for score, bug in zip(scores, spec.bugs, strict=True):
        _advance(bug, order, score, tolerance_of, learner_ok, to_end=True)
    partial = [(s.matched, -i, bug, s) for i, (s, bug) in enumerate(zip(scores, spec.bugs, strict=True))
               if s.matched]
    if not partial:
        return None
    n, _, bug, score = max(partial, key=lambda t: t[:2])
    label = f" ({bug.label})" if bug.label else ""
    seen = {id(ev) for ev in score.hits}
    second = _second_mistake(bug, partial, seen)
    m = second[0] if second is not None else 0
    others = _other_counts(bug, [(count, j, b) for count, j, b, _ in partial])
    also = f" (parts also match: {', '.join(others)})" if others else ""
    if n + m < MINORITY * n_failing:  # a coincidence as likely as a mistake: named only in the detail
        hint = (f"closest known mistake: {bug.diagnosis.title} ({bug.diagnosis.id}"
                f"{', ' + bug.label if bug.label else ''}) reproduces only {n} of {n_failing} failing tests, "
                f"too few to name it{also}")
        return Verdict(GENERIC["unknown"], "", weak=True, hint=hint)
    if second is not None:
        other = second[1]
        other_label = f", {other.label}" if other.label else ""
        detail = (f"your output matches this mistake{label} exactly on {n} of {n_failing} failing tests, and "
                  f"another known mistake, {other.diagnosis.title} ({other.diagnosis.id}{other_label}), on "
                  f"{m} other{'s' if m != 1 else ''}: there is more than one mistake; fix this one first")
        if n + m < n_failing:
            rest = n_failing - n - m
            detail += f"; {rest} failing test{'s match' if rest != 1 else ' matches'} neither"
        return Verdict(bug.diagnosis, detail + example(score.hits), partial=True, explained=n,
                       cases=list(score.hits), second=other.diagnosis.id)
    if n == n_failing:  # every failing test is this mistake; the variant only overshoots on some passing ones
        # Still partial: on another seed one failing test may differ too, and the flag must not flip with the seed.
        k = score.spurious
        detail = (f"your output matches this mistake{label} exactly on all {n} failing tests, but as modelled it "
                  f"would also fail {k} test{'s' if k != 1 else ''} your code passes: yours is a milder form of it, "
                  "or there is more than one mistake; fix this one first")
        return Verdict(bug.diagnosis, detail + example(score.hits), partial=True, explained=n, cases=list(score.hits))
    rest = n_failing - n
    detail = (
        f"your output matches this mistake{label} exactly on {n} of {n_failing} failing tests, "
        f"but {rest} other failing test{'s differ' if rest != 1 else ' differs'} from it too: "
        "there is probably more than one mistake; fix this one first"
    )
    return Verdict(bug.diagnosis, detail + also + example(score.hits), partial=True, explained=n,
                   cases=list(score.hits))


def _fuller(n: int, bug: Bug, score: _Score, consistent: list[tuple[int, int, Bug, _Score]]) -> tuple[int, Bug, _Score]:
    """A composed variant holding `bug`'s mistake that explains as many tests while leaving fewer elements unknown.

    A single variant leaves unknown what depends on code it does not model (the rows a mask blocks depend on the
    learner's fill); a composed one that models it, and still matches, has found the second mistake there
    (attention divided by d_k with NaN rows kept). Where the second mistake changes nothing, both hide the same
    elements and the single variant keeps the tie, so one mistake is never called two.
    """
    ids = {bug.diagnosis.id}
    fuller = [(s.hidden, -i, b, s) for m, i, b, s in consistent
              if m == n and b.also and ids & {b.diagnosis.id, b.also} and s.hidden < score.hidden]
    if not fuller:
        return n, bug, score
    _, _, b, s = min(fuller, key=lambda t: (t[0], -t[1]))
    return n, b, s


def _title_of(spec: Spec, diagnosis_id: str) -> str:
    """The title of a diagnosis the spec's variants name (a composed variant's second mistake), else the id."""
    return next((b.diagnosis.title for b in spec.bugs if b.diagnosis.id == diagnosis_id), diagnosis_id)


def _second_mistake(best: Bug, scored: list[tuple[int, int, Bug, _Score]], seen: set[int]) -> tuple[int, Bug] | None:
    """The other known mistake (another id) reproducing the most failing tests `best` leaves, with that count:
    two known mistakes in one file are both named. A tie goes to the earlier variant, as for `best`."""
    found: tuple[int, int, Bug] | None = None
    for _, order, b, s in scored:
        if b.diagnosis.id == best.diagnosis.id:
            continue
        m = sum(id(ev) not in seen for ev in s.hits)
        if m and (found is None or (m, order) > found[:2]):
            found = (m, order, b)
    return None if found is None else (found[0], found[2])


def example(cases: list[CaseEval]) -> str:
    """'; simplest: test NAME, got G, expected E': the smallest of these failing tests and its worst element."""
    failing = [ev for ev in cases if ev.forward is not None and not ev.forward.ok]
    if not failing:
        return ""
    ev = min(failing, key=simplicity)
    fw = ev.forward
    codes = ev.case.ctx.get("codes", False)  # values that are codes (paged_kv's exceptions): its message says them
    if fw.worst_got is None or fw.worst_expected is None or codes:  # an exact answer (exact.py) says what differs
        said = f": {fw.brief}" if (ev.case.kind == "exact" or codes) and fw.brief else ""
        return f"; simplest failing test: '{ev.case.name}'{said}"
    at = f" {fw.where}" if fw.where else (f" at {list(fw.worst_index)}" if fw.worst_index else "")
    return (f"; simplest failing test: '{ev.case.name}', got {_num(fw.worst_got)}, expected "
            f"{_num(fw.worst_expected)}{at}")


def simplicity(ev: CaseEval) -> tuple[int, int]:
    """Sort key, simplest first: fewest output elements, then fewest input elements and arguments, then order.

    The smallest failing case is the one a learner can redo by hand (alibi_slopes(1): got 1, expected
    0.0039), so it is the example shown, not the largest error of a big tensor.
    """
    return case_size(ev.case)


def case_size(case: Case) -> tuple[int, int]:
    """(output elements, input elements + scalar arguments) of a case."""
    expected = case.expected
    out = int(expected.numel()) if hasattr(expected, "numel") else 1
    inputs = 0
    for value in case.args.values():
        if hasattr(value, "numel"):
            inputs += int(value.numel())
        elif isinstance(value, bool | int | float):
            inputs += abs(int(value)) if isinstance(value, int) and not isinstance(value, bool) else 1
        elif value is not None:
            inputs += 1
    return out, inputs


def _num(x: float) -> str:
    import math

    return f"{int(x)}" if math.isfinite(x) and float(x).is_integer() and abs(x) < 1e15 else f"{x:.6g}"


@dataclass
class _Score:
    """One variant's standing: failing cases explained (if consistent), matched exactly, how far evaluated."""

    explained: int = 0
    matched: int = 0
    consistent: bool = True
    next: int = 0
    explains: list[CaseEval] = field(default_factory=list)  # the failing cases it reproduces
    spurious: int = 0  # passing cases the variant would fail
    hits: list[CaseEval] = field(default_factory=list)  # those of them with finite evidence (counted in `matched`)
    hidden: int = 0  # output elements left unknown on the cases it explains


def _other_ids(best: Bug, bugs: list[Bug]) -> list[str]:
    seen: list[str] = []
    for b in bugs:
        if b.diagnosis.id != best.diagnosis.id and b.diagnosis.id not in seen:
            seen.append(b.diagnosis.id)
    return seen


def _other_counts(best: Bug, scored: list[tuple[int, int, Bug]]) -> list[str]:
    """The other ids of a partial match, each with the most failing tests one of its variants reproduces."""
    most: dict[str, int] = {}
    for n, _, b in scored:
        if b.diagnosis.id != best.diagnosis.id:
            most[b.diagnosis.id] = max(n, most.get(b.diagnosis.id, 0))
    return [f"{i} on {n} test{'s' if n != 1 else ''}" for i, n in sorted(most.items(), key=lambda t: -t[1])]


def _advance(bug: Bug, order: list[CaseEval], score: _Score, tolerance_of: Any, learner_ok: dict[int, bool], *,
             to_end: bool) -> None:
    """Evaluate `bug` on the cases from score.next on; stop at the first inconsistency unless `to_end`.

    The counts are sums over cases, so evaluating in any order, and resuming
    later where it stopped, gives exactly the numbers of one full pass.
    A case whose output has the wrong shape counts only for a variant that itself changes the shape (e.g.
    a sum over too few axes); for any other variant it is left out, as it says nothing about the values.
    Only verdicts are needed here, so the comparisons are `quick` (no messages).
    """
    from functools import partial

    from drill.judge.compare import compare as full

    compare = partial(full, quick=True)

    while score.next < len(order):
        ev = order[score.next]
        score.next += 1
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
        if ev.forward.reason == "shape" and (variant is None or tuple(variant.shape) == tuple(case.expected.shape)):
            continue
        # `zeros` only against the reference: a variant's own zeros may be underflow, and the learner's
        # output is compared with it by tolerance (a removed token's 1e-44 matches a variant's 1e-44).
        if unknown is None:
            if id(ev) not in learner_ok:
                learner_ok[id(ev)] = compare(ev.got, case.expected, tol, care=case.care, zeros=case.zeros).ok
            got_ok = learner_ok[id(ev)]
        else:
            got_ok = compare(ev.got, case.expected, tol, care=case.care, ignore=unknown, zeros=case.zeros).ok
        if got_ok:  # consistent here only if the variant passes too
            if variant is None or compare(variant, case.expected, tol, care=case.care, ignore=unknown,
                                          zeros=case.zeros).ok:
                continue
            score.spurious += 1
        # A failing case is explained only if the variant reproduces it (and then also fails, which is
        # checked second: most variants are already out after the first comparison).
        elif (variant is not None and compare(ev.got, variant, tol, care=case.care, ignore=unknown).ok
              and not compare(variant, case.expected, tol, care=case.care, ignore=unknown, zeros=case.zeros).ok):
            score.explained += 1
            score.explains.append(ev)
            score.hidden += 0 if unknown is None else int(unknown.sum())
            if _finite_evidence(variant, case, tol, unknown):
                score.matched += 1
                score.hits.append(ev)
            continue
        score.consistent = False
        if not to_end:
            return


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
