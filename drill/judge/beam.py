"""The "beam" case kind: a decoding function driven by a model the grader passes in (beam_search).

The learner's `beam_search(step_logprobs, bos_id, eos_id, beam_width, max_new_tokens, length_penalty)` takes
a callable. Nothing crosses from parent to child but JSON and tensors, so the callable is built here, in the
child, from the case's tensors: a tiny random language model (`TinyLM`) whose next-token log-probs depend on
the whole prefix. The parent builds the same model from the same tensors (this file is imported there too)
and computes the expected answer with the reference, so both sides read one definition.

The model, for one row x_0 .. x_{t-1} (x_0 = bos): z = sum_i emb[x_i] * DECAY^(t-1-i) + pos[min(t-1, P-1)],
logits = tanh(z) @ w + bias, log_softmax in float64, returned as fp32 (N, V). A batch of N rows gives each row
the values it gets alone (`TinyLM.logprobs`): the learner may batch its beams or not.

A repeat-call probe (the case's `repeat`: other model tensors of the same shapes) runs one search on that model
first, with its own counter, and grades only the second.

The wrapper counts the calls and the rows of each: an advisory (one call per step, at most beam_width rows)
reads them. The answer travels back as one float64 vector (`encode`):
    [LENGTH_BASE + len(tokens), score, tok_0 .. tok_{n-1}, -1 padding to max_new_tokens, calls, max rows]
The constant LENGTH_BASE makes the vector's scale fixed (drill's tolerance is atol * max(1, max|expected|)),
so atol = 1e-4 / LENGTH_BASE grades the score within 1e-4 (for |score| below LENGTH_BASE) and token ids
exactly (they differ by 1 or more); the last two entries are measurements, not graded (the case's `care`).
"""

from __future__ import annotations

from typing import Any

import torch

KIND = "beam"
DECAY = 0.7
LENGTH_BASE = 10_000.0
MODEL_ARGS = ("emb", "pos", "w", "bias")
CALL_ARGS = ("bos_id", "eos_id", "beam_width", "max_new_tokens", "length_penalty")


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


class TinyLM:
    """step_logprobs as a plain callable over the four model tensors; counts its calls and their rows."""

    def __init__(self, emb: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, bias: torch.Tensor,
                 max_calls: int = 10_000) -> None:
        self.emb, self.pos = emb.double(), pos.double()
        self.w, self.bias = w.double(), bias.double()
        self.vocab = int(emb.shape[0])
        self.rows: list[int] = []
        self.max_calls = max_calls
        self._weights: dict[int, torch.Tensor] = {}

    def logprobs(self, seqs: torch.Tensor) -> torch.Tensor:
        """(N, V) fp32 log-probs of N prefixes of one length t, (N, t) int64. Batched, yet each row gets the
        bits it gets alone: both sums run along a dimension that is not the innermost (t, then d), which torch
        accumulates in order element by element, whatever N (checked bit for bit on 18 000 rows); the matmul
        is written as such a sum because a BLAS product may order its sums differently for one row and many."""
        t = int(seqs.shape[1])
        weights = self._weights.get(t)
        if weights is None:
            weights = self._weights[t] = torch.tensor([DECAY ** (t - 1 - i) for i in range(t)],
                                                      dtype=torch.float64)[None, :, None]
        z = (self.emb[seqs] * weights).sum(1) + self.pos[min(t - 1, self.pos.shape[0] - 1)]
        logits = (torch.tanh(z)[:, :, None] * self.w).sum(1) + self.bias
        return torch.log_softmax(logits, -1).float()

    def rows_of(self, seqs: list[list[int]]) -> torch.Tensor:
        """logprobs of a list of prefixes of one length."""
        return self.logprobs(torch.tensor(seqs, dtype=torch.int64))

    def __call__(self, tokens: Any) -> torch.Tensor:
        if len(self.rows) >= self.max_calls:
            raise ContractError("wrong_shape", f"step_logprobs was called more than {self.max_calls} times (a "
                                               "search that never stops?)")
        if not isinstance(tokens, torch.Tensor):
            try:
                tokens = torch.as_tensor(tokens)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise ContractError("wrong_type", f"step_logprobs was called with {_type_name(tokens)}, not an "
                                                  f"(N, t) int64 tensor ({exc})") from exc
        device = tokens.device
        if tokens.dim() != 2 or tokens.shape[0] < 1 or tokens.shape[1] < 1:
            raise ContractError("wrong_shape", f"step_logprobs was called with tokens of shape "
                                               f"{tuple(tokens.shape)}, not (N, t) with N, t >= 1 (rows: bos, then "
                                               f"the tokens so far)")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ContractError("wrong_type", f"step_logprobs was called with {tokens.dtype} tokens, not int64")
        cpu = tokens.detach().to("cpu", torch.int64)
        if bool((cpu < 0).any()) or bool((cpu >= self.vocab).any()):
            # an IndexError as the model's embedding lookup would raise: the learner's own bug, not a type
            raise IndexError(f"step_logprobs was called with a token id outside 0 .. {self.vocab - 1}")
        self.rows.append(int(cpu.shape[0]))
        return self.logprobs(cpu).to(device)


def model_of(tensors: dict[str, torch.Tensor]) -> TinyLM:
    return TinyLM(*(tensors[n] for n in MODEL_ARGS))


def _answer(result: Any, max_new_tokens: int, target: str) -> tuple[list[int], float]:
    """(tokens, score) out of what the learner returned, or a ContractError saying what is wrong with it."""
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise ContractError("wrong_type", f"{target} returned {_type_name(result)} ({result!r:.60}), not the "
                                          f"(tokens, score) pair the contract gives")
    toks, score = result
    if isinstance(toks, torch.Tensor):
        if toks.dim() != 1 or toks.dtype.is_floating_point or toks.dtype == torch.bool:
            raise ContractError("wrong_type", f"{target}(...)[0] is a {toks.dtype} tensor of shape "
                                              f"{tuple(toks.shape)}, not a list of ints")
        toks = toks.tolist()
    if not isinstance(toks, list | tuple):
        raise ContractError("wrong_type", f"{target}(...)[0] is {_type_name(toks)}, not a list of ints")
    out = []
    for i, t in enumerate(toks):
        if isinstance(t, torch.Tensor) and t.numel() == 1 and not t.dtype.is_floating_point:
            t = int(t)
        if isinstance(t, bool) or not isinstance(t, int):
            raise ContractError("wrong_type", f"{target}(...)[0][{i}] is {_type_name(t)} ({t!r:.40}), not an int")
        out.append(int(t))
    if len(out) > max_new_tokens:
        raise ContractError("wrong_shape", f"{target} returned {len(out)} tokens, more than max_new_tokens = "
                                           f"{max_new_tokens} (bos is not part of the answer)")
    if isinstance(score, torch.Tensor):
        if score.numel() != 1 or not score.dtype.is_floating_point:
            raise ContractError("wrong_type", f"{target}(...)[1] is a tensor of shape {tuple(score.shape)} and "
                                              f"dtype {score.dtype}, not a float")
        score = float(score)
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise ContractError("wrong_type", f"{target}(...)[1] is {_type_name(score)} ({score!r:.40}), not a float")
    return out, float(score)


def encode(tokens: list[int], score: float, max_new_tokens: int, rows: list[int]) -> torch.Tensor:
    """The answer vector (see the module docstring); `rows`: the rows of each step_logprobs call."""
    pad = [-1.0] * (max_new_tokens - len(tokens))
    return torch.tensor([LENGTH_BASE + len(tokens), score, *map(float, tokens), *pad, float(len(rows)),
                         float(max(rows, default=0))], dtype=torch.float64)


def decode(vec: torch.Tensor) -> tuple[list[int], float, int, int]:
    """(tokens, score, calls, max rows) of an answer vector."""
    v = vec.tolist()
    n = int(round(v[0] - LENGTH_BASE))
    n = max(0, min(n, len(v) - 4))
    return [int(round(t)) for t in v[2:2 + n]], v[1], int(round(v[-2])), int(round(v[-1]))


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Call the learner's function with a fresh TinyLM; returns {"out": the answer vector}."""
    refs = dict(zip(case["arg_names"], case["args"], strict=True))
    model = TinyLM(*(tensors[refs[n]["t"]] for n in MODEL_ARGS), max_calls=int(case["extra"]["max_calls"]))
    values = [refs[n]["v"] for n in CALL_ARGS]
    if case["extra"].get("default_penalty"):  # the contract's default length_penalty = 1.0, left out
        values = values[:-1]
    target = case["target"]
    if case.get("repeat"):  # a repeat-call probe: a first search on another model of the same sizes, not graded
        first = dict(zip(case["arg_names"], case["repeat"], strict=True))
        getattr(mod, target)(TinyLM(*(tensors[first[n]["t"]] for n in MODEL_ARGS), max_calls=model.max_calls),
                             *values)
    result = getattr(mod, target)(model, *values)
    tokens, score = _answer(result, int(refs["max_new_tokens"]["v"]), target)
    return {"out": encode(tokens, score, int(refs["max_new_tokens"]["v"]), model.rows)}
