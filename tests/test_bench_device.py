"""drill bench's CUDA measurement logic, run on CPU against a fake `torch.cuda`.

The fake backend keeps a simulated GPU clock and allocator, and refuses what
the real one gets wrong silently or loudly: reading an event pair before the
end event has completed (no synchronize after it), or reading a peak that was
never reset. Each test would fail if the corresponding line of
drill/bench/device.py were dropped or reordered.
"""

from __future__ import annotations

import pytest

from drill.bench import device as dev


class FakeEvent:
    def __init__(self, gpu: FakeCuda) -> None:
        self.gpu, self.t, self.done = gpu, None, False

    def record(self) -> None:
        self.gpu.log.append("record")
        self.t = self.gpu.queue_end  # an event completes when the work queued before it has
        self.gpu.pending.append(self)

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.done and end.done):
            raise RuntimeError("event not completed: synchronize before elapsed_time")
        return (end.t - self.t) * 1e3  # milliseconds, like torch.cuda.Event


class FakeBuffer:
    def __init__(self, gpu: FakeCuda, nbytes: int) -> None:
        self.gpu, self.nbytes = gpu, nbytes
        gpu.alloc(nbytes)

    def zero_(self) -> FakeBuffer:
        self.gpu.log.append("flush")
        self.gpu.launch(self.nbytes / self.gpu.bandwidth)
        return self

    def copy_(self, src: FakeBuffer) -> FakeBuffer:
        self.gpu.launch(2 * self.nbytes / self.gpu.bandwidth)  # read src + write dst
        return self


class FakeCuda:
    """Simulated device: kernels queue up on a clock; the allocator tracks current and peak bytes."""

    def __init__(self, free: int = 80 * 2**30, bandwidth: float = 4e12) -> None:
        self.free, self.bandwidth = free, bandwidth
        self.queue_end = 0.0
        self.pending: list[FakeEvent] = []
        self.log: list[str] = []
        self.current = self.peak = 0
        self.resets = 0

    # the kernels
    def launch(self, seconds: float) -> None:
        self.queue_end += seconds

    def alloc(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def release(self, nbytes: int) -> None:
        self.current -= nbytes

    # the CudaBackend interface
    def synchronize(self) -> None:
        self.log.append("sync")
        for e in self.pending:
            e.done = True
        self.pending.clear()

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def reset_peak(self) -> None:
        self.resets += 1
        self.peak = self.current

    def allocated(self) -> int:
        return self.current

    def max_allocated(self) -> int:
        return self.peak

    def mem_get_info(self) -> tuple[int, int]:
        return self.free, 2 * self.free

    def empty(self, nbytes: int) -> FakeBuffer:
        return FakeBuffer(self, nbytes)

    def empty_cache(self) -> None:
        pass


def test_timer_reads_events_after_a_synchronize_and_flushes_l2_outside_the_timed_region() -> None:
    gpu = FakeCuda()
    timer = dev.Timer(gpu, flush_bytes=2**20)
    gpu.log.clear()

    def kernel():
        gpu.log.append("call")
        gpu.launch(0.004)

    assert timer.once(kernel) == pytest.approx(0.004)  # the flush's time is not in it
    assert gpu.log == ["flush", "sync", "record", "call", "record", "sync"]


def test_timer_on_cpu_uses_the_wall_clock() -> None:
    import time

    assert 0.009 < dev.Timer(None).once(lambda: time.sleep(0.01)) < 0.5


def test_peak_is_reset_before_each_call_and_relative_to_what_existed() -> None:
    gpu = FakeCuda()
    gpu.alloc(1000)  # inputs, alive before the call: not counted

    def call(scratch: int, out: int):
        def run():
            gpu.alloc(scratch)
            gpu.alloc(out)
            gpu.release(scratch)
            return out
        return run

    peak, out = dev.cuda_peak_bytes(call(500, 100), gpu)
    assert (peak, out) == (600, 100)  # scratch and output alive together
    gpu.release(100)
    peak, _ = dev.cuda_peak_bytes(call(50, 10), gpu)
    assert peak == 60  # not the 600 of the call before: the counter was reset
    assert gpu.resets == 2


def test_copy_bandwidth_counts_read_and_write() -> None:
    gpu = FakeCuda(bandwidth=3.3e12)
    bw = dev.copy_bandwidth(gpu, dev.Timer(gpu, flush_bytes=0))
    assert bw == pytest.approx(3.3e12)


@pytest.mark.parametrize(
    "nbytes, seconds, expected",
    [
        (2**30, [5e-4], 2 * 2**30 / 5e-4),
        (1000, [1.0, 3.0, 2.0], 1000.0),  # median of three: 2 s for 2000 bytes
        (1000, [1.0, 100.0, 1.0, 1.0], 2000.0),  # one slow sample does not set the peak
        (1000, [2.0, 4.0], 2000 / 3.0),  # even count: mean of the middle two
    ],
)
def test_copy_bandwidth_arithmetic(nbytes: int, seconds: list[float], expected: float) -> None:
    assert dev.copy_bandwidth_from(nbytes, seconds) == pytest.approx(expected)


def test_copy_probe_and_budget_stay_inside_free_memory() -> None:
    assert dev.probe_size(80 * 2**30) == dev.COPY_BYTES  # capped at 1 GiB per buffer
    assert dev.probe_size(2 * 2**30) == 2**28  # both buffers under a quarter of what is free
    assert dev.copy_bandwidth(FakeCuda(free=2**22), dev.Timer(None)) is None  # too little to measure
    assert dev.memory_budget(100 * 2**30, 0.6) == int(60 * 2**30)
    assert dev.memory_budget(-5, 0.6) == 0
    with pytest.raises(ValueError):
        dev.copy_bandwidth_from(1000, [0.0])
