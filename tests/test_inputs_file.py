"""The child's case inputs (drill/judge/inputs_file.py): every dtype and shape comes back exactly, each tensor on
a storage of its own, and anything that is not such a file or such a tensor is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge import inputs_file

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
    inputs_file.write(sent, path)
    got = inputs_file.read(path)
    assert list(got) == list(sent)
    for key, want in sent.items():
        have = got[key]
        assert have.dtype == want.dtype and have.shape == want.shape, key
        assert torch.equal(have.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)), key
    ptrs = [t.untyped_storage().data_ptr() for t in got.values() if t.numel()]
    assert len(set(ptrs)) == len(ptrs)  # the audits tell inputs apart by storage
    got["0.nd"].add_(1)  # writable, and writing one touches no other
    assert torch.equal(got["0.scalar"].reshape(-1).view(torch.uint8), sent["0.scalar"].reshape(-1).view(torch.uint8))


def test_what_is_not_an_inputs_file_or_a_plain_tensor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "inputs.bin"
    path.write_bytes(b"PK\x03\x04 a torch.save archive")
    with pytest.raises(ValueError, match="not a drill inputs file"):
        inputs_file.read(path)
    for bad in (torch.zeros(2).to_sparse(), torch.zeros(2, dtype=torch.float8_e4m3fn), [1.0]):
        with pytest.raises(ValueError, match="dense CPU tensor"):
            inputs_file.write({"x": bad}, tmp_path / "bad.bin")
