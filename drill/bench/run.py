"""The parent's side of `drill bench`: refuse failing files, run the child, assemble the report.

`bench_file` is what the CLI calls; it is plain Python (tests call it too).
Order matters for speed: the benchmark's child is spawned first, so its
`import torch` overlaps the `drill check` run that must pass before anything
is timed; it then waits on stdin for its job.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drill.bench import stats
from drill.bench.workloads import WORKLOADS, Workload
from drill.errors import UserError

DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")
IMPLS = ("learner", "fused", "math")
IMPL_LABELS = {"learner": "yours", "fused": "fused ref", "math": "math ref"}
# What can end a ladder early (`stop_reason`); the child reports the first four.
STOP_REASONS = ("memory", "size_budget", "timeout", "learner", "max_size", "limit")

# Rounds whose interquartile range exceeds this fraction of their median are called noisy: on a quiet
# machine 3-25 rounds of one call spread by a few percent; a busy one (a build, another benchmark) by
# tens of percent, and then a ratio of two medians is only a rough guide.
NOISY_SPREAD = 0.25
# The fused reference growing faster than the expected exponent by more than this is worth a note
# (it is the machine, e.g. an RMSNorm input that outgrows the caches, not anybody's algorithm).
REFERENCE_DRIFT = 0.35

CHILD_SCRIPT = Path(__file__).with_name("child.py")
BASELINE_MB = 450  # what the child holds before any input exists: torch, the reference, the learner's module
STARTUP_SLACK_S = 15.0  # beyond --timeout: the child's own set-up (peak-bandwidth copy, module build)
# Host-memory limit of the benchmark process when --memory-mb is not given. On CUDA the inputs live on
# the device (whose budget is its own free memory), but the CUDA context, cuBLAS/cuDNN and the kernels
# of libtorch_cuda take 1-3 GB of host RSS by themselves, so the CPU default would kill a healthy run.
DEFAULT_MEMORY_MB = {"cpu": 4096, "cuda": 16384}

# Exit codes of `drill bench` (see drill/bench/README.md).
# 0: every size ran, or the ladder stopped on purpose (memory, --size-budget, --timeout predicted, --max-size)
EXIT_MEASURED = 0
EXIT_LEARNER = 1  # the file fails drill check, or your code failed, hung or ran out of memory during the run
EXIT_INCOMPLETE = 3  # a limit cut the run short while the reference (not your code) was running


@dataclass(frozen=True)
class BenchOptions:
    """The CLI's flags. `device`/`dtype` None means: best available / fp32 on CPU, bf16 on CUDA."""

    device: str | None = None
    dtype: str | None = None
    max_size: int | None = None
    memory_mb: int | None = None  # None: DEFAULT_MEMORY_MB of the device
    timeout_s: float = 120.0
    size_budget_s: float = 15.0
    threads: int = 1
    seed: int | None = None
    target_s: float = 0.25  # timed seconds per implementation per size (repetitions adapt to it)
    memory_fraction: float = 0.6  # of the memory budget a size's naive estimate may use


class BenchRefused(Exception):
    """The file did not pass `drill check`; carries the check's Result."""

    def __init__(self, result: Any) -> None:
        super().__init__(result.status)
        self.result = result


@dataclass
class ImplResult:
    status: str  # ok | skipped | not_run | oom | forbidden_op | exception | ...
    median_s: float | None = None
    q1_s: float | None = None
    q3_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    reps: int = 0
    peak_bytes: int | None = None
    message: str = ""
    line: int | None = None


@dataclass
class SizeRow:
    size: int
    results: dict[str, ImplResult]
    elapsed_s: float = 0.0


@dataclass
class BenchReport:
    exercise: str
    file: str
    device: str
    dtype: str
    threads: int
    seed: int
    workload: Workload
    dims: dict[str, Any]
    check_seed: int
    rows: list[SizeRow] = field(default_factory=list)
    device_name: str = ""
    torch_version: str = ""
    peak_bandwidth: float | None = None  # bytes/s, CUDA only: a device copy measured in the run
    datasheet_bandwidth: float | None = None  # bytes/s, CUDA only: the vendor's figure (device.datasheet_bandwidth)
    stopped: str = ""  # why the ladder ended early ("" = every size ran)
    stop_reason: str = ""  # what ended it: one of STOP_REASONS, "" = every size ran
    learner_error: str = ""  # a failure of the learner's code during the benchmark
    cut_short: bool = False  # a limit (time, memory, CPU) or a crash ended the run, not the ladder's own rules
    host_peak_rss_mb: float | None = None  # the benchmark process's peak resident memory (from the child)
    sandbox: dict[str, Any] = field(default_factory=dict)  # isolation: {sandbox, reason, audit_hook, seccomp}
    output_tail: str = ""
    elapsed_s: float = 0.0

    @property
    def exit_code(self) -> int:
        """0 measured (a ladder stopped on purpose included); 1 your code failed; 3 cut short by a limit."""
        if self.learner_error:
            return EXIT_LEARNER
        if self.cut_short:
            return EXIT_INCOMPLETE
        return EXIT_MEASURED

    # -- derived numbers -------------------------------------------------------------

    def series(self, impl: str, what: str = "median_s") -> tuple[list[int], list[float]]:
        pts = [(r.size, getattr(r.results[impl], what)) for r in self.rows
               if impl in r.results and r.results[impl].status == "ok"]
        return [p[0] for p in pts], [p[1] for p in pts]

    def exponent(self, impl: str, what: str = "median_s") -> float | None:
        return stats.fit_exponent(*self.series(impl, what))

    def throughput(self, size: int, res: ImplResult) -> float | None:
        """Tokens per second of one call."""
        if res.status != "ok" or not res.median_s:
            return None
        return self.workload.tokens(size, self.dims) / res.median_s

    def bandwidth(self, size: int, res: ImplResult) -> float | None:
        """Achieved bytes/s counting the minimum traffic of the operation (None where not meaningful)."""
        if self.workload.bytes_moved is None or res.status != "ok" or not res.median_s:
            return None
        return self.workload.bytes_moved(size, self.dims, _elem(self.dtype)) / res.median_s

    def ratio(self, row: SizeRow, impl: str) -> float | None:
        fused, res = row.results.get("fused"), row.results.get(impl)
        if not fused or not res or fused.status != "ok" or res.status != "ok" or not fused.median_s:
            return None
        return res.median_s / fused.median_s

    def spread(self, res: ImplResult) -> float | None:
        """IQR / median of one implementation's timed rounds (None when not timed)."""
        if res.status != "ok" or not res.median_s or res.q1_s is None or res.q3_s is None:
            return None
        return (res.q3_s - res.q1_s) / res.median_s

    def is_noisy(self, row: SizeRow, impl: str) -> bool:
        """The ratio of `impl` at this size rests on rounds that disagree a lot (its own or the fused ones)."""
        spreads = [self.spread(row.results[i]) for i in (impl, "fused") if i in row.results]
        return any(s is not None and s > NOISY_SPREAD for s in spreads)

    def noisiest(self) -> tuple[int, float] | None:
        """(size, spread) of the widest spread over NOISY_SPREAD among timed results, or None."""
        worst = max(((row.size, s) for row in self.rows for res in row.results.values()
                     if (s := self.spread(res)) is not None), key=lambda p: p[1], default=None)
        return worst if worst is not None and worst[1] > NOISY_SPREAD else None

    def warnings(self) -> list[str]:
        """Plain-language flags: the learner's time or memory grows faster than the references'.

        The bar for time is the *slowest-growing* of what an efficient solution
        may show: the expected exponent, and both reference paths (the math
        path is the textbook algorithm; matching it is no fault, even when
        cache effects make it grow faster than the ideal on large sizes).
        """
        notes = []
        label = self.workload.size_label
        mine = self.exponent("learner")
        refs = [x for x in (self.exponent("fused"), self.exponent("math")) if x is not None]
        bar = max([self.workload.expected_exponent, *refs])
        if mine is not None and mine > bar + 0.35:
            notes.append(
                f"your time grows as {label}^{mine:.2f}, faster than the references and the expected "
                f"{label}^{self.workload.expected_exponent:g}: look for work redone on every call "
                "(recomputing the past) or a Python loop over positions"
            )
        fused = self.exponent("fused")
        expected = self.workload.expected_exponent
        if fused is not None and fused > expected + REFERENCE_DRIFT:
            where = ("the GPU's L2 cache" if self.device == "cuda"
                     else "the CPU caches, and each call's fresh output pays page faults")
            notes.append(
                f"the fused reference itself grows as {label}^{fused:.2f} here, not the expected {label}^{expected:g}: "
                f"the larger sizes outgrow {where}; compare ratios to the fused reference, not exponents"
            )
        noisy = self.noisiest()
        if noisy is not None:
            size, spread = noisy
            notes.append(
                f"timings are noisy (the spread between rounds reaches {100 * spread:.0f}% of the median at "
                f"{label}={size}; ratios marked * are rough): the machine is busy, rerun when it is quiet"
            )
        mem_mine, mem_fused = self.exponent("learner", "peak_bytes"), self.exponent("fused", "peak_bytes")
        if mem_mine is not None and mem_fused is not None and mem_mine > mem_fused + 0.5:
            notes.append(
                f"your peak memory grows as {label}^{mem_mine:.2f}, the fused reference's as {label}^{mem_fused:.2f}: "
                f"you materialise something the fused kernel never holds ({self.workload.memory_note})"
            )
        return notes

    def to_json(self) -> dict[str, Any]:
        """The --json document (format in drill/bench/README.md)."""
        sizes = []
        for row in self.rows:
            results = {}
            for impl, res in row.results.items():
                bw = self.bandwidth(row.size, res)
                results[impl] = {
                    "status": res.status,
                    "median_s": res.median_s,
                    "q1_s": res.q1_s,
                    "q3_s": res.q3_s,
                    "min_s": res.min_s,
                    "max_s": res.max_s,
                    "reps": res.reps,
                    "tokens_per_s": self.throughput(row.size, res),
                    "bandwidth_gb_s": None if bw is None else bw / 1e9,
                    "bandwidth_fraction": None if bw is None or not self.peak_bandwidth else bw / self.peak_bandwidth,
                    "datasheet_fraction": None if bw is None or not self.datasheet_bandwidth
                    else bw / self.datasheet_bandwidth,
                    "peak_bytes": res.peak_bytes,
                    "ratio_to_fused": self.ratio(row, impl),
                    "message": res.message,
                }
            sizes.append({"size": row.size, "elapsed_s": round(row.elapsed_s, 3), "results": results})
        return {
            "exercise": self.exercise,
            "file": self.file,
            "device": self.device,
            "device_name": self.device_name,
            "dtype": self.dtype,
            "threads": self.threads,
            "torch": self.torch_version,
            "seed": self.seed,
            "check_seed": self.check_seed,
            "size_name": self.workload.size_name,
            "size_label": self.workload.size_label,
            "dims": dict(self.dims),
            "peak_bandwidth_gb_s": None if self.peak_bandwidth is None else self.peak_bandwidth / 1e9,
            "datasheet_bandwidth_gb_s": None if self.datasheet_bandwidth is None else self.datasheet_bandwidth / 1e9,
            "sizes": sizes,
            "exponents": {impl: self.exponent(impl) for impl in IMPLS},
            "memory_exponents": {impl: self.exponent(impl, "peak_bytes") for impl in IMPLS},
            "expected_exponent": self.workload.expected_exponent,
            "expected_note": self.workload.expected_note,
            "warnings": self.warnings(),
            "stopped": self.stopped or None,
            "stop_reason": self.stop_reason or None,
            "learner_error": self.learner_error or None,
            "cut_short": self.cut_short,
            "exit_code": self.exit_code,
            "host_peak_rss_mb": self.host_peak_rss_mb,
            "sandbox": dict(self.sandbox) or None,
            "elapsed_s": round(self.elapsed_s, 3),
        }


def _elem(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


# -- validation (no torch) ------------------------------------------------------------


def validate(path: Path, exercise: str | None, opts: BenchOptions) -> str:
    """Every usage problem, before anything is started; returns the exercise name."""
    from drill.judge.registry import resolve_exercise

    if not path.is_file():
        raise UserError("no such file", str(path))
    name = resolve_exercise(path, exercise)
    if name not in WORKLOADS:
        raise UserError(f"no benchmark for exercise '{name}'; benchmarked: {', '.join(WORKLOADS)}")
    if opts.device is not None and opts.device not in DEVICES:
        raise UserError(f"unknown device '{opts.device}'; valid: {', '.join(DEVICES)}")
    if opts.dtype is not None and opts.dtype not in DTYPES:
        raise UserError(f"unknown dtype '{opts.dtype}'; valid: {', '.join(DTYPES)}")
    if opts.threads < 1:
        raise UserError(f"--threads must be at least 1, got {opts.threads}")
    return name


def resolve_device(requested: str | None) -> str:
    """`cuda` when asked for and present, else an error; None picks CUDA when available."""
    import warnings

    import torch

    with warnings.catch_warnings():  # a broken driver warns on stderr; the one-line error below says it all
        warnings.simplefilter("ignore")
        available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        raise UserError("--device cuda: no CUDA device is available here (torch.cuda.is_available() is False)")
    if requested is None:
        return "cuda" if available else "cpu"
    return requested


def ladder(wl: Workload, device: str, max_size: int | None) -> list[int]:
    sizes = [s for s in wl.ladder(device) if max_size is None or s <= max_size]
    if not sizes:
        smallest = min(wl.ladder(device))
        raise UserError(f"--max-size {max_size} is below the smallest size of the ladder ({wl.size_label}={smallest})")
    return sizes


# -- the run ------------------------------------------------------------------------------


def bench_file(path: str | Path, exercise: str | None = None, opts: BenchOptions | None = None) -> BenchReport:
    """Check the file, then benchmark it. Raises UserError (usage) or BenchRefused (check failed)."""
    import time

    t0 = time.monotonic()
    opts = opts or BenchOptions()
    path = Path(path)
    name = validate(path, exercise, opts)
    wl = WORKLOADS[name]

    from dataclasses import replace

    from drill.judge.devices import gpu_nodes_visible
    from drill.judge.runner import Child, Limits

    limits = Limits(
        timeout_s=opts.timeout_s + STARTUP_SLACK_S,
        cpu_s=(opts.timeout_s + STARTUP_SLACK_S) * opts.threads + 60.0,
        memory_mb=opts.memory_mb if opts.memory_mb is not None else DEFAULT_MEMORY_MB["cpu"],
    )
    # The child runs the learner's file from a copy, in the sandbox and under the audit hook, as `drill check`'s
    # child does (issue 30: it once imported the original outside both, and a file wrote the progress store).
    gpu = opts.device != "cpu" and gpu_nodes_visible()
    child = Child(limits, script=CHILD_SCRIPT, learner=path, device="auto" if gpu else "cpu")  # its torch import
    try:  # overlaps the check below
        device = resolve_device(opts.device)
        sizes = ladder(wl, device, opts.max_size)
        if opts.memory_mb is None and device != "cpu":
            # The child applies its data-segment limit on CPU only; the parent's RSS watch reads child.limits.
            limits = child.limits = replace(limits, memory_mb=DEFAULT_MEMORY_MB[device])
        memory_mb = limits.memory_mb
        from drill.judge.client import grade_one  # the warm grading server when it can be used

        result = grade_one(path, name)
        if result.status != "pass":
            raise BenchRefused(result)
        if child.learner_copy is None or child.learner_copy.read_bytes() != path.read_bytes():
            raise UserError(f"{path} changed while it was being checked; run drill bench again")
        seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2**31)
        dtype = opts.dtype or ("bfloat16" if device == "cuda" else "float32")
        dims = wl.dims(device)
        job = {
            "exercise": name,
            "learner": str(path.resolve()),
            "device": device,
            "dtype": dtype,
            "threads": opts.threads,
            "dims": dims,
            "sizes": sizes,
            "seed": seed,
            "target_s": opts.target_s,
            "size_budget_s": opts.size_budget_s,
            "timeout_s": opts.timeout_s,
            "memory_mb": memory_mb,
            "baseline_mb": BASELINE_MB,
            "memory_fraction": opts.memory_fraction,
            "forbidden": list(_spec_attr(name, "forbidden")),
            "forbidden_classes": list(_spec_attr(name, "forbidden_classes")),
        }
        child.send(job, {})
        outcome = child.wait()
        running = _read_running(child.output_file("running.json"))
    finally:
        child.cleanup()
    report = BenchReport(
        exercise=name, file=str(path), device=device, dtype=dtype, threads=opts.threads, seed=seed,
        workload=wl, dims=dims, check_seed=result.seed,
    )
    _read_events(report, outcome, limits, wl, running)
    full = wl.ladder(device)
    if not report.stopped and report.rows and report.rows[-1].size == sizes[-1] and sizes[-1] < max(full):
        report.stopped = f"stopped at --max-size {opts.max_size} (the ladder goes on to {wl.size_label}={max(full)})"
        report.stop_reason = "max_size"
    report.elapsed_s = time.monotonic() - t0
    return report


def _spec_attr(name: str, attr: str) -> tuple[str, ...]:
    from drill.judge.registry import load_spec

    return tuple(getattr(load_spec(name), attr, ()))


def _read_running(path: Path) -> dict[str, Any] | None:
    """The child's last "now calling" marker ({size, impl, phase}), or None; data, checked for shape."""
    import json

    try:
        raw = json.loads(path.read_bytes().decode("utf-8", "replace").strip() or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("size"), int) or not isinstance(raw.get("impl"), str):
        return None
    return {"size": raw["size"], "impl": raw["impl"], "phase": str(raw.get("phase", ""))}


def _read_events(report: BenchReport, outcome: Any, limits: Any, wl: Workload,
                 running: dict[str, Any] | None = None) -> None:
    """Fill the report from the child's records; the child's words are data, checked for shape.

    When a limit (or a crash) ended the run, `running` (the child's last
    marker) says who was being called: your code -> `learner_error` (exit 1),
    a reference or the harness -> `cut_short` (exit 3). A run killed by
    `--timeout` is never reported as a success.
    """
    report.output_tail = outcome.output_tail
    prepared: dict[tuple[int, str], float] = {}  # (size, impl) -> seconds of one call
    for ev in outcome.events:
        kind = ev.get("event")
        if kind == "env":
            report.device_name = str(ev.get("device_name", ""))
            report.torch_version = str(ev.get("torch", ""))
            bw = ev.get("peak_bandwidth")
            report.peak_bandwidth = float(bw) if isinstance(bw, (int, float)) and bw > 0 else None
            sheet = ev.get("datasheet_bandwidth")
            report.datasheet_bandwidth = float(sheet) if isinstance(sheet, (int, float)) and sheet > 0 else None
        elif kind == "load_error":
            report.learner_error = _describe_failure(ev, "while importing the file")
            report.stopped = "stopped before the first size: your file failed to load in the benchmark"
            report.stop_reason = "learner"
        elif kind == "prepared" and isinstance(ev.get("size"), int) and isinstance(ev.get("warmup_s"), (int, float)):
            prepared[(ev["size"], str(ev.get("impl")))] = float(ev["warmup_s"])
        elif kind == "size" and isinstance(ev.get("results"), dict):
            row = SizeRow(int(ev["size"]), {}, float(ev.get("elapsed_s", 0.0)))
            for impl in IMPLS:
                raw = ev["results"].get(impl)
                row.results[impl] = _impl_result(raw) if isinstance(raw, dict) else ImplResult("not_run")
            res, fused = row.results["learner"], row.results["fused"]
            if res.status not in ("ok", "skipped", "not_run") and not report.learner_error:
                report.learner_error = _describe_failure(
                    {"status": res.status, "message": res.message, "line": res.line}, f"at {wl.size_label}={row.size}"
                )
                if res.status == "oom" and fused.status == "ok" and fused.peak_bytes:
                    needed = fused.peak_bytes / 2**20
                    report.learner_error += f" (the fused reference needed {needed:.0f} MB at this size)"
            report.rows.append(row)
        elif kind == "stop" and not report.stopped:
            report.stopped = str(ev.get("message", ""))
            reason = ev.get("reason")
            report.stop_reason = reason if reason in STOP_REASONS else ""
        elif kind == "sandbox" and isinstance(ev.get("sandbox"), str):
            report.sandbox = {"sandbox": ev["sandbox"], "reason": str(ev.get("reason", ""))[:200],
                              "audit_hook": ev.get("audit_hook") is True, "seccomp": ev.get("seccomp") == "on"}
        elif kind == "denied" and not report.learner_error:
            report.learner_error = f"{str(ev.get('what', ''))[:80]} is not allowed in graded code"
        elif kind == "done" and isinstance(ev.get("host_peak_rss_mb"), (int, float)):
            report.host_peak_rss_mb = round(float(ev["host_peak_rss_mb"]), 1)
    if outcome.killed_for in ("time_limit", "memory_limit", "cpu_limit", "startup") or not outcome.finished:
        _explain_cut(report, outcome, limits, wl, running, prepared)
    if outcome.leftovers and not report.learner_error:
        report.learner_error = f"your code left {len(outcome.leftovers)} process(es) running (killed)"


def _explain_cut(report: BenchReport, outcome: Any, limits: Any, wl: Workload, running: dict[str, Any] | None,
                 prepared: dict[tuple[int, str], float]) -> None:
    """A limit or a crash ended the run: say which, at which size, and whose code was running."""
    import signal

    killed_for = outcome.killed_for
    if killed_for is None and outcome.returncode == -signal.SIGALRM:
        killed_for = "time_limit"  # the child's own --timeout alarm
    what = {
        "time_limit": f"the overall time limit (--timeout {limits.timeout_s - STARTUP_SLACK_S:g} s)",
        "memory_limit": f"the memory limit ({limits.memory_mb} MB, --memory-mb)",
        "cpu_limit": "the CPU-time limit",
        "startup": "a start-up failure of the benchmark process",
    }.get(killed_for or "", f"the benchmark process ending early (exit code {outcome.returncode})")
    size = running["size"] if running else None
    impl = running["impl"] if running else ""
    at = f" at {wl.size_label}={size}" if size is not None else ""
    if impl == "learner":
        fused_s = prepared.get((size, "fused"))
        ref = ""
        if fused_s is not None:
            from drill.bench.stats import fmt_time

            ref = f"; the fused reference took {fmt_time(fused_s)} per call there"
        verb = {"time_limit": "did not finish", "cpu_limit": "did not finish",
                "memory_limit": "went over the memory limit"}.get(killed_for or "", "stopped the run")
        report.learner_error = f"your code {verb}{at}: {what} ended the run{ref}"
        report.stopped = f"cut short by {what}{at}, in your code; sizes measured before that are shown"
    else:
        who = {"fused": "the fused reference", "math": "the math reference", "inputs": "building the inputs"}.get(impl)
        during = f" while {who} was running" if who and impl != "inputs" else (f" while {who}" if who else "")
        report.stopped = (f"cut short by {what}{at}{during}; sizes measured before that are shown "
                          "(raise --timeout or lower --max-size)")
    report.cut_short = True
    report.stop_reason = "limit"


def _impl_result(raw: dict) -> ImplResult:
    def num(key: str) -> float | None:
        v = raw.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    peak = num("peak_bytes")
    line = raw.get("line")
    return ImplResult(
        status=str(raw.get("status", "not_run")),
        median_s=num("median_s"), q1_s=num("q1_s"), q3_s=num("q3_s"), min_s=num("min_s"), max_s=num("max_s"),
        reps=int(raw.get("reps", 0) or 0),
        peak_bytes=None if peak is None else int(peak),
        message=str(raw.get("message", ""))[:300],
        line=line if isinstance(line, int) else None,
    )


def _describe_failure(ev: dict, where: str) -> str:
    status = ev.get("status", "exception")
    msg = str(ev.get("message", "")) or status
    line = ev.get("line")
    at = f" (line {line})" if isinstance(line, int) else ""
    if status in ("oom", "mismatch"):  # their messages name the size already
        return msg
    return f"{msg}{at} {where}"
