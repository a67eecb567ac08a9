"""The benchmark's child process: times the learner's file and the reference, size by size.

Run as a script by `drill.judge.runner.Child` (same spawning, limits, process
group, escape sweep and wall-clock kill as `drill check`):
`python -I -B child.py --cpu=S --data=BYTES --fsize=BYTES`, job on stdin
(JSON), results appended to `status.jsonl` in the job's protocol folder,
which the learner's code is never told about.

Order of events, and why:
1. CPU-time and file-size limits first; the data limit is applied after the
   job is read, and only on CPU (CUDA's driver maps large private regions,
   which a data limit would break; the parent's resident-memory watch still
   applies).
2. torch, the reference model and the benchmark's own modules are imported
   BEFORE the learner's file. Then every `drill` module is dropped from
   `sys.modules` and `import drill` is trapped (the grader's hook), so the
   learner's code can neither import the reference nor reach it by name.
3. The learner's file is imported with the grader's forbidden-op traps on.
4. For each size: inputs are built once and shared; the fused reference, the
   math reference and the learner's code each get a memory-audit call, a
   warm-up call and several timed calls, interleaved per size so that a
   change in machine load hits all three alike. The learner's audit call
   runs with the forbidden-op traps on as well; the timed calls run without
   any mode (a Python hook per op would distort the very thing measured).
5. The ladder stops at the first size that would not fit the memory budget
   (naive estimate), that failed, or after a size that took longer than the
   per-size budget (or is predicted to).

Everything written here is data for the parent; nothing in it is a verdict.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import sys
import time

_OPTS = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)


def _limit_early() -> None:
    if "cpu" in _OPTS:
        cpu = int(_OPTS["cpu"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if "fsize" in _OPTS:
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(_OPTS["fsize"]), int(_OPTS["fsize"])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _enter_sandbox() -> dict:
    """Layer 3, as for `drill check`: fresh namespaces, entered before torch is imported (a single thread).

    `--sandbox=<spec>` is there when the parent could build one (sandbox.spec with drill's folders shown
    read-only: this script imports them before the learner's file). Returns what is active.
    """
    if "sandbox" not in _OPTS:
        return {"sandbox": "off", "reason": "not requested"}
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "judge", "sandbox_child.py")
    spec = importlib.util.spec_from_file_location("_drill_sandbox_child", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(_OPTS["sandbox"], encoding="utf-8") as fh:
        plan = json.load(fh)
    return mod.enter_or_leave(plan)


SANDBOX: dict = {"sandbox": "off", "reason": "not requested"}
if __name__ == "__main__":
    _limit_early()
    SANDBOX = _enter_sandbox()

import torch  # noqa: E402

WORK = ""
IMPLS = ("fused", "math", "learner")


def record(event: dict) -> None:
    with open(os.path.join(WORK, "status.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(event) + "\n")


def _load_judge_child():
    """The grader's child module (traps, error classification), loaded by path: stdlib + torch only."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "judge", "child.py")
    spec = importlib.util.spec_from_file_location("_drill_judge_child", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- measurement ---------------------------------------------------------------------


def measure_peak(call, backend, live_bytes_cls, traps=()) -> tuple[int, object]:
    """Peak extra bytes of one call (its output included) and the output: CUDA allocator stats, or the CPU audit."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        for trap in traps:
            stack.enter_context(trap)
        if backend is not None:
            return CUDA_PEAK(call, backend)
        audit = stack.enter_context(live_bytes_cls())
        out = call()
        return int(audit.peak), out


CUDA_PEAK = None  # drill.bench.device.cuda_peak_bytes, bound in main() before drill is hidden


class Running:
    """Which implementation is being called right now, at which size, in a fixed-size file.

    Written with one pwrite before every call (no open/close, and never inside
    a timed region), so that when the parent kills a hung run it can tell a
    learner's hang from a slow reference.
    """

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def mark(self, size: int, impl: str, phase: str) -> None:
        data = json.dumps({"size": size, "impl": impl, "phase": phase}).encode()
        os.pwrite(self.fd, data.ljust(128), 0)


def agreement(got, want) -> float:
    """max |got - want| / max |want| (normwise), in fp32; inf when shapes differ or got is not finite."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
        return float("inf")
    g, w = got.detach().float(), want.detach().float()
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    return float((g - w).abs().max() / w.abs().max().clamp_min(1e-6))


# Outputs of your code and the fused reference must agree this closely (normwise) at every size.
# Generous: this catches a wrong answer at benchmark sizes (a file that passes drill check at
# small sizes and cuts corners at large ones, or breaks in half precision), not rounding.
AGREEMENT_TOL = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 6e-2}


def is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    return (
        isinstance(exc, MemoryError)
        or (oom_type is not None and isinstance(exc, oom_type))
        or "can't allocate memory" in text
        or "not enough memory" in text
        or "out of memory" in text
    )


def free_device_memory(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- one implementation at one size --------------------------------------------------------


class Stop(Exception):
    """This implementation cannot go on (error, forbidden op, out of memory): skip it at larger sizes."""

    def __init__(self, status: str, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.line = status, message, line


class Contender:
    """One implementation at one size: its call, its audit and warm-up readings, its timed samples."""

    def __init__(self, impl: str, make_call, traps=()) -> None:
        self.impl, self.make_call, self.traps = impl, make_call, traps
        self.call = None
        self.output = None  # the audit call's output, kept only when it is compared
        self.result: dict = {}
        self.samples: list[float] = []
        self.reps = 0

    def prepare(self, backend, timer, stats, live_bytes_cls, target_s: float, running: Running, size: int,
                keep_output: bool = False) -> None:
        """Build (untimed), one audit call for peak memory, one warm-up call that sizes the repetitions.

        On CUDA an extra untimed call comes first: first-use costs (lazily
        loaded kernels, the cuBLAS workspace, which the caching allocator
        keeps) would otherwise land in the first implementation's peak memory.
        """
        running.mark(size, self.impl, "setup")
        t0 = time.perf_counter()
        self.call = self.make_call()
        setup_s = time.perf_counter() - t0
        if backend is not None:
            running.mark(size, self.impl, "first use")
            out = self.call()
            backend.synchronize()
            del out
        running.mark(size, self.impl, "audit")
        peak, out = measure_peak(self.call, backend, live_bytes_cls, self.traps)
        if keep_output:
            self.output = out
        del out
        running.mark(size, self.impl, "warm-up")
        first = timer.once(self.call)
        self.reps = stats.choose_reps(first, target_s)
        self.result = {"status": "ok", "setup_s": setup_s, "warmup_s": first, "peak_bytes": peak}

    def finish(self, stats) -> dict:
        s = stats.summarize(self.samples)
        self.result.update(median_s=s.median, q1_s=s.q1, q3_s=s.q3, min_s=s.min, max_s=s.max, reps=s.n)
        self.call = None
        return self.result


# A size is started only when its predicted wall time, times this, fits in what is left of --timeout:
# running past the deadline is a kill (exit 1 or 3), so a prediction that is a bit low costs far more
# than one that is a bit high (cache effects make large sizes grow faster than the fitted exponent).
TIMEOUT_MARGIN = 1.5


def _predict_next(wl, results: dict, history: dict, active: dict, size: int, nxt: int, elapsed: float,
                  target_s: float, extra_calls: int, stats) -> float:
    """Wall seconds of the next size: every implementation still running, at its own growth.

    Each one's growth is the expected exponent, or its own fitted one when
    that is worse (a fit over >= 3 sizes, capped at 3: one noisy pair of
    sizes must not end the ladder). `history` gets this size's medians.
    """
    per_call, exponents, explained = {}, {}, 0.0
    for impl, res in results.items():
        if res.get("status") != "ok" or not active.get(impl):
            continue
        history[impl].append((size, res["median_s"]))
        fitted = stats.fit_exponent([h[0] for h in history[impl]], [h[1] for h in history[impl]])
        per_call[impl] = res["median_s"]
        exponents[impl] = max(wl.expected_exponent, min(fitted or 0.0, 3.0))
        explained += res["median_s"] * (extra_calls + res["reps"])
    return stats.predict_size_wall(per_call, exponents, size, nxt, target_s, elapsed - explained, extra_calls)


# -- the run, phase by phase ---------------------------------------------------------------


def _limit_late(job: dict) -> None:
    """The data limit (CPU only, see step 1) and the thread count, once the job is known."""
    if job["device"] != "cuda" and "data" in _OPTS:
        resource.setrlimit(resource.RLIMIT_DATA, (int(_OPTS["data"]), int(_OPTS["data"])))
    torch.set_num_threads(int(job["threads"]))


class Machine:
    """The device, dtype, timer and memory budget of this run, set up before the learner's code exists
    (and after the trusted imports, so the device's free memory is measured with them loaded)."""

    def __init__(self, job: dict) -> None:
        global CUDA_PEAK
        from drill.bench import device as measure

        self.device = torch.device("cuda", 0) if job["device"] == "cuda" else torch.device("cpu")
        self.dtype = getattr(torch, job["dtype"])
        CUDA_PEAK = measure.cuda_peak_bytes
        self.backend = None
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.cuda.init()
            self.backend = measure.CudaBackend(self.device)
        self.timer = measure.Timer(self.backend)  # on CUDA it holds the L2-flush buffer from here on
        peak_bw = measure.copy_bandwidth(self.backend, self.timer) if self.backend is not None else None
        datasheet = None
        if self.backend is not None:
            free, _total = self.backend.mem_get_info()
            self.budget = measure.memory_budget(free, job["memory_fraction"])
            name = torch.cuda.get_device_name(self.device)
            props = torch.cuda.get_device_properties(self.device)
            datasheet = measure.datasheet_bandwidth(name, getattr(props, "memory_clock_rate", None),
                                                    getattr(props, "memory_bus_width", None))
        else:
            self.budget = int(max(0, job["memory_mb"] - job["baseline_mb"]) * 2**20 * job["memory_fraction"])
            name = f"CPU ({os.cpu_count()} cores)"
        record({
            "event": "env", "device_name": name, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "peak_bandwidth": peak_bw, "datasheet_bandwidth": datasheet, "memory_budget_bytes": self.budget,
        })


class Learner:
    """The learner's module, imported with `drill` hidden and the grader's traps on."""

    def __init__(self, jc, job: dict) -> None:
        self.jc = jc
        self.patterns = job.get("forbidden", [])
        for mod_name in [m for m in sys.modules if m == "drill" or m.startswith("drill.")]:
            del sys.modules[mod_name]
        sys.meta_path.insert(0, jc.BlockDrill())
        jc.trap_classes(job.get("forbidden_classes", []))
        self.module = None
        self.convention = "half"
        self.norm_topk_prob = True

    def traps(self):
        return (self.jc.FunctionTrap(self.patterns), self.jc.DispatchTrap(self.patterns))

    def failure(self, exc: BaseException) -> Stop:
        """What the learner's exception (or a tripped trap) means, as a Stop."""
        jc = self.jc
        info = jc.classify(exc)
        if jc.TRIPPED:
            info = {"status": "forbidden_op", **jc.TRIPPED[0]}
            info["message"] = f"{info['op']} is forbidden in this exercise"
        if info["status"] == "exception":
            info["message"] = f"{info.get('type')}: {info.get('message')}"
        return Stop(info["status"], str(info.get("message", ""))[:300], info.get("line"))

    def raise_if_tripped(self) -> None:
        tripped = self.jc.TRIPPED
        if tripped:
            raise self.jc.ForbiddenOp(tripped[0]["op"], tripped[0]["line"], tripped[0]["source"])

    def load(self) -> bool:
        """Import the file; False (after recording why) when it cannot be."""
        jc = self.jc
        sys.path.insert(0, os.path.dirname(jc.LEARNER))
        jc.TRIPPED.clear()
        try:
            function_trap, dispatch_trap = self.traps()
            with function_trap, dispatch_trap:
                spec = importlib.util.spec_from_file_location("learner_solution", jc.LEARNER)
                module = importlib.util.module_from_spec(spec)
                sys.modules["learner_solution"] = module
                spec.loader.exec_module(module)
            self.raise_if_tripped()
        except BaseException as exc:  # noqa: BLE001 - the learner's failure is data
            stop = self.failure(exc)
            record({"event": "load_error", "status": stop.status, "message": stop.message, "line": stop.line})
            return False
        self.module = module
        convention = getattr(module, "CONVENTION", "half")
        self.convention = convention if convention in ("half", "interleaved") else "half"
        norm_topk_prob = getattr(module, "NORM_TOPK_PROB", True)  # moe: the reference renormalises as the file says
        self.norm_topk_prob = norm_topk_prob if isinstance(norm_topk_prob, bool) else True
        record({"event": "loaded"})
        return True


class Ladder:
    """Size after size: build the inputs, prepare and time every implementation still running,
    then decide whether to go on."""

    def __init__(self, job: dict, machine: Machine, learner: Learner, trusted: dict, running: Running) -> None:
        self.job, self.machine, self.learner, self.running = job, machine, learner, running
        # imported before drill was hidden: the reference, the statistics, the workload, the CPU memory audit
        self.ref, self.stats, self.wl, self.live_bytes = (trusted[k] for k in ("ref", "stats", "wl", "live_bytes"))
        self.dims = dict(job["dims"])
        self.elem = torch.empty((), dtype=machine.dtype).element_size()
        self.active = {impl: True for impl in IMPLS}
        self.target_s = float(job["target_s"])
        self.size_budget = float(job["size_budget_s"])
        self.tol = AGREEMENT_TOL.get(job["dtype"], 6e-2)
        self.history: dict[str, list[tuple[int, float]]] = {impl: [] for impl in IMPLS}  # (size, median) per impl
        self.deadline = 0.0

    def run(self) -> None:
        """Every size until one of the stop rules says no (each recorded as a "stop" event)."""
        timeout_s = float(self.job["timeout_s"])
        self.deadline = time.monotonic() + timeout_s
        # --timeout is the ladder's own wall clock, from here: SIGALRM with its default action ends the
        # process even inside a long C call. (The parent's kill at --timeout plus set-up slack is the backstop.)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        sizes = list(self.job["sizes"])
        for i, size in enumerate(sizes):
            est = self.wl.est_bytes(size, self.dims, self.elem)
            if est > self.machine.budget:
                self.stop(size, "memory", f"stopped before {self.wl.size_label}={size}: a textbook implementation "
                                          f"needs about {est / 2**20:.0f} MB there, over the memory budget of "
                                          f"{self.machine.budget / 2**20:.0f} MB")
                break
            measured = self.run_size(size)
            if measured is None or self.stop_after(size, *measured, sizes[i + 1] if i + 1 < len(sizes) else None):
                break
        signal.setitimer(signal.ITIMER_REAL, 0)

    def stop(self, size: int, reason: str, message: str) -> None:
        record({"event": "stop", "size": size, "reason": reason, "message": message})

    def run_size(self, size: int) -> tuple[dict, float] | None:
        """One size: (results per implementation, elapsed seconds), or None when its inputs do not fit."""
        record({"event": "size_start", "size": size})
        t_size = time.monotonic()
        self.running.mark(size, "inputs", "setup")
        device = self.machine.device
        try:
            inputs = self.wl.build(size, self.dims, self.machine.dtype, device, seed=int(self.job["seed"]) + size)
        except BaseException as exc:  # noqa: BLE001 - only running out of memory is expected here
            if not is_oom(exc):
                raise
            del exc
            free_device_memory(device)
            self.stop(size, "memory", f"stopped before {self.wl.size_label}={size}: out of memory building the inputs")
            return None
        inputs["convention"], inputs["norm_topk_prob"] = self.learner.convention, self.learner.norm_topk_prob
        results: dict[str, dict] = {}
        contenders = self.prepare_all(size, inputs, results)
        self.time_all(size, contenders, results)
        for c in contenders:
            if self.active[c.impl]:
                results[c.impl] = c.finish(self.stats)
        contenders.clear()
        del inputs
        free_device_memory(device)
        elapsed = time.monotonic() - t_size  # clean-up included: the next size's prediction counts it
        self.running.mark(size, "", "between sizes")
        record({"event": "size", "size": size, "elapsed_s": elapsed, "results": results})
        return results, elapsed

    def fail(self, size: int, impl: str, exc: BaseException, results: dict) -> None:
        """`impl` failed at this size: its result says how, and it is skipped at larger sizes."""
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        if isinstance(exc, Stop):
            stop = exc
        elif is_oom(exc):
            stop = Stop("oom", f"out of memory at {self.wl.size_label}={size}")
        elif impl == "learner":
            stop = self.learner.failure(exc)
        else:
            stop = Stop("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        results[impl] = {"status": stop.status, "message": stop.message, "line": stop.line}
        self.active[impl] = False
        free_device_memory(self.machine.device)

    def prepare_all(self, size: int, inputs: dict, results: dict) -> list[Contender]:
        """Build, audit and warm up each implementation still running; check the learner's output."""
        wl, jc, machine = self.wl, self.learner.jc, self.machine
        contenders: list[Contender] = []
        reference_out = None
        for impl in IMPLS:
            if not self.active[impl]:
                results[impl] = {"status": "skipped", "message": "stopped at a smaller size"}
                continue
            if impl == "learner":
                c = Contender(impl, lambda: wl.learner(self.learner.module, inputs, self.dims), self.learner.traps())
            else:
                c = Contender(impl, lambda impl=impl: wl.reference(self.ref, impl, inputs, self.dims))
            compare = wl.comparable and impl in ("fused", "learner")
            jc.TRIPPED.clear()
            try:
                with torch.no_grad():
                    c.prepare(machine.backend, machine.timer, self.stats, self.live_bytes, self.target_s, self.running,
                              size, keep_output=compare)
                self.learner.raise_if_tripped()
                if impl == "fused":
                    reference_out = c.output
                elif compare and reference_out is not None:
                    self.check_agreement(c.output, reference_out, size)
                c.output = None
            except BaseException as exc:  # noqa: BLE001 - a failure is a result
                c.output = None
                self.fail(size, impl, exc, results)
                continue
            record({"event": "prepared", "size": size, "impl": impl, "warmup_s": c.result["warmup_s"],
                    "peak_bytes": c.result["peak_bytes"]})
            contenders.append(c)
        return contenders

    def check_agreement(self, got, want, size: int) -> None:
        err = agreement(got, want)
        if not err <= self.tol:
            raise Stop("mismatch", f"your output differs from the fused reference at {self.wl.size_label}={size}: "
                                   f"max rel err {err:.2g}, over the {self.tol:g} allowed in {self.job['dtype']}")

    def time_all(self, size: int, contenders: list[Contender], results: dict) -> None:
        """Timed rounds, interleaved: a burst of load on a shared machine hits every contender alike."""
        for r in range(max((c.reps for c in contenders), default=0)):
            for c in contenders:
                if r >= c.reps or not self.active[c.impl]:
                    continue
                self.running.mark(size, c.impl, "timed")
                try:
                    with torch.no_grad():
                        c.samples.append(self.machine.timer.once(c.call))
                except BaseException as exc:  # noqa: BLE001
                    self.fail(size, c.impl, exc, results)

    def stop_after(self, size: int, results: dict, elapsed: float, nxt: int | None) -> bool:
        """Whether the ladder ends after this size (recording why): the learner failed, the size was over
        --size-budget, or the next one is predicted over it or past what is left of --timeout."""
        label = self.wl.size_label
        if not self.active["learner"]:
            self.stop(size, "learner", f"stopped at {label}={size}, where your code failed")
            return True
        if elapsed > self.size_budget:
            self.stop(size, "size_budget", f"stopped after {label}={size}: it took {elapsed:.1f} s, "
                                           f"over --size-budget {self.size_budget:g} s")
            return True
        if nxt is None:
            return False
        extra = self.stats.UNTIMED_CALLS + (self.machine.backend is not None)
        guess = _predict_next(self.wl, results, self.history, self.active, size, nxt, elapsed, self.target_s,
                              extra_calls=extra, stats=self.stats)
        left = self.deadline - time.monotonic()
        if guess > self.size_budget:
            self.stop(nxt, "size_budget", f"stopped before {label}={nxt}: predicted ~{guess:.1f} s, "
                                          f"over --size-budget {self.size_budget:g} s")
            return True
        if guess * TIMEOUT_MARGIN > left:
            timeout_s = float(self.job["timeout_s"])
            self.stop(nxt, "timeout", f"stopped before {label}={nxt}: predicted ~{guess:.1f} s, "
                                      + ("more than" if guess > left else "too close to")
                                      + f" the {max(left, 0.0):.1f} s left of --timeout {timeout_s:g} s")
            return True
        return False


def main() -> None:
    """Read the job, set up the machine and the trusted code, load the learner's file, run the ladder."""
    global WORK
    job = json.loads(sys.stdin.read())
    boxed = SANDBOX.get("sandbox") == "namespaces" and bool(job.get("inside"))
    where = job["inside"] if boxed else {"work": job["work"], "learner": job["learner"],
                                          "scratch": job.get("scratch", os.getcwd())}
    WORK = where["work"]
    record({"event": "load"})
    _limit_late(job)

    # Trusted code first: the reference and the benchmark's own pieces; then the learner, with drill hidden.
    import drill.reference as ref
    from drill.bench import stats
    from drill.bench.memory import LiveBytes
    from drill.bench.workloads import workload

    trusted = {"ref": ref, "stats": stats, "wl": workload(job["exercise"]), "live_bytes": LiveBytes}
    machine = Machine(job)
    jc = _load_judge_child()
    jc.WORK = WORK
    jc.LEARNER = os.path.realpath(where["learner"])
    running = Running(os.path.join(WORK, "running.json"))
    learner = Learner(jc, job)
    # Layer 2's audit hook, as for `drill check`, from before the learner's file is imported to the end:
    # no process, signal, socket, ctypes or frame walk, and writes only to scratch and the protocol folder.
    # drill's folders stay readable: the benchmark's own code is drill's (a warning raised in the reference
    # reads its source line), and `import drill` is refused by the hook and by Learner's meta-path trap.
    no_processes = jc.deny_processes(False)  # seccomp: no new process, whatever the Python state
    jc.install_audit_hook([where["scratch"], WORK] + (["/tmp", "/dev/shm"] if boxed else []), [])
    record({"event": "sandbox", **{k: v for k, v in SANDBOX.items() if k != "fatal"}, "audit_hook": True,
            **no_processes})
    if learner.load():
        # Everything alive now (torch, the reference, the learner's module) lives as long as the process:
        # moved out of the collector's sight, the gc.collect() after each size scans only what the ladder
        # made (~1 ms) instead of every object of torch (0.3 s a size, 1.2 s of a 5 s --timeout).
        import gc

        gc.collect()
        gc.freeze()
        Ladder(job, machine, learner, trusted, running).run()
        done = {"event": "done", "host_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        if machine.backend is not None:
            done["device_peak_bytes"] = int(torch.cuda.max_memory_allocated(machine.device))  # since the last reset
        record(done)
    else:
        record({"event": "done"})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
