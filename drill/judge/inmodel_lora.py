"""lora's in-model cases (`drill check lora.py --in-model`): the learner's LoRALinear fine-tuning the decoder.

Unit tests wrap one nn.Linear; here the learner's layer wraps the q and v projections of every layer of the
reference decoder, the way PEFT's get_peft_model attaches adapters to a Llama, and trains it for one step.
Three cases, run by `decoder.lora_run` in the child and, for the expected answers, on the reference decoder
with `drill.reference.lora` in the parent:

- "logits": a forward with the grader's adapter factors (B drawn nonzero, so the low-rank path shows);
- "step": the logits after one SGD step of next-token cross-entropy on the prompt, which equals the
  reference's step only if the gradients reach A and B through the whole model and nothing else moves;
- "moved": what that step changed, judged here so the message names the parameter: no value of the grader's
  own parameters (the frozen decoder, and the base projections the layer must freeze), every adapter factor,
  and exactly r * (in + out) trainable values per wrapped projection.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from drill.judge.compare import Comparison
from drill.judge.spec import Case

RETURNS = ("logits", "step", "moved")
LR = 0.5  # large enough that one step moves the logits far past fp32 tolerance
WHAT = {"logits": "logits of a full forward with your LoRA on every q and v projection",
        "step": "logits after one SGD step that trains your LoRA adapters",
        "moved": "what that training step changed (only the adapters may move)"}


def _factors(gen: torch.Generator, config: dict, r: int) -> dict[str, torch.Tensor]:
    """A (r, in) as PEFT's init draws it and a nonzero B (out, r), per layer and target projection."""
    from drill.judge.decoder import LORA_TARGETS

    d, h, h_kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    out = {"q_proj": d, "v_proj": h_kv * d // h}
    factors = {}
    for i in range(config["num_hidden_layers"]):
        for target in LORA_TARGETS:
            factors[f"{i}.{target}.lora_A"] = (torch.rand(r, d, generator=gen) * 2 - 1) / math.sqrt(d)
            factors[f"{i}.{target}.lora_B"] = torch.randn(out[target], r, generator=gen) * 0.2
    return factors


def trainable_per_layer(config: dict, r: int) -> int:
    """r * (in + out) summed over one layer's wrapped projections."""
    d, h, h_kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    return r * (d + d) + r * (d + h_kv * d // h)


def cases_for(seed: int, config: dict, build_decoder: Any) -> list[Case]:
    """The three cases on inmodel.py's decoder (`config`, and `build_decoder(exercise, config)`), passed in so
    that this module does not import the one that dispatches to it."""
    from drill.judge import spec
    from drill.judge.decoder import lora_run
    from drill.reference.lora import LoRALinear

    gen = torch.Generator().manual_seed(seed)
    r = int(torch.randint(2, 9, (1,), generator=gen))
    alpha = float([a for a in (4, 8, 16, 32) if a != r][int(torch.randint(0, 3, (1,), generator=gen))])
    model = build_decoder("lora", config)
    model.init_weights(generator=torch.Generator().manual_seed(seed))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    factors = _factors(gen, config, r)
    ids = torch.randint(0, config["vocab_size"], (2, 9), generator=gen)
    names = list(state)
    params = {**{f"decoder.{k}": v for k, v in state.items()}, **{f"lora.{k}": v for k, v in factors.items()}}
    extra = {"exercise": "lora", "config": config, "r": r, "alpha": alpha, "lr": LR}
    source = _source()  # parsed once: the three cases send the same decoder
    cases = []
    for returns in RETURNS:
        fresh = build_decoder("lora", config)
        fresh.load_state_dict(state)
        t0 = spec.reference_clock()
        with torch.random.fork_rng(devices=[]):  # LoRALinear's init draws from the global generator
            expected = lora_run(fresh, LoRALinear, factors, ids, returns, r=r, alpha=alpha, lr=LR, names=names)
        case = Case(
            name=f"in-model: {WHAT[returns]} of a 2-layer Llama (r={r}, alpha={alpha:g})",
            target="LoRALinear", kind="inmodel", args={"ids": ids}, params=params,
            extra={**extra, "returns": returns, "decoder": source},
            ctx={"dtype": "int64" if returns == "moved" else "float32", "in_model": True},
        )
        case.reference_s = spec.reference_clock() - t0
        case.expected, case.expected_grads = expected, {}
        if returns == "moved":
            case.judge = _judge_moved(names, expected, trainable_per_layer(config, r))
        cases.append(case)
    return cases


def _source() -> str:
    from drill.judge.decoder import source_for

    return source_for("lora")


def _judge_moved(names: list[str], expected: torch.Tensor, per: int) -> Any:
    from drill.judge.decoder import LORA_TARGETS

    want_factors, want_trainable = int(expected[-2]), int(expected[-1])

    def judge(got: torch.Tensor) -> Comparison:
        if got.dtype != torch.int64 or tuple(got.shape) != tuple(expected.shape):
            return Comparison(False, "shape", f"the step's audit came back as {tuple(got.shape)} {got.dtype}")
        moved = [(n, int(v)) for n, v in zip(names, got[:-2].tolist(), strict=True) if v]
        if moved:
            name, count = moved[0]
            others = f" (and {len(moved) - 1} more parameters)" if len(moved) > 1 else ""
            why = (": it is a base projection your LoRALinear wraps, which it must freeze (requires_grad False)"
                   if name.split(".")[-2] in LORA_TARGETS else "")
            return Comparison(False, "values", f"the training step changed {count} values of {name}{others}; only "
                              f"lora_A and lora_B may move{why}", short=f"the step moved {name}")
        factors, trainable = int(got[-2]), int(got[-1])
        if factors != want_factors:
            return Comparison(False, "values", f"the training step moved {factors} of the {want_factors} adapter "
                              "factors (lora_A and lora_B of every q and v projection): no gradient reached the "
                              "others, or they are not parameters of the model", short="an adapter did not move")
        if trainable != want_trainable:
            return Comparison(False, "values", f"the wrapped model has {trainable} trainable values; LoRA trains "
                              f"{want_trainable} (r * (in + out) per wrapped projection, {per} per layer)",
                              short="wrong trainable count")
        return Comparison(True, "", "")

    return judge
