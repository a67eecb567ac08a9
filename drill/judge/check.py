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
from drill.judge.source import clip, parse, read_source

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
    nonfinite: int = 0  # NaN/inf output elements where finite were expected: max_abs/max_rel leave them out
    tol_used: float | None = None  # a passing test: its largest error as a share of the tolerance
    size: tuple[int, int] = (0, 0)  # (output elements, input size): the compact list orders `unknown` by it


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
    diagnosis_second: str = ""  # the id of a second known mistake the detail names (two in one file)
    advisories: list[str] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)  # audit measurements, shown whether or not they advise
    elapsed_s: float = 0.0
    output_tail: str = ""
    layers: dict[str, str] = field(default_factory=dict)  # which defences were active (schema.LAYER_FIELDS)
    unmeasured: bool = False  # an audit observed nothing: "could not measure", a failure under --strict
    device: str = "cpu"  # where the learner's code ran, as the child confirmed it ("cuda:0 (NVIDIA H200, ...)")
    reference_backend: str = ""  # which kernels computed the expectations (devices.kernel_summary)

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

    @property
    def tol_used(self) -> float | None:
        """The largest share of its tolerance any test's error used (a pass: every share is at most 1)."""
        vals = [t.tol_used for t in self.tests if t.tol_used is not None]
        return max(vals) if vals else None

    def to_json(self) -> dict[str, Any]:
        """The --json document for one file (format documented in drill/judge/README.md)."""
        from drill.judge.schema import LAYER_FIELDS, VERSION

        d = self.diagnosis
        return {
            "version": VERSION,
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
                {"name": t.name, "status": t.status, "message": t.message, "max_abs_err": t.max_abs,
                 "max_rel_err": t.max_rel}
                for t in self.tests
            ],
            "diagnosis": None
            if d is None
            else {"id": d.id, "title": d.title, "why": d.why, "fix": d.fix, "detail": self.diagnosis_detail,
                  "partial": self.diagnosis_partial},
            "advisories": list(self.advisories),
            "audit": list(self.audit),
            "layers": {k: self.layers.get(k, "") for k in LAYER_FIELDS},
            "device": self.device,
            "reference_backend": self.reference_backend,
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
    policy: bool = True,
    device: str | None = None,
) -> Result:
    """Grade `path` as `exercise` (default: from the file name). Raises UserError on bad usage.

    `pool` (a `pool.ChildPool`) runs the learner's code in a process forked
    from a warm server instead of a fresh interpreter: same isolation, much
    cheaper when grading many files in a row. `in_model` adds the in-model
    cases (drill/judge/inmodel.py) after the unit tests; `audit=False` skips
    the spec's advisory audit (benchmarks compare both). `policy=False`
    skips layer 1, the static check of the source (only the tests of the
    layers below use it: each layer must hold on its own). `device`: "cpu",
    "cuda" or "auto" (`drill/judge/devices.py`); None is the CPU, or CUDA
    for an exercise that needs it. On CUDA the inputs, the learner's code and
    the reference all run on the GPU; the CUDA device is settled after the
    child was started (so the two torch imports still overlap), and its
    absence is a UserError then.
    """
    from drill.judge import devices

    t0 = time.monotonic()
    path = Path(path)
    if not path.is_file():
        raise UserError("no such file", str(path))
    name = registry.resolve_exercise(path, exercise)
    entry = registry.entry(name)
    wanted = devices.requested(device, entry)
    if not devices.device_available(entry):
        raise UserError(devices.cuda_only_refusal(entry), str(path))
    limits = limits or Limits()
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    source = read_source(path)  # BOM and PEP 263 coding lines as Python reads them; UserError at file:line
    result = Result(exercise=name, file=str(path), status=STATUS_ERROR, seed=seed)

    refusal = _refusal(source, path, entry, policy)
    if refusal is not None:  # nothing to run: answered at once, no child spawned, no test drawn
        _refused(result, *refusal, policy)
        result.elapsed_s = time.monotonic() - t0
        return result

    from drill.judge.runner import Child
    from drill.judge.sandbox import harden_parent

    hardened = harden_parent()
    # Started before torch is imported here, so the two imports overlap (a single run also warms up CUDA).
    child = pool.child(limits, learner=path) if pool is not None else Child(limits, learner=path, device=wanted)
    try:
        dev = devices.resolve(wanted, entry)
        child.use_device(dev)  # on CUDA the sandbox also shows the GPU's device nodes and /sys (read-only)
        spec = registry.load_spec(name)
        from drill.judge.specs._common import one_thread

        cases = _drawn_cases(spec, seed, dev, source, str(path))
        with one_thread():  # the parent's tensors are tiny: a busy OpenMP pool only adds waits (see one_thread)
            unit = list(cases)
            if in_model:
                from drill.judge.inmodel import cases_for

                cases += cases_for(name, seed)  # expected answers computed there (on the CPU, math path)
            job, tensors = _job(spec, cases, path)
            job["device"] = {"type": dev, "memory_mb": int(limits.memory_mb)}
            if "triton" in entry.imports:
                job["triton"] = {"interpret": devices.interpreting(entry)}
            if audit and spec.audit:
                job["audit"] = dict(spec.audit)
            child.send(job, tensors)
        # The expectations are computed while the child runs the learner's code: nothing the child is sent
        # depends on them (tests/test_judge_job.py checks that), and on a folder the two workers' parents
        # no longer hold their children back while they compute.
        _expect_all(spec, unit, dev, result)
        with one_thread():
            outcome = child.wait()
            result.layers = _layers(policy, outcome, hardened)
            result.device = _device_seen(outcome, dev)
            if devices.interpreting(entry):
                result.device += " (Triton's interpreter: values only)"
            _grade(result, spec, cases, child, outcome, strict, audit_wanted=bool(audit and spec.audit))
    finally:
        child.cleanup()
        _release_device()
    result.elapsed_s = time.monotonic() - t0
    return result


def _refused(result: Result, kind: str, detail: str, policy: bool) -> None:
    """A file answered before any process: a syntax error, no code, or layer 1's refusal."""
    from drill.judge.diagnose import GENERIC

    result.status = STATUS_FAIL if kind == "policy_violation" else STATUS_ERROR
    result.diagnosis, result.diagnosis_detail = GENERIC[kind], detail
    result.layers = {"policy": "refused the file" if kind == "policy_violation" else ("on" if policy else "off"),
                     "kernels": "not run", "sandbox": "not run", "parent": ""}


def _drawn_cases(spec: Any, seed: int, dev: str, source: str = "", where: str = "") -> list[Any]:
    """The seed's hidden tests, inputs only (their expectations come from `_expect_all`); from the source
    too where the spec says so (`Spec.source_cases`)."""
    from drill.judge.specs._common import one_thread, reference_device

    with one_thread(), reference_device(dev):
        if getattr(spec, "source_cases", None) is not None and source:  # no file (tests): make_cases
            return spec.source_cases(source, seed, where)
        return spec.make_cases(seed)


def _expect_all(spec: Any, cases: list[Any], dev: str, result: Result) -> None:
    """Every case's expectations from the reference on `dev`, each case's reference time kept (the 'slow'
    advisory compares the learner's CPU time with it) and the backends that ran recorded."""
    from drill.judge import devices
    from drill.judge import spec as spec_module
    from drill.judge.specs._common import one_thread, reference_device
    from drill.reference.backend import kernel_log

    with one_thread(), reference_device(dev), kernel_log() as kernels:
        fallback = 0
        for case in cases:
            t_ref = spec_module.reference_clock()
            fallback += _expect(spec, case, dev)
            case.reference_s = spec_module.reference_clock() - t_ref
    result.reference_backend = devices.kernel_summary(kernels, fallback)
    result.device = dev


def _expect(spec: Any, case: Any, dev: str) -> int:
    """Fill a case's expectations on `dev` (inside `reference_device`); 1 if CUDA failed and the CPU computed them.

    A reference op missing or failing on CUDA for some input must not turn a check into a traceback: that
    case is computed on the CPU instead, and `reference_backend` counts it.
    """
    try:
        case.expected, case.expected_grads = spec.reference(case)
        return 0
    except Exception:  # noqa: BLE001 - the reference is ours; on the CPU it is the path every check takes
        if dev == "cpu":
            raise
    from drill.judge.specs._common import reference_device

    with reference_device("cpu"):
        case.expected, case.expected_grads = spec.reference(case)
    return 1


def _device_seen(outcome: Any, dev: str) -> str:
    """The device as the child reported it (name and memory cap on CUDA); the parent's word only for the CPU."""
    seen = next((e for e in outcome.events if e.get("event") == "device"), None)
    if seen is None:
        return dev if dev == "cpu" else f"{dev} (not confirmed by the child)"
    text = str(seen.get("name") or seen.get("device"))
    if seen.get("memory_cap_mb"):
        text += f", capped at {seen['memory_cap_mb']} MB"
    return text


def _release_device() -> None:
    """Hand cached CUDA memory back after a check (a warm server must not sit on it between checks)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _refusal(source: str, path: Path, entry: Any, policy: bool) -> tuple[str, str] | None:
    """(diagnosis id, detail) for a file refused before anything runs: a syntax error, no code, layer 1."""
    syntax = _syntax_error(source, path)
    if syntax is not None:
        return "syntax_error", syntax
    empty = _no_code(source)
    if empty:
        graded, name = ", ".join(entry.graded), entry.name
        return "empty_file", f"{empty}; {name} grades {graded} (`drill start {name}` copies the starter file)"
    refused = policy and _policy_refusal(source, path, entry.imports)
    return ("policy_violation", refused) if refused else None


def _no_code(source: str) -> str:
    """Why a file that parses has nothing to grade ("the file is empty", ...), or "" when it has code.

    Checked before a child is spawned: an empty file used to cost a full run
    (seconds under load) to be told that every graded name is missing.
    """
    import ast

    if not source.strip():
        return "the file is empty"
    body = parse(source).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # a module docstring alone is no code
    return "" if body else "the file holds no code (only comments or a docstring)"


def _policy_refusal(source: str, path: Path, extra: tuple[str, ...] = ()) -> str:
    """Layer 1: the one-line `policy_violation` detail, or "" when the source is allowed."""
    from drill.judge.policy import first_violation

    return first_violation(source, path, extra) or ""


def _layers(policy: bool, outcome: Any, hardened: dict) -> dict[str, str]:
    """What each defence did for this run, as the parent saw and the child confirmed (never claimed otherwise)."""
    confirm = next((e for e in outcome.events if e.get("event") == "sandbox"), None)
    asked = outcome.sandbox or {}
    if asked.get("requested") == "namespaces":
        if confirm is not None and confirm.get("sandbox") == "namespaces":
            box = "namespaces (user, pid, mount, net; read-only file system, private tmpfs)"
        else:
            box = "requested but not confirmed by the child" if confirm is None else f"off: {confirm.get('reason', '')}"
    else:
        box = f"off: {asked.get('reason') or 'not requested'} (rlimits, RSS polling and the process sweep only)"
    kernels = "not confirmed"
    if confirm is not None:
        hook = ", audit hook" if confirm.get("audit_hook") else ""
        if confirm.get("seccomp") == "on":
            processes = ", seccomp (no new process)"
        else:
            processes = f", seccomp off: {confirm.get('seccomp_reason') or 'not confirmed'}"
        kernels = f"{confirm.get('kernels_blocked', 0)} aten ops blocked{hook}{processes}"
    parent = ", ".join(k.replace("_", "-") for k, v in hardened.items() if v) or "not hardened"
    return {"policy": "on" if policy else "off", "kernels": kernels, "sandbox": box, "parent": parent}


def _syntax_error(source: str, path: Path) -> str | None:
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        from drill.judge.boundary import safe_text

        line = safe_text(clip(exc.text or "", exc.offset))
        return f"line {exc.lineno}: {safe_text(exc.msg)}" + (f": {line}" if line else "")
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
        if case.module_attrs:  # module-level names the grader sets for this case (flash_attention's blocks)
            entry["module_attrs"] = dict(case.module_attrs)
        if case.repeat:  # a first call's inputs (spec.Case.repeat), run just before the graded call
            entry["repeat"] = [ref(f"{i}.repeat.{n}", v) for n, v in case.repeat.items()]
        if case.kind == "module" or case.params:
            entry["init"] = [ref(f"{i}.init.{j}", v) for j, v in enumerate(case.init)]
            entry["params"] = {p: ref(f"{i}.param.{p}", t)["t"] for p, t in case.params.items()}
            entry["module_dtype"] = dtype_name(case.module_dtype) if case.module_dtype is not None else None
        if case.kind == "map":
            entry["rows"] = [list(r) for r in case.rows]
            entry["returns"] = "float" if case.out_dtype == torch.float64 else "int"
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
    if spec.allowance is not None:  # a from-scratch exercise: every aten op outside its families trips
        job["allowed"], job["allowed_what"] = list(spec.allowance.patterns()), spec.allowance.describe()
    return job, tensors


def _tolerance_of(spec: Any):
    def tol(case: Any):
        return spec.tolerances[case.ctx.get("tol", case.ctx.get("dtype", "float32"))]

    return tol


def _grade(result: Result, spec: Any, cases: list, child: Any, outcome: Any, strict: bool, *,
           audit_wanted: bool = False) -> None:
    """Turn the child's outcome into per-test results, a verdict and a diagnosis, phase by phase."""
    from drill.judge.boundary import check_against_job

    result.output_tail = outcome.output_tail
    forged = check_against_job(outcome.events, len(cases), tuple(spec.report_attrs))
    if forged and not outcome.unreadable:  # nothing downstream reads a record the job cannot have produced
        outcome.unreadable, outcome.events = forged, []
    events = outcome.events
    run_failure = _run_failure(events, outcome, child, cases)
    if run_failure is None and spec.prepare is not None and _prepare_refused(result, spec, cases, events, outcome):
        return
    evals = _evaluate(spec, cases, child, events)
    capped = next((ev for ev in evals if _hit_output_cap(ev.record)), None)
    if run_failure is None and capped is not None:  # a print storm, not an exception of the learner's
        from drill.judge.diagnose import where

        run_failure = ("output_limit", _output_detail(outcome)
                       + f" during test '{capped.case.name}'{where(capped.record)}")
    _verdict(result, spec, evals, run_failure, events)
    result.advisories = _advisories(spec, cases, evals, outcome)
    _audits(result, events, audit_wanted)
    if strict and result.status == STATUS_PASS and (result.advisories or result.unmeasured):
        result.status = STATUS_FAIL
        why = "the advisories" if result.advisories else "an audit that could not measure anything"
        result.diagnosis_detail = f"failed under --strict because of {why}"


def _run_failure(events: list, outcome: Any, child: Any, cases: list) -> tuple[str, str] | None:
    """Phase 1: a failure of the whole run (limits, a crash, an unreadable report, a trip, a load error), or None."""
    from drill.judge.diagnose import GENERIC, where

    load_error = next((e for e in events if e.get("event") == "load_error"), None)
    ends = {e.get("case"): e for e in events if e.get("event") == "end"}
    started = [e.get("case") for e in events if e.get("event") == "start"]
    running = started[-1] if started and started[-1] not in ends else None
    trip = next((e for e in events if e.get("event") == "trip"), None)
    denied = next((e for e in events if e.get("event") == "denied"), None)
    lim = child.limits
    if outcome.killed_for in ("time_limit", "cpu_limit", "memory_limit"):
        limit = {"time_limit": f"{lim.timeout_s:g} s wall clock", "memory_limit": f"{lim.memory_mb} MB",
                 "cpu_limit": f"{lim.cpu_s:g} s CPU"}[outcome.killed_for]
        return outcome.killed_for, f"stopped after exceeding {limit}" + _during(cases, running)
    if outcome.killed_for == "disk_limit":
        from drill.judge.runner import WORK_CAP_BYTES

        return "output_limit", (f"the run wrote more than {WORK_CAP_BYTES / 2**20:g} MB of files"
                                + _during(cases, running))
    if outcome.killed_for == "startup":
        return "crashed", ("the grader could not start its child process (its fork server stopped twice or did "
                           "not answer in time: machine overloaded?); nothing of this file ran")
    no_device = next((e for e in events if e.get("event") == "device" and e.get("error")), None)
    if no_device is not None:  # before the learner's file was loaded: not the learner's doing
        return "crashed", f"the grading process could not use {no_device.get('device')}: {no_device.get('error')}"
    if outcome.unreadable:
        return "crashed", f"unreadable report: {outcome.unreadable} (the child's records were garbled or forged)"
    if trip is not None:  # recorded the moment it happened, whatever the code did afterwards
        return "forbidden_op", f"{trip.get('op')} called{where(trip)}"
    if denied is not None:
        return "policy_violation", f"refused while running: {denied.get('what')} {denied.get('detail', '')}".rstrip()
    if outcome.returncode == -signal.SIGXFSZ and not outcome.finished:  # the learner restored SIGXFSZ's default
        return "output_limit", _output_detail(outcome) + _during(cases, running)
    if load_error is not None and _hit_output_cap(load_error):
        return "output_limit", _output_detail(outcome) + f"{where(load_error)} while importing the file"
    if outcome.returncode is not None and outcome.returncode < 0 and not outcome.finished:
        sig = -outcome.returncode
        # SIGXCPU comes only from RLIMIT_CPU (the learner cannot signal: audit hook, policy); the CPU seen
        # through a sandbox's nested waits can lag the limit, so it is not required to reach it.
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and outcome.cpu_s >= lim.cpu_s - 0.5):
            return "cpu_limit", (f"stopped after {outcome.cpu_s:.1f} s of CPU time (limit {lim.cpu_s:g} s)"
                                 + _during(cases, running))
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return "crashed", f"the process was killed by signal {name}" + _during(cases, running)
    if load_error is not None:
        status = load_error.get("status", "exception")
        if status == "exception":
            detail = (f"{load_error.get('type')}: {load_error.get('message')}{where(load_error)}"
                      " while importing the file")
        elif status == "forbidden_op":
            detail = f"{load_error.get('op')} called{where(load_error)} while importing the file"
        elif status == "denied":
            return "policy_violation", ("refused while importing the file: "
                                        f"{load_error.get('message', '')}{where(load_error)}")
        else:
            detail = f"{load_error.get('message', '')}{where(load_error)}"
        return (status if status in GENERIC else "exception"), detail
    if not outcome.finished:
        return "crashed", f"the process exited (code {outcome.returncode}) before finishing" + _during(cases, running)
    if outcome.leftovers:
        return "crashed", f"left {len(outcome.leftovers)} process(es) running after grading (killed)"
    return None


def _prepare_refused(result: Result, spec: Any, cases: list, events: list, outcome: Any) -> bool:
    """Phase 2: the spec adjusts expectations to what the file declared (rope's CONVENTION), or refuses."""
    attrs = next((e.get("values") for e in events if e.get("event") == "attrs"), None)
    refused = spec.prepare(cases, attrs if isinstance(attrs, dict) else {})
    if refused is None:
        return False
    result.status, (result.diagnosis, result.diagnosis_detail) = STATUS_FAIL, refused
    result.tests = [TestResult(c.name, "not_run", "not compared") for c in cases]
    result.advisories = _advisories(spec, cases, [], outcome)
    return True


def _load_output(child: Any, i: int) -> dict:
    """The tensors a case saved, through the boundary (size, an index checked against the data, plain tensors)."""
    from drill.judge.boundary import load_outputs

    return load_outputs(child.output_file(f"out_{i}.bin"))


def _oversized(got: Any, case: Any) -> Any:
    """A failing Comparison when an output is far larger than the case's answer, else None.

    Outputs are the learner's to forge within the boundary's 256 MB; judges and the list and token messages
    read them element by element (`tolist`), which at 32 M elements costs seconds and a gigabyte. A correct
    output has the answer's size. Not for a case that judges its output itself (its answer may be a
    placeholder: speculative_decoding's 30 000 draws), a derived property, or the exact kind's JSON bytes."""
    import torch

    from drill.judge.compare import Comparison

    want = case.expected
    if case.judge is not None or case.derive is not None or case.kind == "exact" or not isinstance(want, torch.Tensor):
        return None
    if not isinstance(got, torch.Tensor) or got.numel() <= max(16 * want.numel(), 4096):
        return None
    return Comparison(False, "shape", f"the output has {got.numel()} elements, for an answer of shape "
                                      f"{tuple(want.shape)}")


def _evaluate(spec: Any, cases: list, child: Any, events: list) -> list:
    """Phase 3: every case compared: forward output, then gradients (CaseEval per case, in order)."""
    import torch

    from drill.judge.compare import Comparison, compare, name_the_call, name_the_list
    from drill.judge.diagnose import CaseEval, again_check
    from drill.judge.inmodel_verdict import compare_tokens, is_token_case

    tol_of = _tolerance_of(spec)
    ends = {e.get("case"): e for e in events if e.get("event") == "end"}
    evals: list = []
    for i, case in enumerate(cases):
        end = ends.get(i)
        if end is None:
            evals.append(CaseEval(case, "not_run", {}))
            continue
        status = end.get("status", "exception")
        ev = CaseEval(case, status, end)
        evals.append(ev)
        if status != "ok":
            continue
        try:
            saved = _load_output(child, i)
        except Exception as exc:  # noqa: BLE001 - anything unreadable is the learner's failure
            from drill.judge.boundary import Unreadable

            why = str(exc) if isinstance(exc, Unreadable) else type(exc).__name__
            ev.status, ev.record = "crashed", {"message": f"unreadable output ({why})"}
            continue
        got = saved["out"]
        oversized = _oversized(got, case)
        if oversized is not None:  # never handed to a judge that reads it element by element
            ev.forward = oversized
            continue
        if case.kind == "exact" and case.judge is None:  # a plain Python answer (drill/judge/exact.py)
            from drill.judge.exact import evaluate

            ev.forward, ev.got = evaluate(got, case)
            if ev.got is None:
                ev.status, ev.record = "crashed", {"message": ev.forward.message}
            continue
        if case.derive is not None:  # a property check compares a quantity derived from the output
            got = case.derive(got)
        ev.got = got
        if case.judge is not None:  # a measurement the case judges itself (flash_attention's tiling)
            ev.forward = case.judge(got)
        elif is_token_case(case):  # token ids: the first diverging step, never an error size
            ev.forward = compare_tokens(got, case.expected, int(case.args["ids"].shape[1]))
        else:
            ev.forward = compare(got, case.expected, tol_of(case), care=case.care, dtype=case.out_dtype,
                                 zeros=case.zeros, what=case.ctx.get("what", "output"))
            if case.kind == "map":  # one call per row: say which call is off
                ev.forward = name_the_call(ev.forward, case.target, case.rows)
            if case.extra.get("returns") == "int_list":  # a list of ints: the first position that differs
                ev.forward = name_the_list(ev.forward, got, case.expected)
            if case.ctx.get("locate") is not None:  # where the worst element lies (adamw: the step, the parameter)
                ev.forward = case.ctx["locate"](ev.forward)
        again = saved.get("again")  # a determinism probe's second output (specs/_common.twice_probes)
        if isinstance(again, torch.Tensor) and case.derive is None:
            ev.again = again
            ev.forward = again_check(ev.forward, got, again, tol_of(case), case.care)
        if not (ev.forward.ok and case.wants_grads):
            continue
        flag = saved.get("__grad_error__")
        grad_msg = next((e.get("message") for e in events
                         if e.get("event") == "grad_error" and e.get("case") == i), None)
        if flag is not None and bool(flag.any()):
            ev.grad_error = grad_msg or "gradients could not be computed"
            continue
        for key, want in case.expected_grads.items():
            have = saved.get(key)
            label = key.replace("input:", "gradient of ").replace("param:", "gradient of ")
            if not isinstance(have, torch.Tensor):
                # autograd's None means zero: fine where the reference's gradient is zero too (moe: an unused expert)
                zero = compare(torch.zeros_like(want), want, spec.tolerances["grad"], dtype=want.dtype, what=label)
                ev.grads[key] = zero if zero.ok else Comparison(False, "missing",
                                                                f"{label} is missing (no gradient reached it)")
            else:
                ev.grads[key] = compare(have, want, spec.tolerances["grad"], dtype=want.dtype, what=label)
    return evals


def _verdict(result: Result, spec: Any, evals: list, run_failure: tuple[str, str] | None, events: list) -> None:
    """Phase 4: status and diagnosis: a run-level failure first, then the in-model-only case, then the bugs."""
    from drill.judge.diagnose import GENERIC, diagnose_cases
    from drill.judge.inmodel_verdict import IN_MODEL_ONLY, in_model_note

    load_error = next((e for e in events if e.get("event") == "load_error"), None)
    ends = [e for e in events if e.get("event") == "end"]
    result.tests = [_test_result(ev) for ev in evals]
    if run_failure is not None:
        from drill.judge.diagnose import IMPORT_EXCEPTION

        result.status = STATUS_ERROR if (load_error is not None or not ends) else STATUS_FAIL
        at_import = run_failure[0] == "exception" and load_error is not None
        result.diagnosis = IMPORT_EXCEPTION if at_import else GENERIC[run_failure[0]]
        result.diagnosis_detail = run_failure[1]
        for t in result.tests:
            if t.status == "not_run":
                t.message = t.message or "not run"
        if result.status == STATUS_ERROR and run_failure[0] in ("not_implemented", "policy_violation", "forbidden_op"):
            result.status = STATUS_FAIL
        return
    if all(ev.passed for ev in evals):
        result.status = STATUS_PASS
        return
    result.status = STATUS_FAIL
    unit = [ev for ev in evals if not ev.case.ctx.get("in_model")]
    if all(ev.passed for ev in unit):  # only the in-model run disagrees: no bug signature applies there
        ev = next(ev for ev in evals if not ev.passed)
        failed_forward = ev.forward is not None and not ev.forward.ok
        message = ev.forward.message if failed_forward else ev.record.get("message", ev.status)
        result.diagnosis = IN_MODEL_ONLY
        result.diagnosis_detail = (f"the unit tests pass, but inside the reference decoder: {message}"
                                   f" in test '{ev.case.name}'")
        return
    if getattr(spec, "verdict", None) is not None:  # the spec words its own report (debug_gpt)
        result.diagnosis, result.diagnosis_detail = spec.verdict(evals)
        result.tests = [_test_result(ev) for ev in evals]  # the verdict may set a test aside (not_run + why)
        for t, ev in zip(result.tests, evals, strict=True):
            if ev.status == "not_run" and ev.record.get("message"):
                t.message = str(ev.record["message"])
        return
    verdict = diagnose_cases(spec, unit, _tolerance_of(spec))
    result.diagnosis, result.diagnosis_detail = verdict.diagnosis, verdict.detail + in_model_note(evals)
    result.diagnosis_partial = verdict.partial
    result.diagnosis_second = verdict.second


def _audits(result: Result, events: list, wanted: bool) -> None:
    """Phase 5: the advisory audits' lines on a pass; an audit that measured nothing says "could not measure"."""
    if result.status != STATUS_PASS or not wanted:
        return
    from drill.judge.audit import judge
    from drill.judge.boundary import audit_data_ok

    seen = [e for e in events if e.get("event") == "audit"]
    if not seen:
        result.audit.append("audit: could not measure (the audit did not report)")
        result.unmeasured = True
    for e in seen:
        name = str(e.get("name"))
        if "data" in e and audit_data_ok(e["data"]):
            lines, notes, measured = judge(name, e["data"])
            result.audit += lines
            result.advisories += notes
            result.unmeasured |= not measured
        else:
            err = e.get("error") or {}
            what = f"{err.get('type', err.get('status', ''))} {err.get('message', '')}".strip() or "no data"
            result.audit.append(f"{name} audit: could not measure ({what})")
            result.unmeasured = True


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
    from drill.judge.diagnose import case_size
    from drill.judge.inmodel_verdict import label

    result = _test_result_of(ev)
    result.in_model = label(ev.case)
    result.size = case_size(ev.case)
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
        if fw.worst_index is not None and fw.reason != "values":  # a "values" message names the worst already
            at = f"worst element {list(fw.worst_index)}" if fw.worst_index else "the value"  # () for a 0-dim output
            detail += f"; {at}: got {_num(fw.worst_got)}, expected {_num(fw.worst_expected)}"
        return TestResult(case.name, "fail", fw.message, fw.max_abs, fw.max_rel, detail, fw.brief,
                          nonfinite=fw.nonfinite)
    if ev.grad_error is not None:
        return TestResult(case.name, "fail", f"gradients: {ev.grad_error}", fw.max_abs, fw.max_rel, detail)
    bad = [c for c in ev.grads.values() if not c.ok]
    if bad:
        if bad[0].worst_index is not None and bad[0].reason != "values":
            at = f"worst gradient element {list(bad[0].worst_index)}" if bad[0].worst_index else "the gradient"
            detail += f"; {at}: got {_num(bad[0].worst_got)}, expected {_num(bad[0].worst_expected)}"
        return TestResult(case.name, "fail", bad[0].message, fw.max_abs, fw.max_rel, detail, bad[0].brief)
    shares = [c.tol_used for c in (fw, *ev.grads.values()) if c.tol_used is not None]
    return TestResult(case.name, "pass", "", fw.max_abs, fw.max_rel, detail, tol_used=max(shares, default=None))


def _num(x: float) -> str:
    """An element for the reader: whole numbers (ffn_hidden_dim's sizes) as integers, others to 6 digits."""
    return f"{int(x)}" if math.isfinite(x) and x.is_integer() and abs(x) < 1e15 else f"{x:.6g}"


# A test is slow when its CPU time is SLOW_RATIO times the reference's on the same inputs in this run (and at
# least SLOW_FLOOR_S). CPU time, not the wall clock: a loaded machine makes every test wait for a core without
# using more CPU (a fixed 2 s of wall clock fired on loop-free code under load). Python loops over elements
# cost 1000x and more on these sizes; loop-free code stays within ~10x (the child's first tests pay torch's
# warm-up). A reference under 1 ms counts as 1 ms: below that the ratio is timer noise.
SLOW_RATIO = 50.0
SLOW_FLOOR_S = 1.0


def slow_test(evals: list) -> str | None:
    """The "slow" advisory for the test furthest past SLOW_RATIO x its reference's CPU time, or None."""
    worst, worst_ratio = None, SLOW_RATIO
    for ev in evals:
        used, ref = ev.record.get("cpu"), ev.case.reference_s
        if ev.case.judge is not None:  # a measurement (bpe's speed audit times itself against the reference)
            continue
        if not isinstance(used, (int, float)) or ref is None or used < SLOW_FLOOR_S:
            continue
        ratio = used / max(ref, 1e-3)
        if ratio > worst_ratio:
            worst, worst_ratio = ev, ratio
    if worst is None:
        return None
    used, ref = worst.record["cpu"], worst.case.reference_s
    return (f"slow: test '{worst.case.name}' used {_seconds(used)} of CPU, {worst_ratio:.0f}x the reference's "
            f"{_seconds(ref)} on the same inputs (Python loops over elements?)")


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _advisories(spec: Any, cases: list, evals: list, outcome: Any) -> list[str]:
    notes: list[str] = []
    if outcome.output_tail.strip():
        notes.append("the file printed output while being graded (graded code should be silent)")
    slow = slow_test(evals)
    if slow is not None:
        notes.append(slow)
    if spec.advise is not None:
        notes.extend(spec.advise(cases, [ev.got for ev in evals]))
    return notes
