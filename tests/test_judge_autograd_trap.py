"""rmsnorm_backward forbids autograd in every form, at run time, naming the learner's line (issue 12).

The static policy allows `torch.autograd` (other exercises use
autograd.Function), so the trap is the exercise's own: its forbidden set
(spec.FORBIDDEN_AUTOGRAD) replaces autograd's entry points and its engine
with tripwires in the child (child.block_paths) and blocks forward mode's
aten ops. Each way in is graded with the policy on (as `drill check` does)
and off (so layer 2 holds alone); none may pass, and with the policy off
each must be `forbidden_op` with the line that reached it. Other exercises
keep autograd: their gradient cases run through the same child.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.judge.check import check_file
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits

LIMITS = Limits(timeout_s=30, cpu_s=30, memory_mb=2048)

HEAD = """import torch
{imports}

def _f(a, b, eps=1e-6):
    return a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + eps) * b


def rmsnorm_backward(x, weight, grad_out, eps=1e-6):
    xx = x.detach().float().requires_grad_(True)
    ww = weight.detach().float().requires_grad_(True)
    g = grad_out.float()
    gx, gw = {call}
    return gx.to(x.dtype), gw.to(weight.dtype)
"""
LINE = 12  # the `gx, gw = ...` line of HEAD

# name -> (extra imports, the expression, what the trap names)
WAYS: dict[str, tuple[str, str, str]] = {
    "autograd.grad": ("", "torch.autograd.grad(_f(xx, ww), (xx, ww), g)", "torch.autograd.grad"),
    "Tensor.backward": ("", "(_f(xx, ww).backward(g), (xx.grad, ww.grad))[1]", "torch.Tensor.backward"),
    "Tensor.backward unbound": ("", "(torch.Tensor.backward(_f(xx, ww), g), (xx.grad, ww.grad))[1]",
                                "torch.Tensor.backward"),
    "autograd.backward": ("", "(torch.autograd.backward([_f(xx, ww)], [g]), (xx.grad, ww.grad))[1]",
                          "torch.autograd.backward"),
    "grad captured at import": ("from torch.autograd import grad as take", "take(_f(xx, ww), (xx, ww), g)",
                                "torch.autograd.grad"),
    "functional.vjp": ("", "torch.autograd.functional.vjp(_f, (x.float(), weight.float()), g)[1]",
                       "torch.autograd.functional.vjp"),
    "functional.jacobian": ("", "torch.autograd.functional.jacobian(_f, (x.float(), weight.float()))",
                            "torch.autograd.functional.jacobian"),
    "functional.jvp": ("", "torch.autograd.functional.jvp(_f, (x.float(), weight.float()))",
                       "torch.autograd.functional.jvp"),
    "func.vjp": ("", "torch.func.vjp(_f, x.float(), weight.float())[1](g)", "torch.func.vjp"),
    "func.grad": ("", "torch.func.grad(lambda a, b: (_f(a, b) * g).sum(), argnums=(0, 1))(x.float(), weight.float())",
                  "torch.func.grad"),
    "func.jacrev": ("", "torch.func.jacrev(_f, argnums=(0, 1))(x.float(), weight.float())", "torch.func.jacrev"),
    "func.jacfwd": ("", "torch.func.jacfwd(_f, argnums=(0, 1))(x.float(), weight.float())", "torch.func.jacfwd"),
    "func.jvp": ("", "torch.func.jvp(_f, (x.float(), weight.float()), (g, weight.float()))", "torch.func.jvp"),
    "func.hessian": ("", "torch.func.hessian(lambda a: _f(a, ww).sum())(x.float())", "torch.func.hessian"),
    "forward_ad": ("", "torch.autograd.forward_ad.unpack_dual(_f(x.float(), weight.float()))",
                   "torch.autograd.forward_ad.unpack_dual"),
    "autograd.Function.backward": ("", "(_Twice.apply(xx).sum().backward(), (xx.grad, ww))[1]",
                                   "torch.Tensor.backward"),
}
FUNCTION = """

class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
"""
# Only without the static policy (it refuses the import or the private name): layer 2 alone.
POLICY_OFF_ONLY: dict[str, tuple[str, str, str]] = {
    "functorch.vjp": ("import functorch", "functorch.vjp(_f, x.float(), weight.float())[1](g)",
                      "torch.autograd.grad"),
    "functorch.jvp": ("import functorch", "functorch.jvp(_f, (x.float(), weight.float()), (g, weight.float()))",
                      "torch.autograd.forward_ad.make_dual"),
    "the engine itself": ("", "torch.autograd.variable.Variable._execution_engine.run_backward((_f(xx, ww),), (g,), "
                              "False, False, (xx, ww), False, False)", "autograd's backward engine"),
    "on another thread": ("import threading\nOUT = []",
                          "(threading.Thread(target=lambda: OUT.append(torch.autograd.grad(_f(xx, ww), (xx, ww), g)))"
                          ".start(), __import__('time').sleep(0.5), OUT[0])[2]", "torch.autograd.grad"),
}


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


def _file(tmp_path: Path, imports: str, call: str) -> Path:
    path = tmp_path / "rmsnorm_backward.py"
    path.write_text(HEAD.format(imports=imports, call=call) + FUNCTION)
    return path


@pytest.mark.parametrize("way", sorted(WAYS))
def test_every_autograd_path_is_trapped_with_its_line(way: str, tmp_path: Path, pool: ChildPool) -> None:
    imports, call, named = WAYS[way]
    path = _file(tmp_path, imports, call)
    for policy in (True, False):
        result = check_file(path, seed=4, limits=LIMITS, pool=pool, policy=policy)
        assert result.status == "fail", (way, policy)
        assert result.diagnosis.id == "forbidden_op", (way, policy, result.diagnosis_detail)
        assert named in result.diagnosis_detail, (way, policy, result.diagnosis_detail)
        assert f"line {LINE + imports.count(chr(10))}" in result.diagnosis_detail, (way, result.diagnosis_detail)


@pytest.mark.parametrize("way", sorted(POLICY_OFF_ONLY))
def test_paths_only_the_policy_stops_are_trapped_below_it(way: str, tmp_path: Path, pool: ChildPool) -> None:
    imports, call, named = POLICY_OFF_ONLY[way]
    path = _file(tmp_path, imports, call)
    on = check_file(path, seed=4, limits=LIMITS, pool=pool)
    assert on.status == "fail" and on.diagnosis.id == "policy_violation", (way, on.diagnosis_detail)
    off = check_file(path, seed=4, limits=LIMITS, pool=pool, policy=False)
    assert off.status == "fail" and off.diagnosis.id == "forbidden_op", (way, off.diagnosis_detail)
    assert named in off.diagnosis_detail, (way, off.diagnosis_detail)


def test_autograd_is_still_allowed_where_the_exercise_does_not_forbid_it(tmp_path: Path, pool: ChildPool) -> None:
    """The same engine runs the grader's gradient cases of other exercises, and learners' autograd.Function."""
    path = tmp_path / "rmsnorm.py"
    path.write_text("""import torch
from torch import nn


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, w):
        ctx.save_for_backward(a, w)
        return a * w

    @staticmethod
    def backward(ctx, grad):
        a, w = ctx.saved_tensors
        return grad * w, (grad * a).reshape(-1, a.shape[-1]).sum(0)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return _Scale.apply(y, self.weight.float()).to(x.dtype)
""")
    result = check_file(path, seed=4, limits=LIMITS, pool=pool)
    assert result.status == "pass", (result.diagnosis_detail, [(t.name, t.message) for t in result.tests if t.message])
