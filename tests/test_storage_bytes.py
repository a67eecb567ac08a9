"""drill/storage_bytes.py: the one per-storage byte counter of the bench's CPU audit and the grader's GQA audit.

It must work loaded by file path in a process that cannot import `drill` (the
grader's child), and count exactly what both users rely on.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from drill.bench.memory import LiveBytes
from drill.storage_bytes import LIVE, NEW, StorageBytes, storage_ptr

COUNTER = Path(__file__).resolve().parents[1] / "drill" / "storage_bytes.py"


def test_loads_by_path_where_drill_cannot_be_imported() -> None:
    script = textwrap.dedent(f"""
        import importlib.abc, importlib.util, sys

        class NoDrill(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "drill" or name.startswith("drill."):
                    raise ImportError("drill is hidden here")
        sys.meta_path.insert(0, NoDrill())
        spec = importlib.util.spec_from_file_location("_counter", {str(COUNTER)!r})
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        import torch
        with torch.no_grad(), mod.StorageBytes() as audit:
            x = torch.ones(256).mul(2).sum()
        print(audit.peak, audit.total, "torch._dynamo" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    peak, total, dynamo = out.stdout.split()
    assert int(peak) == 2 * 1024  # ones(256) and its product alive together
    assert int(total) == 2 * 1024 + 4  # ... and the 0-d sum
    assert dynamo == "False"  # the plain dispatch function: no 1.7 s torch._dynamo import on first use


def test_known_storages_views_and_in_place_writes_are_not_new_memory() -> None:
    weight = torch.ones(1000)

    class Recorder(StorageBytes):
        def __init__(self) -> None:
            super().__init__(known=[storage_ptr(weight)])
            self.states: list[tuple[str, str | None]] = []
            self.freed: list[int] = []

        def observe(self, func, inputs, outputs) -> None:  # type: ignore[no-untyped-def]
            in_ptrs = {storage_ptr(t) for t in inputs}
            for t in outputs:
                self.states.append((func.overloadpacket.__name__, self.count(t, in_ptrs)))

        def released(self, ptr: int) -> None:
            self.freed.append(ptr)

    with torch.no_grad(), Recorder() as audit:
        w_view = weight.view(10, 100)  # a view of a known storage: not ours
        y = weight * 2  # 4000 new bytes
        y.add_(1)  # in place: the same storage, counted once
        z = y.view(100, 10)  # a view of a counted storage: one more tensor on it
        del y, z, w_view
    assert ("mul", NEW) in audit.states and ("add_", LIVE) in audit.states and ("view", LIVE) in audit.states
    assert audit.states[0] == ("view", None)
    assert audit.peak == audit.total == 4000 and audit.current == 0 and len(audit.freed) == 1


def test_the_bench_audit_is_the_shared_counter() -> None:
    assert LiveBytes is StorageBytes
