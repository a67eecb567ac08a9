"""`check_file`: grade one learner file, end to end. The CLI and mock call this.

Order matters for speed: the child process is started first, before this
process imports torch or draws anything, so the two `import torch` run in
parallel; the child then waits on its stdin for the job.
"""

from __future__ import annotations

import errno
import math
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drill.errors import UserError
from drill.judge import registry
from drill.judge.runner import Limits
from drill.judge.source import clip, read_source

STATUS_PASS, STATUS_FAIL, STATUS_ERROR = "pass", "fail", "error"


@dataclass
class TestResult:
    name: str
    status: str  # pass | fail | error | not_run
    message: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""  # --verbose: inputs' shapes/dtypes, worst element
    short: str = ""  # one-line message for the compact report ("" -> message)
    in_model: str = ""  # the in-model case's short label ("logits", "16 greedy tokens"); "" for a unit test


@dataclass
class Result:
    exercise: str
    file: str
    status: str
    seed: int
    tests: list[TestResult] = field(default_factory=list)
    diagnosis: Any = None  # spec.Diagnosis or None
    diagnosis_detail: str = ""
    diagnosis_partial: bool = False  # the named mistake explains only some failing tests
    advisories: list[str] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)  # audit measurements, shown whether or not they advise
    elapsed_s: float = 0.0
    output_tail: str = ""

    @property
    def passed(self) -> int:
        return sum(t.status == "pass" for t in self.tests)

    @property
    def total(self) -> int:
        return len(self.tests)

    @property
    def max_abs(self) -> float | None:
        vals = [t.max_abs for t in self.tests if t.max_abs is not None]
        return max(vals) if vals else None

    @property
    def max_rel(self) -> float | None:
        vals = [t.max_rel for t in self.tests if t.max_rel is not None]
        return max(vals) if vals else None

    def to_json(self) -> dict[str, Any]:
        """The --json document for one file (format documented in drill/judge/README.md)."""
        d = self.diagnosis
        return {
            "exercise": self.exercise,
            "file": self.file,
            "status": self.status,
            "seed": self.seed,
            "elapsed_s": round(self.elapsed_s, 3),
            "tests_passed": self.passed,
            "tests_total": self.total,
            "max_abs_err": self.max_abs,
            "max_rel_err": self.max_rel,
            "tests": [
                {"name": t.name, "status": t.status, "message": t.message, "max_abs_err": t.max_abs, "max_rel_err": t.max_rel}
                for t in self.tests
            ],
            "diagnosis": None
            if d is None
            else {"id": d.id, "title": d.title, "why": d.why, "fix": d.fix, "detail": self.diagnosis_detail,
                  "partial": self.diagnosis_partial},
            "advisories": list(self.advisories),
            "audit": list(self.audit),
        }


def check_file(
    path: str | Path,
    exercise: str | None = None,
    seed: int | None = None,
    limits: Limits | None = None,
    *,
    strict: bool = False,
    pool: Any = None,
    in_model: bool = False,
    audit: bool = True,
) -> Result:
    """Grade `path` as `exercise` (default: from the file name). Raises UserError on bad usage.

    `pool` (a `runner.ChildPool`) runs the learner's code in a process forked
    from a warm server instead of a fresh interpreter: same isolation, much
    cheaper when grading many files in a row. `in_model` adds the in-model
    cases (drill/judge/inmodel.py) after the unit tests; `audit=False` skips
    the spec's advisory audit (benchmarks compare both).
    """
    t0 = time.monotonic()
    path = Path(path)
    if not path.is_file():
        raise UserError("no such file", str(path))
    name = registry.resolve_exercise(path, exercise)
    limits = limits or Limits()
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    source = read_source(path)  # BOM and PEP 263 coding lines as Python reads them; UserError at file:line
    result = Result(exercise=name, file=str(path), status=STATUS_ERROR, seed=seed)

    syntax = _syntax_error(source, path)
    if syntax is not None:
        from drill.judge.diagnose import GENERIC

        result.diagnosis, result.diagnosis_detail = GENERIC["syntax_error"], syntax
        result.elapsed_s = time.monotonic() - t0
        return result

    from drill.judge.runner import Child

    # Started before torch is imported here, so the two imports overlap.
    child = pool.child(limits) if pool is not None else Child(limits)
    try:
        spec = registry.load_spec(name)
        cases = spec.make_cases(seed)
        for case in cases:
            case.expected, case.expected_grads = spec.reference(case)
        if in_model:
            from drill.judge.inmodel import cases_for

            cases += cases_for(name, seed)  # expected answers computed there
        job, tensors = _job(spec, cases, path)
        if audit and spec.audit:
            job["audit"] = dict(spec.audit)
        child.send(job, tensors)
        outcome = child.wait()
        _grade(result, spec, cases, child, outcome, strict)
    finally:
        child.cleanup()
    result.elapsed_s = time.monotonic() - t0
    return result


def _syntax_error(source: str, path: Path) -> str | None:
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = clip(exc.text or "", exc.offset)
        return f"line {exc.lineno}: {exc.msg}" + (f": {line}" if line else "")
    except ValueError as exc:  # e.g. null bytes
        return str(exc)
    return None


def _job(spec: Any, cases: list, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Serialise cases for the child: JSON descriptions + one dict of tensors."""
    import torch

    from drill.judge.compare import dtype_name

    tensors: dict[str, Any] = {}

    def ref(key: str, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            tensors[key] = value.detach().contiguous().clone()
            return {"t": key}
        return {"v": value}

    described = []
    for i, case in enumerate(cases):
        entry: dict[str, Any] = {
            "index": i,
            "target": case.target,
            "kind": case.kind,
            "arg_names": list(case.args),
            "args": [ref(f"{i}.arg.{n}", v) for n, v in case.args.items()],
            "grad_inputs": list(case.grad_inputs) if case.wants_grads else [],
            "grad_params": bool(case.grad_params and case.wants_grads),
        }
        if case.extra:
            entry["extra"] = case.extra
        if case.repeat:  # a first call's inputs (spec.Case.repeat), run just before the graded call
            entry["repeat"] = [ref(f"{i}.repeat.{n}", v) for n, v in case.repeat.items()]
        if case.kind == "module" or case.params:
            entry["init"] = [ref(f"{i}.init.{j}", v) for j, v in enumerate(case.init)]
            entry["params"] = {p: ref(f"{i}.param.{p}", t)["t"] for p, t in case.params.items()}
            entry["module_dtype"] = dtype_name(case.module_dtype) if case.module_dtype is not None else None
        if case.kind == "map":
            entry["rows"] = [list(r) for r in case.rows]
        if case.wants_grads:
            entry["upstream"] = ref(f"{i}.upstream", case.upstream)["t"]
        described.append(entry)
    job = {
        "learner": str(path.resolve()),
        "graded": list(spec.graded),
        "forbidden": list(spec.forbidden),
        "forbidden_classes": list(spec.forbidden_classes),
        "report_attrs": list(spec.report_attrs),
        "cases": described,
    }
    return job, tensors


def _tolerance_of(spec: Any):
    def tol(case: Any):
        return spec.tolerances[case.ctx.get("tol", case.ctx.get("dtype", "float32"))]

    return tol


def _grade(result: Result, spec: Any, cases: list, child: Any, outcome: Any, strict: bool) -> None:
    """Turn the child's outcome into per-test results, a verdict and a diagnosis."""
    import torch

    from drill.judge.compare import Comparison, compare
    from drill.judge.diagnose import GENERIC, CaseEval, again_check, diagnose_cases, where
    from drill.judge.inmodel_verdict import IN_MODEL_ONLY, compare_tokens, in_model_note, is_token_case

    result.output_tail = outcome.output_tail
    events = outcome.events
    tol_of = _tolerance_of(spec)

    # Run-level failures: the file could not even be loaded, or the process died.
    load_error = next((e for e in events if e.get("event") == "load_error"), None)
    ends = {e.get("case"): e for e in events if e.get("event") == "end"}
    started = [e.get("case") for e in events if e.get("event") == "start"]
    running = started[-1] if started and started[-1] not in ends else None

    run_failure = None
    if outcome.killed_for in ("time_limit", "cpu_limit", "memory_limit"):
        limit = {"time_limit": f"{child.limits.timeout_s:g} s wall clock", "memory_limit": f"{child.limits.memory_mb} MB",
                 "cpu_limit": f"{child.limits.cpu_s:g} s CPU"}[outcome.killed_for]
        run_failure = (outcome.killed_for, f"stopped after exceeding {limit}" + _during(cases, running))
    elif outcome.killed_for == "startup":
        run_failure = ("crashed", "the grader's child process did not start in time (machine overloaded?)")
    elif outcome.returncode == -signal.SIGXFSZ and not outcome.finished:  # the learner restored SIGXFSZ's default
        run_failure = ("output_limit", _output_detail(outcome) + _during(cases, running))
    elif load_error is not None and _hit_output_cap(load_error):
        run_failure = ("output_limit", _output_detail(outcome) + f"{where(load_error)} while importing the file")
    elif outcome.returncode is not None and outcome.returncode < 0 and not outcome.finished:
        sig = -outcome.returncode
        if sig in (signal.SIGXCPU, signal.SIGKILL) and outcome.cpu_s >= child.limits.cpu_s - 0.5:
            run_failure = ("cpu_limit", f"stopped after {outcome.cpu_s:.1f} s of CPU time (limit {child.limits.cpu_s:g} s)" + _during(cases, running))
        else:
            run_failure = ("crashed", f"the process was killed by signal {signal.Signals(sig).name}" + _during(cases, running))
    elif load_error is not None:
        status = load_error.get("status", "exception")
        if status == "exception":
            detail = f"{load_error.get('type')}: {load_error.get('message')}{where(load_error)} while importing the file"
        elif status == "forbidden_op":
            detail = f"{load_error.get('op')} called{where(load_error)} while importing the file"
        else:
            detail = f"{load_error.get('message', '')}{where(load_error)}"
        run_failure = (status if status in GENERIC else "exception", detail)
    elif not outcome.finished:
        run_failure = ("crashed", f"the process exited (code {outcome.returncode}) before finishing" + _during(cases, running))
    elif outcome.leftovers:
        run_failure = ("crashed", f"left {len(outcome.leftovers)} process(es) running after grading (killed)")

    if run_failure is None and spec.prepare is not None:
        attrs = next((e.get("values") for e in events if e.get("event") == "attrs"), None)
        refused = spec.prepare(cases, attrs if isinstance(attrs, dict) else {})
        if refused is not None:  # e.g. rope's CONVENTION has an unknown value: nothing can be compared
            result.status, (result.diagnosis, result.diagnosis_detail) = STATUS_FAIL, refused
            result.tests = [TestResult(c.name, "not_run", "not compared") for c in cases]
            result.advisories = _advisories(spec, cases, [], outcome)
            return

    evals: list[CaseEval] = []
    for i, case in enumerate(cases):
        end = ends.get(i)
        if end is None:
            evals.append(CaseEval(case, "not_run", {}))
            continue
        status = end.get("status", "exception")
        ev = CaseEval(case, status, end)
        if status == "ok":
            try:
                saved = torch.load(child.output_file(f"out_{i}.pt"), weights_only=True, map_location="cpu")
                got = saved["out"]
                if not isinstance(got, torch.Tensor):
                    raise TypeError("not a tensor")
            except Exception as exc:  # noqa: BLE001 - anything unreadable is the learner's failure
                ev.status, ev.record = "crashed", {"message": f"unreadable output ({type(exc).__name__})"}
                evals.append(ev)
                continue
            if case.derive is not None:  # a property check compares a quantity derived from the output
                got = case.derive(got)
            ev.got = got
            if is_token_case(case):  # token ids: the first diverging step, never an error size
                ev.forward = compare_tokens(got, case.expected, int(case.args["ids"].shape[1]))
            else:
                ev.forward = compare(
                    got, case.expected, tol_of(case), care=case.care, dtype=case.out_dtype, what=case.ctx.get("what", "output")
                )
            again = saved.get("again")  # a determinism probe's second output (specs/_common.twice_probe)
            if isinstance(again, torch.Tensor) and case.derive is None:
                ev.again = again
                ev.forward = again_check(ev.forward, got, again, tol_of(case), case.care)
            if ev.forward.ok and case.wants_grads:
                flag = saved.get("__grad_error__")
                grad_msg = next((e.get("message") for e in events if e.get("event") == "grad_error" and e.get("case") == i), None)
                if flag is not None and bool(flag.any()):
                    ev.grad_error = grad_msg or "gradients could not be computed"
                else:
                    for key, want in case.expected_grads.items():
                        have = saved.get(key)
                        label = key.replace("input:", "gradient of ").replace("param:", "gradient of ")
                        if not isinstance(have, torch.Tensor):
                            ev.grads[key] = Comparison(False, "missing", f"{label} is missing (no gradient reached it)")
                        else:
                            ev.grads[key] = compare(have, want, spec.tolerances["grad"], dtype=want.dtype, what=label)
        evals.append(ev)

    capped = next((ev for ev in evals if _hit_output_cap(ev.record)), None)
    if run_failure is None and capped is not None:  # a print storm, not an exception of the learner's
        run_failure = ("output_limit", _output_detail(outcome) + f" during test '{capped.case.name}'{where(capped.record)}")

    result.tests = [_test_result(ev) for ev in evals]
    if run_failure is not None:
        result.status = STATUS_ERROR if (load_error is not None or not ends) else STATUS_FAIL
        result.diagnosis, result.diagnosis_detail = GENERIC[run_failure[0]], run_failure[1]
        for t in result.tests:
            if t.status == "not_run":
                t.message = t.message or "not run"
        if result.status == STATUS_ERROR and load_error is not None and run_failure[0] in ("not_implemented",):
            result.status = STATUS_FAIL
    elif all(ev.passed for ev in evals):
        result.status = STATUS_PASS
    else:
        result.status = STATUS_FAIL
        unit = [ev for ev in evals if not ev.case.ctx.get("in_model")]
        if all(ev.passed for ev in unit):  # only the in-model run disagrees: no bug signature applies there
            ev = next(ev for ev in evals if not ev.passed)
            message = ev.forward.message if ev.forward is not None and not ev.forward.ok else ev.record.get("message", ev.status)
            result.diagnosis = IN_MODEL_ONLY
            result.diagnosis_detail = f"the unit tests pass, but inside the reference decoder: {message} in test '{ev.case.name}'"
        else:
            verdict = diagnose_cases(spec, unit, tol_of)
            result.diagnosis, result.diagnosis_detail = verdict.diagnosis, verdict.detail + in_model_note(evals)
            result.diagnosis_partial = verdict.partial

    result.advisories = _advisories(spec, cases, evals, outcome)
    for e in events:
        if e.get("event") == "audit" and result.status == STATUS_PASS:
            from drill.judge.audit import judge

            if "data" in e:
                lines, notes = judge(str(e.get("name")), e["data"])
                result.audit += lines
                result.advisories += notes
            else:
                err = e.get("error") or {}
                result.audit.append(f"{e.get('name')} audit could not run: {err.get('type', err.get('status', ''))} {err.get('message', '')}".strip())
    if strict and result.status == STATUS_PASS and result.advisories:
        result.status = STATUS_FAIL
        result.diagnosis_detail = "failed under --strict because of the advisories"


def _hit_output_cap(record: dict) -> bool:
    """The child's record of a write refused by RLIMIT_FSIZE (EFBIG: our output cap, not a learner bug).

    Python ignores SIGXFSZ, so a print past the cap raises OSError(EFBIG)
    inside the learner's code; the child reports it like any exception.
    """
    return record.get("type") == "OSError" and str(record.get("message", "")).startswith(f"[Errno {errno.EFBIG}]")


def _cap() -> str:
    from drill.judge import runner

    return f"{runner.OUTPUT_CAP_BYTES / 2**20:g} MB"


def _output_detail(outcome: Any) -> str:
    from drill.judge import runner

    if outcome.output_bytes >= runner.OUTPUT_CAP_BYTES:
        return f"printed output reached the {_cap()} cap"
    return f"a write reached the {_cap()} file-size cap"


def _during(cases: list, running: int | None) -> str:
    return "" if running is None else f" during test '{cases[running].name}'"


def _test_result(ev: Any) -> Any:
    from drill.judge.inmodel_verdict import label

    result = _test_result_of(ev)
    result.in_model = label(ev.case)
    return result


def _test_result_of(ev: Any) -> Any:
    case = ev.case
    detail = case.describe()
    if ev.status == "not_run":
        return TestResult(case.name, "not_run", "not run", detail=detail)
    if ev.status != "ok":
        rec = ev.record
        msg = rec.get("message", ev.status)
        if _hit_output_cap(rec):
            msg = f"output limit: a print (or write) past the {_cap()} cap failed"
        elif ev.status == "exception":
            msg = f"{rec.get('type')}: {msg}"
        if ev.status == "forbidden_op":
            msg = f"{rec.get('op')} is forbidden"
        line = rec.get("line")
        if line:
            msg += f" (line {line})"
        return TestResult(case.name, "error", msg, detail=detail)
    fw = ev.forward
    if not fw.ok:
        if fw.worst_index is not None:
            detail += f"; worst element {list(fw.worst_index)}: got {_num(fw.worst_got)}, expected {_num(fw.worst_expected)}"
        return TestResult(case.name, "fail", fw.message, fw.max_abs, fw.max_rel, detail, fw.brief)
    if ev.grad_error is not None:
        return TestResult(case.name, "fail", f"gradients: {ev.grad_error}", fw.max_abs, fw.max_rel, detail)
    bad = [c for c in ev.grads.values() if not c.ok]
    if bad:
        if bad[0].worst_index is not None:
            detail += f"; worst gradient element {list(bad[0].worst_index)}: got {_num(bad[0].worst_got)}, expected {_num(bad[0].worst_expected)}"
        return TestResult(case.name, "fail", bad[0].message, fw.max_abs, fw.max_rel, detail, bad[0].brief)
    return TestResult(case.name, "pass", "", fw.max_abs, fw.max_rel, detail)


def _num(x: float) -> str:
    """An element for the reader: whole numbers (ffn_hidden_dim's sizes) as integers, others to 6 digits."""
    return f"{int(x)}" if math.isfinite(x) and x.is_integer() and abs(x) < 1e15 else f"{x:.6g}"


def _advisories(spec: Any, cases: list, evals: list, outcome: Any) -> list[str]:
    notes: list[str] = []
    if outcome.output_tail.strip():
        notes.append("the file printed output while being graded (graded code should be silent)")
    slow = [ev for ev in evals if isinstance(ev.record.get("elapsed"), (int, float)) and ev.record["elapsed"] > 2.0]
    if slow:
        notes.append(f"slow: test '{slow[0].case.name}' took {slow[0].record['elapsed']:.1f} s on tiny inputs (Python loops?)")
    if spec.advise is not None:
        notes.extend(spec.advise(cases, [ev.got for ev in evals]))
    return notes
