"""lora grading: the reference is PEFT's LoRA built from torch, the cases reach the contract's space, every
mistake shows, and the init judge tells a right law from the wrong ones.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference's init draws what nn.Linear (PEFT's lora_A) draws from the same
generator state, its forward and gradients are torch's linear algebra with
autograd, merged() computes what the layer computes and leaves it alone; each
seed has fp32 and bf16, bias and none, in == out and in != out, r = 1 and 16,
one to three leading dims; every variant changes some test on every seed; the
KS judge passes kaiming_uniform_ on many seeds and fails zeros, a nonzero B,
randn, kaiming's default a and a uniform of half the width; the executor reads
PEFT's nn.Linear layout and names a missing factor; `peft` is refused.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from drill.judge import adapter, policy
from drill.judge.check import _tolerance_of
from drill.judge.compare import compare
from drill.judge.specs import lora
from drill.reference.lora import LoRALinear

SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(lora.SPEC)


def _prepared(seed: int) -> list:
    cases = lora.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = lora.reference(c)
    return cases


@pytest.mark.parametrize("bias", [True, False])
def test_the_reference_is_peft_lora_from_torch(bias: bool) -> None:
    torch.manual_seed(3)
    base = nn.Linear(12, 20, bias=bias)
    w0 = base.weight.detach().clone()
    torch.manual_seed(11)
    layer = LoRALinear(base, 4, 8.0)
    torch.manual_seed(11)
    peft_a = nn.Linear(12, 4, bias=False)  # PEFT's lora_A, nn.Linear's own init
    assert torch.equal(layer.lora_A.detach(), peft_a.weight.detach())
    assert torch.equal(layer.lora_B.detach(), torch.zeros(20, 4))
    assert not any(p.requires_grad for p in base.parameters())
    assert sum(p.numel() for p in layer.parameters() if p.requires_grad) == 4 * (12 + 20)
    with torch.no_grad():
        layer.lora_B.normal_()
    x = torch.randn(2, 3, 12, requires_grad=True)
    out = layer(x)
    want = nn.functional.linear(x, w0 + 2.0 * layer.lora_B @ layer.lora_A, base.bias)
    torch.testing.assert_close(out, want)
    up = torch.randn_like(out)
    ga, gb, gx = torch.autograd.grad((out * up).sum(), (layer.lora_A, layer.lora_B, x))
    wa, wb, wx = torch.autograd.grad((want * up).sum(), (layer.lora_A, layer.lora_B, x))
    for g, w in ((ga, wa), (gb, wb), (gx, wx)):
        torch.testing.assert_close(g, w)
    m = layer.merged()
    assert isinstance(m, nn.Linear) and (m.bias is not None) == bias and m is not base
    torch.testing.assert_close(m(x), out)
    assert torch.equal(base.weight, w0)
    torch.testing.assert_close(layer(x), out)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_cases_reach_the_contracts_space(seed: int) -> None:
    cases = [c for c in lora.make_cases(seed) if c.judge is None]
    ex = [c.extra for c in cases]
    assert {e["dtype"] for e in ex} == {"float32", "bfloat16"}
    assert {e["bias"] for e in ex} == {True, False}
    assert any(e["in"] == e["out"] for e in ex) and any(e["in"] != e["out"] for e in ex)
    assert {1, 16} <= {e["r"] for e in ex}
    assert all(e["alpha"] != e["r"] for e in ex)
    assert {c.args["x"].dim() - 1 for c in cases} == {1, 2, 3}
    assert {e["returns"] for e in ex} == set(lora.RETURNS)
    init = [c for c in lora.make_cases(seed) if c.judge is not None]
    assert len(init) == 1 and init[0].extra["in"] == 4096


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_every_variant_fails_some_test(seed: int) -> None:
    cases = [c for c in _prepared(seed) if c.judge is None]
    for bug in lora.SPEC.bugs:
        transposed = bug.diagnosis.id == "lora_merge_transposed"
        failing = []
        for c in cases:
            got = bug.fn(c)
            if got is not None and not compare(got, c.expected, TOL(c)).ok:
                failing.append(c.name)
                if not transposed:
                    break
        assert failing, f"{bug.label} changes no test at seed {seed}"
        if transposed:  # in != out cannot be added at all (the learner's merge raises there)
            assert all("in == out" in name for name in failing)


def _init_values(a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    b = torch.zeros(lora.INIT_OUT, lora.INIT_R) if b is None else b
    return torch.cat([a.reshape(-1), b.reshape(-1)]).float()


def test_the_init_judge_passes_kaiming_uniform_on_many_seeds() -> None:
    for seed in range(25):
        torch.manual_seed(seed)
        a = torch.empty(lora.INIT_R, lora.INIT_IN)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        verdict = lora.judge_init(_init_values(a))
        assert verdict.ok, (seed, verdict.message)


def test_the_init_judge_names_each_wrong_init() -> None:
    shape = (lora.INIT_R, lora.INIT_IN)
    bound = 1 / math.sqrt(lora.INIT_IN)
    g = torch.Generator().manual_seed(5)
    good = (torch.rand(shape, generator=g) * 2 - 1) * bound
    default_a = torch.empty(shape)
    nn.init.kaiming_uniform_(default_a, generator=g)
    cases = {
        "lora_both_zero": _init_values(torch.zeros(shape)),
        "lora_a_zero_b_random": _init_values(torch.zeros(shape), torch.randn(lora.INIT_OUT, lora.INIT_R)),
        "lora_b_init_nonzero": _init_values(good, torch.full((lora.INIT_OUT, lora.INIT_R), 1e-3)),
        "lora_a_init_scale": _init_values(torch.randn(shape, generator=g)),
    }
    for want, values in cases.items():
        verdict = lora.judge_init(values)
        assert not verdict.ok and verdict.diagnosis.id == want, (want, verdict.message)
    for values in (_init_values(default_a), _init_values(good / 2), _init_values(torch.randn(shape) * bound / 3)):
        verdict = lora.judge_init(values)
        assert not verdict.ok and verdict.diagnosis.id == "lora_a_init_scale", verdict.message
    assert lora.judge_init(_init_values(good)).ok


class _PeftLayout(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.s = alpha / r
        self.lora_A = nn.Linear(base.in_features, r, bias=False, dtype=base.weight.dtype)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, dtype=base.weight.dtype)
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.s * self.lora_B(self.lora_A(x))

    def merged(self):
        raise NotImplementedError


def test_the_executor_reads_peft_layout_and_names_a_missing_factor() -> None:
    cases = _prepared(0)
    case = next(c for c in cases if c.extra["returns"] == "forward" and c.extra["dtype"] == "float32")
    got = adapter.run_scenario(_PeftLayout, case.extra, case.args)
    assert compare(got, case.expected, TOL(case)).ok
    grad = next(c for c in cases if c.extra["returns"] == "grad_A" and c.extra["dtype"] == "float32")
    assert compare(adapter.run_scenario(_PeftLayout, grad.extra, grad.args), grad.expected, TOL(grad)).ok

    class NoB(_PeftLayout):
        def __init__(self, base, r, alpha):
            super().__init__(base, r, alpha)
            del self.lora_B

    with pytest.raises(adapter.ContractError) as err:
        adapter.run_scenario(NoB, case.extra, case.args)
    assert err.value.status == "missing_name" and "lora_B" in str(err.value)


def test_peft_is_refused() -> None:
    assert not policy.import_allowed("peft")
    assert policy.check_source("import peft\n")
    assert policy.check_source("from peft import LoraConfig\n")


def test_a_merged_layer_in_another_dtype_or_without_the_bias_is_told_so() -> None:
    case = next(c for c in _prepared(0) if c.extra["returns"] == "merged" and c.extra["dtype"] == "bfloat16"
                and c.extra["bias"])

    class Fp32Merge(LoRALinear):
        def merged(self):
            m = super().merged()
            return m.float()

    class NoBias(LoRALinear):
        def merged(self):
            m = super().merged()
            m.bias = None
            return m

    for cls, words in ((Fp32Merge, "torch.float32"), (NoBias, "no bias")):
        with pytest.raises(adapter.ContractError) as err:
            adapter.run_scenario(cls, case.extra, case.args)
        assert err.value.status == "wrong_type" and words in str(err.value), str(err.value)

