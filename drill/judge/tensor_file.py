"""Tensors between the grader and its child, both ways: one file, a JSON index, then each tensor's raw bytes.

Inputs: written by the parent (runner/pool `send`), read by the child before
any learner code runs. Outputs: written by the child after each case, read
by the parent (`boundary.load_outputs`) as untrusted data: the learner's
process could have written anything there, so `read` checks the whole index
against the file (magic, sizes, offsets, dtypes, shapes) before it touches a
byte, and nothing in the file is ever unpickled or executed.

`torch.save` / `torch.load(weights_only=True)` did this before at ~75 us per
tensor (the weights-only unpickler is Python): 42 ms of a moe check's 0.25 s
for its ~570 inputs, and ~0.5 ms per case's output in the parent, the
largest single item of its work. This costs a few microseconds per tensor.

Every tensor read back is a fresh tensor on a storage of its own, as
torch.load gave them (the audits tell tensors apart by storage).

Standard library and torch only, no relative imports: the child loads this
file by its path from its driver folder.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import torch

MAGIC = b"drill-tensors-1\n"
ALIGN = 64
MAX_TENSORS = 100_000
MAX_DIMS = 16
_SIZE = struct.Struct("<Q")
PLAIN = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)}
_FIELDS = {"key", "dtype", "shape", "offset", "nbytes"}


def write(tensors: dict[str, torch.Tensor], path: Any) -> None:
    """`tensors` (dense CPU tensors of any dtype; `read` accepts only the plain ones) to `path`."""
    index, blobs, offset = [], [], 0
    for key, t in tensors.items():
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
            raise ValueError(f"{key!r} is not a dense CPU tensor")
        flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
        index.append({"key": str(key), "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                      "offset": offset, "nbytes": flat.numel()})
        blobs.append(flat)
        offset += -(-flat.numel() // ALIGN) * ALIGN
    head = json.dumps(index).encode()
    with open(path, "wb") as fh:
        fh.write(MAGIC + _SIZE.pack(len(head)) + head)
        start = fh.tell()
        for entry, flat in zip(index, blobs, strict=True):
            if flat.numel():
                fh.seek(start + entry["offset"])
                fh.write(flat.numpy().tobytes())


def read(path: Any, max_bytes: int | None = None) -> dict[str, torch.Tensor]:
    """The tensors in `path`, or ValueError saying what about the file is wrong (nothing allocated for it first
    beyond the file itself, which `max_bytes` caps)."""
    with open(path, "rb") as fh:
        data = bytearray(fh.read(max_bytes + 1 if max_bytes is not None else -1))
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError("the file is larger than allowed")
    head_at = len(MAGIC) + _SIZE.size
    if not data.startswith(MAGIC) or len(data) < head_at:
        raise ValueError("not a drill tensor file")
    (size,) = _SIZE.unpack_from(data, len(MAGIC))
    start = head_at + size
    if start > len(data):
        raise ValueError("its index runs past the end of the file")
    try:
        index = json.loads(data[head_at:start].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError("its index is not JSON") from exc
    if not isinstance(index, list) or len(index) > MAX_TENSORS:
        raise ValueError("its index is not a list of tensors")
    raw = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    out: dict[str, torch.Tensor] = {}
    for entry in index:
        key, dtype, shape, lo, nbytes = _entry(entry, len(data) - start)
        if key in out:
            raise ValueError(f"{key[:60]!r} appears twice")
        part = raw[start + lo:start + lo + nbytes].clone()  # a storage of its own
        out[key] = part.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype)
    return out


def _entry(entry: Any, room: int) -> tuple[str, torch.dtype, list[int], int, int]:
    """One index entry, checked: (key, dtype, shape, offset, bytes) lying inside the `room` bytes of data."""
    if not isinstance(entry, dict) or set(entry) != _FIELDS:
        raise ValueError("an index entry is malformed")
    key, name, shape, lo, nbytes = (entry[f] for f in ("key", "dtype", "shape", "offset", "nbytes"))
    if not isinstance(key, str) or len(key) > 200:
        raise ValueError("a tensor has a malformed key")
    if not isinstance(name, str) or name not in PLAIN:
        raise ValueError(f"{key[:60]!r} has dtype {str(name)[:40]!r}, not a plain one")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
            type(n) is int and 0 <= n < 2**40 for n in shape):
        raise ValueError(f"{key[:60]!r} has a malformed shape")
    if type(lo) is not int or type(nbytes) is not int or lo < 0 or nbytes < 0 or lo % ALIGN:
        raise ValueError(f"{key[:60]!r} has a malformed offset or size")
    dtype = PLAIN[name]
    # an empty tensor reads no byte: its offset (the padded end of the tensor before it) need not lie inside
    if math.prod(shape) * dtype.itemsize != nbytes or (nbytes and lo + nbytes > room):
        raise ValueError(f"{key[:60]!r} does not fit the data the file holds")
    return key, dtype, shape, lo, nbytes
