"""Parent-side judging of the in-model cases (`drill check --in-model`).

`inmodel.py` builds the cases and is also loaded by path in the child, so it
may import nothing of drill; what only the parent needs lives here:

- `compare_tokens`: greedy generation yields token *ids*. A difference of two
  ids is not an error size (id 3 vs id 89 is not "off by 86"), so the
  comparison names the first step where the generation leaves the
  reference's and reports no max abs/rel error.
- `IN_MODEL_ONLY` (defined with the other generic ids in diagnose.py): the
  diagnosis when every unit test passes and only the decoder run disagrees.
- `in_model_note`: when unit tests fail too, the diagnosis counts only unit
  tests ("on 9 failing tests"); this says where the other failures are.
"""

from __future__ import annotations

from typing import Any

import torch

from drill.judge.compare import Comparison, compare
from drill.judge.diagnose import GENERIC
from drill.judge.spec import Tolerance

IN_MODEL_ONLY = GENERIC["in_model_only"]

_EXACT = Tolerance(0.0, 0.0)


def is_token_case(case: Any) -> bool:
    """The in-model case whose answer is greedy token ids (not logits)."""
    return bool(case.ctx.get("in_model")) and (case.extra or {}).get("returns") == "tokens"


def label(case: Any) -> str:
    """The short name of an in-model case for the panel's summary line ('' for a unit test)."""
    if not case.ctx.get("in_model"):
        return ""
    if is_token_case(case):
        return f"{int(case.extra.get('new_tokens', 0))} greedy tokens"
    return {"step": "a training step", "moved": "what the step moved"}.get((case.extra or {}).get("returns"), "logits")


def compare_tokens(got: torch.Tensor, expected: torch.Tensor, prompt_len: int) -> Comparison:
    """Exact comparison of generated ids (B, prompt + new): the first diverging step, never an error size."""
    base = compare(got, expected, _EXACT, dtype=expected.dtype, what="generated tokens")
    if base.reason in ("shape", "dtype"):
        return Comparison(False, base.reason, base.message)
    differ = got != expected
    if not bool(differ.any()):
        return Comparison(True, "", "")
    new_tokens = expected.shape[-1] - prompt_len
    col = int(differ.any(dim=0).nonzero()[0])
    row = int(differ[:, col].nonzero()[0])
    a, b = int(got[row, col]), int(expected[row, col])
    step = col - prompt_len + 1
    generated = differ[:, prompt_len:]
    sequence = f" in sequence {row + 1} of {expected.shape[0]}" if expected.shape[0] > 1 else ""
    if step < 1:  # the prompt itself came back changed (an in-place write into the ids?)
        short = f"prompt token {col} came back changed (got id {a}, expected {b})"
        message = short + sequence
    else:
        short = f"greedy tokens diverge at step {step} of {new_tokens} (got id {a}, expected {b})"
        message = (f"greedy tokens diverge from the reference at step {step} of {new_tokens} (got id {a}, expected {b})"
                   f"{sequence}; {int(generated.sum())} of {generated.numel()} generated tokens differ")
    return Comparison(False, "values", message, short=short)


def in_model_note(evals: list[Any]) -> str:
    """'' or a clause naming the failing in-model tests that a unit-test diagnosis does not count."""
    failing = sum(1 for ev in evals if ev.case.ctx.get("in_model") and not ev.passed)
    if not failing:
        return ""
    what = "test is an in-model case" if failing == 1 else f"{failing} failing tests are in-model cases"
    return f"; the other {'failing ' if failing == 1 else ''}{what} (your component inside the reference decoder)"
