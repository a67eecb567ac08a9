"""Tensors between the grader and its child (drill/judge/tensor_file.py): every plain dtype and shape comes back
exactly, each tensor on a storage of its own; a file the learner's process forged is refused with what is wrong,
through the boundary as an unreadable output, before anything is built from it."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drill.judge import tensor_file

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
          torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)


def test_every_dtype_and_shape_round_trips_bit_for_bit(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    sent: dict[str, torch.Tensor] = {}
    for i, dtype in enumerate(DTYPES):
        base = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64) * 50
        sent[f"{i}.nd"] = (base > 0) if dtype is torch.bool else base.to(dtype)
        sent[f"{i}.scalar"] = sent[f"{i}.nd"].reshape(-1)[3].clone()  # 0-dim
        sent[f"{i}.empty"] = torch.empty(2, 0, 4, dtype=dtype)
    sent["odd"] = torch.arange(13, dtype=torch.int8)  # 13 bytes: the next tensor starts aligned all the same
    sent["after_odd"] = torch.tensor([float("nan"), float("-inf"), -0.0, 1e-45], dtype=torch.float32)
    path = tmp_path / "inputs.bin"
    tensor_file.write(sent, path)
    got = tensor_file.read(path)
    assert list(got) == list(sent)
    for key, want in sent.items():
        have = got[key]
        assert have.dtype == want.dtype and have.shape == want.shape, key
        assert torch.equal(have.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)), key
    ptrs = [t.untyped_storage().data_ptr() for t in got.values() if t.numel()]
    assert len(set(ptrs)) == len(ptrs)  # the audits tell inputs apart by storage
    got["0.nd"].add_(1)  # writable, and writing one touches no other
    assert torch.equal(got["0.scalar"].reshape(-1).view(torch.uint8), sent["0.scalar"].reshape(-1).view(torch.uint8))


def test_what_write_cannot_store_is_refused(tmp_path: Path) -> None:
    for bad in (torch.zeros(2).to_sparse(), [1.0]):
        with pytest.raises(ValueError, match="dense CPU tensor"):
            tensor_file.write({"x": bad}, tmp_path / "bad.bin")


def _forged(index: object, data: bytes = b"", *, size: int | None = None) -> bytes:
    head = json.dumps(index).encode()
    return tensor_file.MAGIC + struct.pack("<Q", len(head) if size is None else size) + head + data


GOOD = {"key": "out", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}
DEEP = b"[" * 50000 + b"]" * 50000
FORGED = {
    "an archive": (b"PK\x03\x04" + bytes(60), "not a drill tensor file"),
    "a short file": (tensor_file.MAGIC + b"\x01", "not a drill tensor file"),
    "an index past the end": (_forged([], size=2**40), "past the end"),
    "a non-JSON index": (tensor_file.MAGIC + struct.pack("<Q", 3) + b"[[[", "not JSON"),
    "a deep index": (tensor_file.MAGIC + struct.pack("<Q", len(DEEP)) + DEEP, "not JSON"),
    "an object index": (_forged({"out": 1}), "not a list"),
    "an extra field": (_forged([{**GOOD, "pickle": "x"}], bytes(8)), "malformed"),
    "an odd dtype": (_forged([{**GOOD, "dtype": "float8_e4m3fn", "nbytes": 2}], bytes(8)), "not a plain one"),
    "a made-up dtype": (_forged([{**GOOD, "dtype": "object"}], bytes(8)), "not a plain one"),
    "a negative dim": (_forged([{**GOOD, "shape": [-2]}], bytes(8)), "malformed shape"),
    "a float dim": (_forged([{**GOOD, "shape": [2.0]}], bytes(8)), "malformed shape"),
    "a bool size": (_forged([{**GOOD, "nbytes": True}], bytes(8)), "malformed offset"),
    "a wrong size": (_forged([{**GOOD, "nbytes": 4}], bytes(8)), "does not fit"),
    "data past the end": (_forged([{**GOOD, "shape": [2**30], "nbytes": 2**32}], bytes(8)), "does not fit"),
    "an unaligned offset": (_forged([{**GOOD, "offset": 3}], bytes(16)), "malformed offset"),
    "a key twice": (_forged([GOOD, GOOD], bytes(8)), "appears twice"),
    "a long key": (_forged([{**GOOD, "key": "k" * 201}], bytes(8)), "malformed key"),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_file_is_refused_before_anything_is_built(name: str, tmp_path: Path) -> None:
    from drill.judge.boundary import Unreadable, load_outputs

    data, why = FORGED[name]
    path = tmp_path / "out_0.bin"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=why):
        tensor_file.read(path)
    with pytest.raises(Unreadable, match="output file"):
        load_outputs(path)


def test_the_boundary_wants_an_out_tensor_within_the_size_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.judge import boundary

    path = tmp_path / "out_0.bin"
    tensor_file.write({"grad.x": torch.ones(3)}, path)
    with pytest.raises(boundary.Unreadable, match="`out`"):
        boundary.load_outputs(path)
    tensor_file.write({"out": torch.ones(1000)}, path)
    assert torch.equal(boundary.load_outputs(path)["out"], torch.ones(1000))
    monkeypatch.setattr(boundary, "MAX_OUTPUT_FILE_BYTES", 1000)
    with pytest.raises(boundary.Unreadable, match="larger than allowed"):
        boundary.load_outputs(path)
    with pytest.raises(boundary.Unreadable, match="could not be read"):
        boundary.load_outputs(tmp_path / "missing.bin")


# -- issue 31 §3: an empty tensor after an unaligned one --------------------------------------------------------
def test_an_empty_tensor_after_an_unaligned_one_reads_back(tmp_path: Path) -> None:
    """The last tensor empty and the one before it not a multiple of ALIGN bytes: its offset lies past the end of
    the data, and an honest output file was refused as "does not fit" (the boundary: unreadable, forged)."""
    from drill.judge.boundary import load_outputs

    path = tmp_path / "out_0.bin"
    sent = {"out": torch.arange(3, dtype=torch.int8), "grad.x": torch.empty(0, 4)}
    tensor_file.write(sent, path)
    got = load_outputs(path)
    assert torch.equal(got["out"], sent["out"]) and got["grad.x"].shape == (0, 4)
    tensor_file.write(sent, os.devnull)  # the child's warm-up writes there: nothing may seek past or truncate it


_SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=4)
_ENTRIES = st.lists(st.tuples(st.sampled_from(DTYPES), _SHAPES, st.integers(0, 2**31 - 1)), max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=_ENTRIES)
def test_any_dtypes_shapes_and_order_round_trip(entries: list, tmp_path: Path) -> None:
    """Every sequence of plain tensors (0-sized and 0-dim included, any order) comes back in order, bit for bit."""
    sent: dict[str, torch.Tensor] = {}
    for i, (dtype, shape, seed) in enumerate(entries):
        n = math.prod(shape) * dtype.itemsize
        raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
        if dtype is torch.bool:
            raw = raw % 2
        sent[f"t{i}"] = raw.view(dtype).reshape(shape)
    path = tmp_path / "t.bin"
    tensor_file.write(sent, path)
    got = tensor_file.read(path)
    assert list(got) == list(sent)
    for key, want in sent.items():
        have = got[key]
        assert have.dtype == want.dtype and have.shape == want.shape, key
        assert torch.equal(have.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)), key
