"""The "dgpt" case kind (debug_gpt): probes of one function each, and the whole-model checks.

Loaded by path in the child (torch only, never drill) and imported by the parent, which runs the very same
`run_probe` on the reference (`reference/debug_gpt.namespace(...)`) to get each case's expectation: both
sides read one definition, so the fixed file matches to the last bit.

A probe tests ONE function of the learner's file with everything it calls replaced by the stand-ins below
(correct helpers, plain `tanh(x @ W)` modules for attention/MLP/blocks, a recording model and optimizer for
train_step, a table language model for generate): a bug left in another function cannot move it. That is
what makes the count of remaining planted bugs exact. The whole-model checks (eval logits, train-mode loss
and gradients, two AdamW steps, greedy tokens) decide part 1; `cache` is part 2 (tokens, then the positions
entering `wte` and the matmul FLOPs of every decode step, judged in the parent).

Parameters are loaded from the reference's state_dict by the starter's names: a missing or reshaped one is a
ContractError naming it.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

KIND = "dgpt"
SD = "sd."  # the prefix of the reference's state_dict entries among a case's tensors
PAD = -1.0
MAX_CALLS = 24  # train_step probe: calls recorded (zero_grad 1, forward 2, backward 3, step 4), -1 padded


def _plain_optimizer_methods() -> None:
    """Optimizer's methods without their torch._disable_dynamo wrappers (as drill/judge/optim.py does, and
    for its reason: their first call imports torch._dynamo, seconds per run, which also replaces
    torch.manual_seed and so trips the child's integrity check). Nothing here is compiled."""
    for name, value in list(vars(torch.optim.Optimizer).items()):
        inner = getattr(value, "__wrapped__", None)
        code = getattr(value, "__code__", None)
        if inner is not None and code is not None and code.co_filename.endswith("_compile.py"):
            setattr(torch.optim.Optimizer, name, inner)
    # AdamW.step calls torch.optim.adam.adam through `_disable_dynamo_if_unsupported`'s wrapper, whose
    # torch.compiler.is_compiling() imports torch._dynamo too: the plain function, where the wrapper has one.
    import torch.optim.adam as adam_module
    import torch.optim.adamw as adamw_module

    for module in (adam_module, adamw_module):
        inner = getattr(getattr(module, "adam", None), "__wrapped__", None)
        if inner is not None:
            module.adam = inner


_plain_optimizer_methods()
# AdamW.step is wrapped by `_use_grad_for_differentiable`, which imports torch._dynamo on every call (for a
# graph break): the grader's AdamW runs the plain step under no_grad, what the wrapper does when not compiling.
_ADAMW_STEP = getattr(torch.optim.AdamW.step, "__wrapped__", torch.optim.AdamW.step)


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW, the same arithmetic, without the torch._dynamo import."""

    def step(self, closure: Any = None) -> Any:
        with torch.no_grad():
            return _ADAMW_STEP(self, closure)


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def config(ns: Any, extra: dict, dropout: float | None = None) -> Any:
    kw = dict(extra["config"])
    if dropout is not None:
        kw["dropout"] = dropout
    return ns.GPTConfig(**kw)


def load(module: nn.Module, t: dict, prefix: str, owner: str) -> None:
    """The reference's weights under `prefix` into `module`, by the starter's names; a renamed or reshaped
    parameter is named."""
    want = {k[len(SD) + len(prefix):]: v for k, v in t.items() if k.startswith(SD + prefix)}
    have = module.state_dict()
    missing = [k for k in want if k not in have]
    if missing:
        extra = [k for k in have if k not in want]
        instead = f"; yours has {', '.join(f'`{e}`' for e in extra[:3])} instead" if extra else ""
        raise ContractError("wrong_shape", f"{owner} has no parameter `{missing[0]}` (the starter's name"
                                           f"{instead}): keep the starter's parameter names, the grader loads "
                                           f"its weights by them")
    for k, v in want.items():
        if tuple(have[k].shape) != tuple(v.shape):
            raise ContractError("wrong_shape", f"{owner}'s parameter `{k}` has shape "
                                               f"{tuple(have[k].shape)}, the starter's is {tuple(v.shape)}")
    module.load_state_dict(want, strict=False)


def built(ns: Any, cls: str, cfg: Any, t: dict, prefix: str) -> nn.Module:
    module = getattr(ns, cls)(cfg)
    if not isinstance(module, nn.Module):
        raise ContractError("wrong_type", f"{cls}(config) is not an nn.Module")
    load(module, t, prefix, cls)
    return module


# -- stand-ins: correct helpers and plain modules ---------------------------------------------------------


def _split(n_head: int, x: torch.Tensor) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def _merge(y: torch.Tensor) -> torch.Tensor:
    B, H, T, D = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, H * D)


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))


def _masked_softmax(att: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)


class StandIn(nn.Module):
    """x -> tanh(x @ w) (+ x with `residual`): a sub-layer or block whose own bugs cannot exist."""

    def __init__(self, w: torch.Tensor, residual: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.residual = residual

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        y = torch.tanh(x @ self.w)
        return x + y if self.residual else y


class TableLM(nn.Module):
    """generate's stand-in model: logits[b, t] = E[idx[b, t]] + P[t]; P has block_size rows, so a context
    longer than block_size raises IndexError, as the real model's wpe would."""

    def __init__(self, e: torch.Tensor, p: torch.Tensor) -> None:
        super().__init__()
        self.e, self.p = e, p
        self.config = types.SimpleNamespace(block_size=int(p.shape[0]))

    def forward(self, idx: torch.Tensor, targets: Any = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
        return self.e[idx] + self.p[torch.arange(idx.shape[1])], None


class RecModel(nn.Module):
    """train_step's stand-in model: one parameter, a loss of it and the batch; records forward and backward."""

    def __init__(self, w: torch.Tensor, log: list) -> None:
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.log = log
        self.w.register_hook(self._backward)

    def _backward(self, grad: torch.Tensor) -> None:
        self.log.append(3)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        self.log.append(2)
        a = idx.double().mean() / 10 + 1
        b = targets.double().mean() / 10 if targets is not None else 0.0
        loss = ((self.w.double() * a - b) ** 2).sum()
        return self.w.unsqueeze(0), loss.float()


class RecOptimizer:
    """train_step's stand-in optimizer: records zero_grad and step, and the gradient each step saw."""

    def __init__(self, model: RecModel, log: list) -> None:
        self.model, self.log, self.seen = model, log, []

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.log.append(1)
        self.model.w.grad = None

    def step(self, closure: Any = None) -> None:
        self.log.append(4)
        g = self.model.w.grad
        self.seen.append(torch.zeros_like(self.model.w) if g is None else g.detach().clone())
        with torch.no_grad():
            if g is not None:
                self.model.w -= 0.1 * g


# -- probes: each returns one float64 tensor ----------------------------------------------------------------


def _attn(ns: Any, extra: dict, t: dict) -> nn.Module:
    attn = built(ns, "CausalSelfAttention", config(ns, extra), t, "h.0.attn.")
    attn.eval()
    return attn


def p_causal_mask(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    return torch.as_tensor(ns.causal_mask(int(extra["T"]))).to(torch.bool).double()


def p_split_heads(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    return _attn(ns, extra, t).split_heads(t["x"])


def p_merge_heads(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    return _attn(ns, extra, t).merge_heads(t["y"])


def p_scores(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    return _attn(ns, extra, t).scores(t["q"], t["k"])


def p_masked_softmax(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    return _attn(ns, extra, t).masked_softmax(t["att"], t["mask"])


def p_mix(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    return _attn(ns, extra, t).mix(t["att"], t["v"])


def p_attn_forward(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    attn = _attn(ns, extra, t)
    n_head = int(extra["config"]["n_head"])
    attn.split_heads = lambda x: _split(n_head, x)
    attn.merge_heads = _merge
    attn.scores = _scores
    attn.masked_softmax = _masked_softmax
    attn.mix = lambda att, v: att @ v
    if isinstance(getattr(attn, "mask", None), torch.Tensor):
        attn.mask = t["mask_full"]
    return attn(t["x"])


def p_mlp_forward(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    mlp = built(ns, "MLP", config(ns, extra), t, "h.0.mlp.")
    mlp.eval()
    return mlp(t["x"])


def p_block_forward(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    block = built(ns, "Block", config(ns, extra), t, "h.0.")
    block.attn, block.mlp = StandIn(t["w_attn"]), StandIn(t["w_mlp"])
    block.eval()
    return block(t["x"])


def _gpt(ns: Any, extra: dict, t: dict, dropout: float | None = None) -> nn.Module:
    return built(ns, "GPT", config(ns, extra, dropout), t, "")


def p_gpt_init(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    model = _gpt(ns, extra, t)
    head, wte = model.get_submodule("lm_head"), model.get_submodule("wte")
    tied = head.weight.data_ptr() == wte.weight.data_ptr()
    return torch.tensor([float(tied)], dtype=torch.float64)


def p_embed(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    model = _gpt(ns, extra, t)
    model.eval()
    return model.embed(t["idx"])


def p_gpt_forward(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    model = _gpt(ns, extra, t)
    wte, wpe = t[SD + "wte.weight"], t[SD + "wpe.weight"]
    model.embed = lambda idx, *a, **k: wte[idx] + wpe[torch.arange(idx.shape[1])]
    model.h = nn.ModuleList([StandIn(t[f"w_block{i}"], residual=True) for i in range(int(extra["config"]["n_layer"]))])
    model.eval()
    logits, loss = model(t["idx"], t["targets"])
    return torch.cat([logits.reshape(-1).double(), torch.as_tensor(loss).reshape(1).double()])


def p_split_batch(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    inputs, targets = ns.split_batch(t["batch"])
    return torch.cat([torch.as_tensor(inputs).reshape(-1), torch.as_tensor(targets).reshape(-1)]).double()


def _correct_split(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return batch[:, :-1], batch[:, 1:]


def p_train_step(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    log: list[int] = []
    model = RecModel(t["w"], log)
    opt = RecOptimizer(model, log)
    swap = isinstance(ns, types.ModuleType) and hasattr(ns, "split_batch")
    before = getattr(ns, "split_batch", None)
    if swap:
        ns.split_batch = _correct_split
    try:
        losses = [float(ns.train_step(model, t[f"batch{i}"], opt)) for i in range(2)]
    finally:
        if swap:
            ns.split_batch = before
    calls = (log + [PAD] * MAX_CALLS)[:MAX_CALLS]
    seen = (opt.seen + [torch.full_like(model.w, PAD)] * 2)[:2]
    return torch.cat([torch.tensor(calls + losses, dtype=torch.float64), *(g.reshape(-1).double() for g in seen)])


def p_generate(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    lm = TableLM(t["e"], t["p"])
    return torch.as_tensor(ns.generate(lm, t["idx"], int(extra["new"]))).double()


# -- the whole-model checks ----------------------------------------------------------------------------------


def w_logits(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    model = _gpt(ns, extra, t)
    model.eval()
    with torch.no_grad():
        logits, _ = model(t["idx"])
    return logits.double()


def _params(model: nn.Module, names: list) -> list[torch.Tensor]:
    return [model.get_parameter(n) for n in names]


def w_loss_grads(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    model = _gpt(ns, extra, t, dropout=0.0)
    model.train()
    _, loss = model(t["idx"], t["targets"])
    loss.backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in _params(model, extra["params"])]
    return torch.cat([loss.detach().reshape(1).double(), *(g.reshape(-1).double() for g in grads)])


def w_two_steps(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    model = _gpt(ns, extra, t, dropout=0.0)
    model.train()
    opt = AdamW(model.parameters(), lr=1e-3)
    losses = [float(ns.train_step(model, t[f"batch{i}"], opt)) for i in range(2)]
    params = _params(model, extra["params"])
    return torch.cat([torch.tensor(losses, dtype=torch.float64), *(p.detach().reshape(-1).double() for p in params)])


def w_generate(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    model = _gpt(ns, extra, t)
    return torch.as_tensor(ns.generate(model, t["idx"], int(extra["new"]))).double()


def _flops(func: Any, args: tuple, out: Any) -> int:
    name = func.overloadpacket.__name__
    if name in ("mm", "addmm", "bmm", "baddbmm") and isinstance(out, torch.Tensor):
        a = args[1] if name in ("addmm", "baddbmm") else args[0]
        return 2 * out.numel() * int(a.shape[-1])
    return 0


class FlopCount(TorchDispatchMode):
    """Matmul FLOPs (2*M*N*K) as they run; its own count, not FlopCounterMode (which imports torch._dynamo)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.flops += _flops(func, args, out)
        return out


FlopCount.__torch_dispatch__ = getattr(FlopCount.__torch_dispatch__, "__wrapped__", FlopCount.__torch_dispatch__)


def w_cache(ns: Any, extra: dict, t: dict) -> torch.Tensor:
    """[cached tokens, uncached tokens, positions entering wte per call (-1 padded), FLOPs at each wte call]."""
    new = int(extra["new"])
    model = _gpt(ns, extra, t)
    plain = torch.as_tensor(ns.generate(model, t["idx"], new))
    positions: list[int] = []
    at: list[int] = []
    counter = FlopCount()

    def seen(module: nn.Module, args: tuple) -> None:
        positions.append(int(args[0].numel()) if args and isinstance(args[0], torch.Tensor) else -1)
        at.append(counter.flops)

    hook = model.get_submodule("wte").register_forward_pre_hook(seen)
    try:
        with counter:
            cached = torch.as_tensor(ns.generate(model, t["idx"], new, use_cache=True))
    finally:
        hook.remove()
    at.append(counter.flops)
    width = 2 * new + 2
    positions = (positions + [-1] * width)[:width]
    at = (at + [-1] * (width + 1))[:width + 1]
    if cached.shape != plain.shape:
        raise ContractError("wrong_shape", f"generate(..., use_cache=True) returned shape {tuple(cached.shape)}, "
                                           f"use_cache=False {tuple(plain.shape)}")
    return torch.cat([cached.reshape(-1).double(), plain.reshape(-1).double(),
                      torch.tensor(positions + at, dtype=torch.float64)])


PROBES = {
    "causal_mask": p_causal_mask, "CausalSelfAttention.split_heads": p_split_heads,
    "CausalSelfAttention.merge_heads": p_merge_heads, "CausalSelfAttention.scores": p_scores,
    "CausalSelfAttention.masked_softmax": p_masked_softmax, "CausalSelfAttention.mix": p_mix,
    "CausalSelfAttention.forward": p_attn_forward, "MLP.forward": p_mlp_forward, "Block.forward": p_block_forward,
    "GPT.__init__": p_gpt_init, "GPT.embed": p_embed, "GPT.forward": p_gpt_forward, "split_batch": p_split_batch,
    "train_step": p_train_step, "generate": p_generate,
}
WHOLE = {"logits": w_logits, "loss_grads": w_loss_grads, "two_steps": w_two_steps, "greedy": w_generate,
         "cache": w_cache}


def run_probe(ns: Any, name: str, extra: dict, t: dict) -> torch.Tensor:
    fn = PROBES.get(name) or WHOLE[name]
    out = fn(ns, extra, t)
    if not isinstance(out, torch.Tensor):
        raise ContractError("wrong_type", f"{name} gave {type(out).__name__}, not a tensor")
    return out.detach().double()


def tensors_of(case: dict, tensors: dict) -> dict:
    return {n: tensors[a["t"]].clone() for n, a in zip(case["arg_names"], case["args"], strict=True) if "t" in a}


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    extra = case["extra"]
    torch.manual_seed(int(extra.get("torch_seed", 0)))
    return {"out": run_probe(mod, extra["probe"], extra, tensors_of(case, tensors))}
