"""`drill check lora.py --in-model`: the learner's LoRALinear on every q and v projection of the reference
decoder, one training step, and what that step moved (drill/judge/inmodel_lora.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge import inmodel, inmodel_lora
from drill.judge.check import check_file
from drill.judge.runner import Limits

SOL = Path(__file__).parent / "fixtures" / "solutions" / "lora"
SEED = 5
GOOD = ("good_parameters.py", "good_peft_layout.py", "good_einsum.py", "good_addmm_merge.py")
# A file -> (its diagnosis, the in-model cases it fails: logits, step, moved).
BUGS = {
    "bug_lora_base_trainable__never_frozen.py": ("lora_base_trainable", ("step", "moved")),
    "bug_lora_dropout_on_output__nn_dropout.py": ("lora_dropout_on_output", ("step",)),
    "bug_lora_scaling_alpha__no_division.py": ("lora_scaling_alpha", ("logits", "step")),
    "bug_lora_merge_in_place__add_into_base.py": ("lora_merge_in_place", ()),  # merging is not a training step
}
# Factors held as plain tensors that require a gradient: autograd reaches them, but they are no parameters of
# the model, so no optimizer ever updates them.
NOT_PARAMETERS = '''
import math
import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        base.requires_grad_(False)
        self.base, self.scaling = base, alpha / r
        like = dict(dtype=base.weight.dtype, device=base.weight.device)
        a = torch.empty(r, base.in_features, **like)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.lora_A = a.requires_grad_(True)
        self.lora_B = torch.zeros(base.out_features, r, **like, requires_grad=True)

    def forward(self, x):
        return self.base(x) + self.scaling * (x @ self.lora_A.T) @ self.lora_B.T

    def merged(self):
        out = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None,
                        dtype=self.base.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(self.base.weight + self.scaling * self.lora_B @ self.lora_A)
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out
'''


def _in_model(result) -> dict[str, object]:
    tests = [t for t in result.tests if t.in_model]
    return dict(zip(inmodel_lora.RETURNS, tests, strict=True))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, fork_server) -> dict:
    plain = tmp_path_factory.mktemp("lora_inmodel") / "lora.py"
    plain.write_text(NOT_PARAMETERS)
    files = {name: SOL / name for name in (*GOOD, *BUGS)} | {"not_parameters": plain}
    return {name: check_file(path, "lora", SEED, Limits(), pool=fork_server, in_model=True)
            for name, path in files.items()}


@pytest.mark.parametrize("name", GOOD)
def test_correct_layers_pass_the_training_step(name: str, results) -> None:
    result = results[name]
    cases = _in_model(result)
    assert [t.status for t in cases.values()] == ["pass"] * 3, [t.message for t in cases.values()]
    assert result.status == "pass", result.diagnosis_detail


@pytest.mark.parametrize("name", list(BUGS))
def test_each_bug_fails_the_cases_it_breaks_and_keeps_its_name(name: str, results) -> None:
    diagnosis, failing = BUGS[name]
    result = results[name]
    cases = _in_model(result)
    assert {r for r, t in cases.items() if t.status == "fail"} == set(failing), {r: t.message for r, t in cases.items()}
    assert result.diagnosis.id == diagnosis  # the in-model cases never disturb the bug matching


def test_a_trainable_base_is_named_by_the_parameter_it_moved(results) -> None:
    moved = _in_model(results["bug_lora_base_trainable__never_frozen.py"])["moved"]
    assert "model.layers.0.self_attn.q_proj.weight" in moved.message, moved.message
    assert "freeze it" in moved.message or "must freeze" in moved.message


def test_factors_that_are_not_parameters_never_move(results) -> None:
    moved = _in_model(results["not_parameters"])["moved"]
    assert moved.status == "fail"
    assert "moved 0 of the 8 adapter factors" in moved.message, moved.message


def test_the_step_moves_the_logits_and_only_the_adapters() -> None:
    """The reference's own answers: a step that changed nothing, or changed a frozen weight, would not pass."""
    logits, step, moved = inmodel.cases_for("lora", SEED)
    assert (step.expected - logits.expected).abs().max() > 0.1  # far past fp32 tolerance
    layers = inmodel.CONFIG["num_hidden_layers"]
    r = step.extra["r"]
    assert moved.expected[:-2].abs().sum() == 0
    assert moved.expected[-2:].tolist() == [4 * layers, layers * inmodel_lora.trainable_per_layer(inmodel.CONFIG, r)]
    assert moved.judge(moved.expected).ok
    fewer = moved.expected.clone()
    fewer[-2] -= 1
    assert "moved 7 of the 8" in moved.judge(fewer).message
    more = moved.expected.clone()
    more[-1] += 10
    assert "trainable values" in moved.judge(more).message


def test_the_cases_are_the_same_for_a_seed_and_differ_across_seeds() -> None:
    a, b, c = (inmodel.cases_for("lora", s) for s in (SEED, SEED, SEED + 1))
    assert torch.equal(a[1].expected, b[1].expected)
    assert not torch.equal(a[1].expected, c[1].expected)
