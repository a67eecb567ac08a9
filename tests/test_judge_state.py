"""Solutions that keep state between calls fail, and are named `state_between_calls`.

A cache keyed on the shape (rope's cos/sin per (T, d_head), RMSNorm's
normaliser per x.shape, a kv_cache RoPE table per T_new) answers a later
call from an earlier call's inputs. Every exercise with tensors has a
"repeat call" probe (Case.repeat: a first call on other same-shaped inputs,
then the graded call on the same function or module instance); kv_cache's
chains already repeat call lengths at different positions, and its
stale-cache variants replay such caches. Here: the probes exist and are
well formed on several seeds, the simulated caches return what such a cache
would, and through the CLI a stateful file is named while a legitimate
cache (inv_freq keyed on d_head/base) still passes. The fixture files
(bug_state_between_calls__*.py) are graded in test_judge_fixtures.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from drill.cli import app
from drill.judge import registry
from drill.judge.specs import kv_cache
from drill.judge.specs._kv_bugs import STALE_KEYS, replay

SEEDS = [0, 7, 20261129]
# kv_cache's chains and lr_schedule's maps (every test a run of calls on the same function with other arguments)
# are repeat calls throughout, and so are bpe's exact cases (train_bpe and Tokenizer called again in the same
# process on other texts, case after case; encode then decode on one instance), and adamw's scenarios (every
# case a new optimizer stepped several times in the process the earlier ones ran in), and paged_kv's scripts
# (every case a new cache driven through dozens of calls after the earlier cases' caches), and mla's chains (as
# kv_cache's, plus two sequences interleaved through one module), and debug_gpt's (twenty cases building the
# file's classes again in one process, two train_step calls on one model, generate twice on one model in the
# cache case); every other has a probe.
PROBED = [name for name in registry.SPECS
          if name not in ("kv_cache", "lr_schedule", "bpe", "adamw", "paged_kv", "mla", "debug_gpt")]
FIXTURES = Path(__file__).parent / "fixtures" / "solutions"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", PROBED)
def test_every_exercise_has_one_well_formed_repeat_probe(name: str, seed: int) -> None:
    """One probe per graded function (or per element of a returned tuple: moe's out and aux) at most, one at least.

    The first call differs from the graded one in a tensor of the same shape and dtype, or, for a function
    of sizes alone (alibi), in a size argument its probe names (`repeat_probe(vary=)`).
    """
    cases = registry.load_spec(name).make_cases(seed)
    probes = [c for c in cases if c.repeat is not None]
    targets = [(c.target, (c.extra.get("tuple") or {}).get("pick")) for c in probes]
    assert probes and len(targets) == len(set(targets)), [c.name for c in probes]
    for probe in probes:
        assert "repeat call" in probe.name.split(":")[0], probe.name
        assert probe.repeat.keys() == probe.args.keys()
        differs = False
        for key, value in probe.args.items():
            first = probe.repeat[key]
            if isinstance(value, torch.Tensor):
                assert first.shape == value.shape and first.dtype == value.dtype, key
                differs |= not torch.equal(first, value)
            else:
                assert first == value or key in probe.ctx.get("repeat_vary", ()), key
                differs |= first != value
        assert differs
        assert not probe.wants_grads  # the first call's graph must not leak into a backward


def test_rope_probe_reuses_length_and_head_dim_with_other_positions() -> None:
    probe = next(c for c in registry.load_spec("rope").make_cases(3) if c.repeat)
    assert probe.repeat["x"].shape == probe.args["x"].shape
    assert not torch.equal(probe.repeat["positions"], probe.args["positions"])


def _decode_case(seed: int):
    cases = kv_cache.make_cases(seed)
    return next(c for c in cases if "one token at a time" in c.name and c.extra["returns"] == "out")


@pytest.mark.parametrize("seed", SEEDS)
def test_kv_instance_cache_hands_every_decode_step_the_first_steps_positions(seed: int) -> None:
    case = _decode_case(seed)
    label = next(label for label, _, whole_run in STALE_KEYS if not whole_run)
    got = case.ctx["stale"][label]
    prompt = case.extra["calls"][0]
    assert torch.equal(got[0], torch.arange(prompt))
    # every step rotated at the first step's position
    assert all(torch.equal(p, torch.tensor([prompt])) for p in got[1:])


@pytest.mark.parametrize("seed", SEEDS)
def test_kv_stale_replay_differs_from_the_reference_only_where_a_length_repeats(seed: int) -> None:
    cases = kv_cache.make_cases(seed)
    label = next(label for label, _, whole_run in STALE_KEYS if not whole_run)
    for case in cases[:2]:
        case.expected, _ = kv_cache.reference(case)
    once, decode = cases[0], _decode_case(seed)
    decode.expected, _ = kv_cache.reference(decode)
    assert torch.allclose(replay(once, stale=label), once.expected, atol=1e-5)  # one call: nothing to reuse
    assert torch.allclose(replay(decode), decode.expected, atol=1e-5)
    assert not torch.allclose(replay(decode, stale=label), decode.expected, atol=1e-3)


def _check(path: Path, exercise: str, seed: int = 11) -> dict:
    result = CliRunner().invoke(app, ["check", str(path), "-e", exercise, "--seed", str(seed), "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


STATEFUL = [
    ("rope", "bug_state_between_calls__cache_keyed_on_shape.py"),
    ("rmsnorm", "bug_state_between_calls__inv_cached_per_shape.py"),
    ("kv_cache", "bug_state_between_calls__rope_cache_keyed_on_length.py"),
]


@pytest.mark.parametrize(("exercise", "name"), STATEFUL)
def test_a_stateful_solution_is_named_state_between_calls(exercise: str, name: str) -> None:
    doc = _check(FIXTURES / exercise / name, exercise)
    assert doc["status"] == "fail"
    assert doc["diagnosis"]["id"] == "state_between_calls" and not doc["diagnosis"]["partial"], doc["diagnosis"]
    failing = [t["name"] for t in doc["tests"] if t["status"] != "pass"]
    if exercise == "rmsnorm":  # a fresh module per test: only the repeat probe can fail
        assert failing and all(n.startswith("repeat call") for n in failing), failing
    elif exercise == "rope":  # a run-wide cache may also collide with an earlier test's (T, d_head, base)
        assert any(n.startswith("repeat call") for n in failing), failing


GOOD_INV_FREQ_CACHE = '''
import torch

_INV_FREQ = {}


def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    key = (d, float(base), x.device)  # inv_freq depends on these only: a legitimate cache
    if key not in _INV_FREQ:
        _INV_FREQ[key] = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    ang = positions.float()[:, None] * _INV_FREQ[key]
    ang = torch.cat([ang, ang], -1)
    x1, x2 = x.float().chunk(2, -1)
    return (x.float() * ang.cos() + torch.cat([-x2, x1], -1) * ang.sin()).to(x.dtype)
'''

RAISES_ON_SECOND_CALL = '''
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight, self.used = eps, nn.Parameter(torch.ones(dim)), False

    def forward(self, x):
        if self.used:
            raise RuntimeError("called twice")
        self.used = True
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)
'''


def test_a_cache_keyed_on_everything_it_depends_on_passes(tmp_path: Path) -> None:
    path = tmp_path / "rope.py"
    path.write_text(GOOD_INV_FREQ_CACHE)
    doc = _check(path, "rope")
    assert doc["status"] == "pass", doc["diagnosis"]


def test_an_exception_on_the_second_call_is_an_exception_not_stale_state(tmp_path: Path) -> None:
    path = tmp_path / "rmsnorm.py"
    path.write_text(RAISES_ON_SECOND_CALL)
    doc = _check(path, "rmsnorm")
    assert doc["diagnosis"]["id"] == "exception", doc["diagnosis"]
    assert "called twice" in doc["diagnosis"]["detail"]
