"""Hidden tests for `debug_gpt`: a planted mini GPT, graded by behaviour against the fixed reference.

The file's line 1 says which (seed, K) wrote it (`drill.debug_round.header`); the spec rebuilds that plan
(variant and planted bugs) and draws, from the check's own seed, a hidden config, the reference's weights
and the inputs. Cases (kind "dgpt", drill/judge/dgpt.py), expected values from the same probe code run on
`reference/debug_gpt.py`:
- one probe per function of the file that can hold a bug (`bugs.FUNCTIONS`), each with stand-ins for what
  it calls, so only that function's code moves it;
- the whole-model checks of part 1: eval logits (dropout 0.1), train-mode loss and every gradient (dropout 0),
  the parameters after two `train_step` calls with AdamW(lr=1e-3), greedy tokens past block_size;
- part 2: `generate(..., use_cache=True)`, judged here (tokens, one position into wte per decode step,
  matmul FLOPs per step affine in the cache length).
`verdict` turns them into the report: part 1 passes when the whole-model checks pass, whatever the edits;
otherwise the planted bugs whose function's probe fails remain (with their line ranges), and a failure no
planted bug explains is the learner's own.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from drill.debug_round import bugs as library
from drill.debug_round.header import parse
from drill.debug_round.plant import plan_of, plant
from drill.judge import dgpt
from drill.judge.compare import Comparison
from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Case, Diagnosis, Spec, Tolerance
from drill.judge.specs._common import diagnoses

TOL = Tolerance(atol=2e-5, rtol=1e-4)
TOLERANCES = {"float32": TOL, "grad": Tolerance(atol=1e-4, rtol=1e-3)}
WHOLE_NAMES = {"logits": "eval-mode logits (dropout 0.1)", "loss_grads": "train-mode loss and gradients",
               "two_steps": "parameters after two train_step calls (AdamW)", "greedy": "greedy generate tokens"}
PROBE_PREFIX = "probe: "  # drill/debug_round/round.py reads the probe tests by it

DG = diagnoses(
    Diagnosis("dgpt_bugs_remain", "Planted bugs remain",
              "Some functions that held a planted bug still behave differently from the fixed model on a "
              "probe of that function alone.",
              "Fix the lines the report names, one function at a time (`drill hint debug_gpt`; `--explain` "
              "names each bug)."),
    Diagnosis("dgpt_own_bug", "Differs from the reference (a bug of your own)",
              "Every planted bug's probe passes, but the model still differs from the fixed one: an edit of yours "
              "changed its behaviour.",
              "Compare your edits with the starter; `drill start debug_gpt --seed N` writes it again."),
    Diagnosis("dgpt_renamed_parameter", "A parameter was renamed or reshaped",
              "The grader loads the reference's weights into your model by the starter's parameter names and "
              "shapes, so they must stay as the starter has them.",
              "Give the parameter back its starter name and shape."),
    Diagnosis("dgpt_cache_not_attempted", "Part 1 passed; part 2 not attempted",
              "Every planted bug is fixed (the whole-model checks pass). generate(..., use_cache=True) still "
              "raises NotImplementedError.",
              "Keep each layer's keys and values and run each decode step on the new token only."),
    Diagnosis("dgpt_cache_recomputes", library.CACHE_MISTAKES["dgpt_cache_recomputes"][0],
              "A KV cache exists so that a decode step costs work linear in the cache length: the earlier "
              "positions' keys and values are kept, not recomputed.",
              library.CACHE_MISTAKES["dgpt_cache_recomputes"][1]),
    Diagnosis("dgpt_cache_position", library.CACHE_MISTAKES["dgpt_cache_position"][0],
              "The cached decode must produce exactly the tokens of the uncached one.",
              "The new token at position t needs wpe[t] and a query row that sees keys 0 .. t: "
              + library.CACHE_MISTAKES["dgpt_cache_position"][1] + " is the usual slip."),
)


def _config(rng: random.Random) -> dict:
    n_head = rng.choice([2, 4])
    return {"vocab_size": rng.randint(40, 64), "block_size": rng.randint(10, 14), "n_layer": 2,
            "n_head": n_head, "n_embd": rng.choice([24, 32]), "dropout": 0.1}


def _reference_weights(ref: Any, cfg: dict, gen: torch.Generator) -> dict:
    """The reference GPT's state_dict with weights of a useful size (nanoGPT's 0.02 would hide the scale)."""
    with torch.random.fork_rng(devices=[]):
        model = ref.GPT(ref.GPTConfig(**cfg))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 2 and not name.startswith(("wte", "wpe")):
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=gen))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def cases_for(source: str, seed: int, where: str = "") -> list[Case]:
    """The seed's cases for the file whose line 1 is `source`'s (UserError when it is missing or edited)."""
    return cases_for_plan(plan_of(*parse(source, where)), seed)


def cases_for_plan(plan: Any, seed: int) -> list[Case]:
    """The seed's cases for a file planted as `plan` says (drill.debug_round.plant.Plan)."""
    from drill.reference.debug_gpt import namespace

    written = plant(plan)
    ref = namespace(plan.fused, plan.swiglu)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg = _config(rng)
    sd = _reference_weights(ref, cfg, gen)
    names = [n for n, _ in ref.GPT(ref.GPTConfig(**{**cfg, "dropout": 0.0})).named_parameters()]
    B, T, C, H, V, L = 2, cfg["block_size"] - 2, cfg["n_embd"], cfg["n_head"], cfg["vocab_size"], cfg["block_size"]
    D = C // H

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen)

    def ids(*shape: int) -> torch.Tensor:
        return torch.randint(0, V, shape, generator=gen)

    weights = {dgpt.SD + k: v for k, v in sd.items()}
    tril = torch.tril(torch.ones(T, T, dtype=torch.bool))
    inputs = {
        "causal_mask": {},
        "CausalSelfAttention.split_heads": {**weights, "x": randn(B, T, C)},
        "CausalSelfAttention.merge_heads": {**weights, "y": randn(B, H, T, D)},
        "CausalSelfAttention.scores": {**weights, "q": randn(B, H, T, D), "k": randn(B, H, T, D)},
        "CausalSelfAttention.masked_softmax": {**weights, "att": randn(B, H, T, T), "mask": tril},
        "CausalSelfAttention.mix": {**weights, "att": torch.softmax(randn(B, H, T, T), -1), "v": randn(B, H, T, D)},
        "CausalSelfAttention.forward": {**weights, "x": randn(B, T, C),
                                        "mask_full": torch.tril(torch.ones(L, L, dtype=torch.bool))},
        "MLP.forward": {**weights, "x": randn(B, T, C)},
        "Block.forward": {**weights, "x": randn(B, T, C), "w_attn": randn(C, C) / C ** 0.5,
                          "w_mlp": randn(C, C) / C ** 0.5},
        "GPT.__init__": weights,
        "GPT.embed": {**weights, "idx": ids(B, T)},
        "GPT.forward": {**weights, "idx": ids(B, T), "targets": ids(B, T),
                        **{f"w_block{i}": randn(C, C) / C ** 0.5 for i in range(cfg["n_layer"])}},
        "split_batch": {"batch": ids(B, T + 1)},
        "train_step": {"w": randn(5), "batch0": ids(B, T + 1), "batch1": ids(B, T + 1)},
        "generate": {"e": randn(V, V), "p": randn(L, V), "idx": ids(B, 3)},
    }
    base = {"config": cfg, "params": names, "T": T, "new": L}
    cases = []
    for fn in library.FUNCTIONS:
        cases.append(Case(PROBE_PREFIX + fn, "GPT", kind=dgpt.KIND, args=inputs[fn],
                          extra={**base, "probe": fn}, ctx={"role": "probe", "function": fn}))
    whole = {
        "logits": {**weights, "idx": ids(B, T)},
        "loss_grads": {**weights, "idx": ids(B, T), "targets": ids(B, T)},
        "two_steps": {**weights, "batch0": ids(B, T + 1), "batch1": ids(B, T + 1)},
        "greedy": {**weights, "idx": ids(B, 4)},
    }
    for name, args in whole.items():
        cases.append(Case(WHOLE_NAMES[name], "GPT", kind=dgpt.KIND, args=args, extra={**base, "probe": name},
                          ctx={"role": "whole", "check": name}))
    # part 2: many rows, so that a cache slip (a wrong position) shows in the greedy tokens of some row
    prompt, rows = 2, 8
    cache = Case("part 2: generate(..., use_cache=True)", "GPT", kind=dgpt.KIND,
                 args={**weights, "idx": ids(rows, prompt)}, extra={**base, "probe": "cache", "new": L - prompt},
                 ctx={"role": "cache", "batch": rows, "prompt": prompt, "new": L - prompt})
    cache.judge = lambda got, case=cache: judge_cache(case, got)
    cases.append(cache)
    for c in cases:
        c.ctx.update(plan=plan, lines=written.lines)
    return cases


def reference(case: Case) -> tuple[torch.Tensor, dict]:
    from drill.reference.debug_gpt import namespace

    plan = case.ctx["plan"]
    ref = namespace(plan.fused, plan.swiglu)
    t = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in case.args.items()}
    probe = "greedy" if case.extra["probe"] == "cache" else case.extra["probe"]
    torch.manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        out = dgpt.run_probe(ref, probe, case.extra, t)
    return out, {}


def judge_cache(case: Case, got: torch.Tensor) -> Comparison:
    """Part 2: the cached tokens equal the reference's and the learner's uncached ones; every decode step
    feeds one position per row into wte; the matmul FLOPs per step are affine in the cache length."""
    B, prompt, new = case.ctx["batch"], case.ctx["prompt"], case.ctx["new"]
    n = B * (prompt + new)
    v = got.tolist()
    if len(v) != 2 * n + 2 * (2 * new + 2) + 1:
        return Comparison(False, "shape", "could not read the cache measurement", diagnosis=DG["dgpt_cache_position"])
    cached, plain = got[:n], got[n:2 * n]
    width = 2 * new + 2
    positions = [int(x) for x in v[2 * n:2 * n + width] if x >= 0]
    at = [int(x) for x in v[2 * n + width:] if x >= 0]
    expected = case.expected.reshape(-1)
    if not torch.equal(cached, expected) or not torch.equal(cached, plain):
        first = next((i for i in range(n) if cached[i] != expected[i]), 0) % (prompt + new) - prompt
        return Comparison(False, "values", f"use_cache=True gives other tokens than use_cache=False and the "
                                           f"reference (first at generated token {max(first, 0)})",
                          diagnosis=DG["dgpt_cache_position"])
    if len(positions) < new:
        return Comparison(False, "values", f"wte was called {len(positions)} times for {new} tokens: could not "
                                           "measure the decode steps (does the cached path use self.wte?)",
                          diagnosis=DG["dgpt_cache_recomputes"])
    decode = positions[1:new]
    if any(p != B for p in decode):
        return Comparison(False, "values", f"positions entering wte per decode step: {decode} (one per row, {B}, "
                                           "expected: run the model on the new token only)",
                          diagnosis=DG["dgpt_cache_recomputes"])
    steps = [b - a for a, b in zip(at[1:new], at[2:new + 1], strict=False)]
    second = [abs(s2 - 2 * s1 + s0) for s0, s1, s2 in zip(steps, steps[1:], steps[2:], strict=False)]
    if steps and max(second, default=0) > 0.01 * max(steps):
        return Comparison(False, "values", f"matmul FLOPs per decode step {steps} grow faster than linearly in "
                                           "the cache length", diagnosis=DG["dgpt_cache_recomputes"])
    return Comparison(True, "", "")


def _failed_names(evs: list) -> str:
    return ", ".join(WHOLE_NAMES.get(ev.case.ctx.get("check"), ev.case.name) for ev in evs)


def _message(ev: Any) -> str:
    if ev.forward is not None and not ev.forward.ok:
        return ev.forward.message
    return str(ev.record.get("message", ev.status))


def ranges(lines: dict, ids: list) -> str:
    spans = [lines[b] for b in ids]
    return ", ".join(f"line {a}" if a == b else f"lines {a}-{b}" for a, b in spans)


def verdict(evals: list) -> tuple[Diagnosis, str]:
    """The report of a failing check: renamed parameter, remaining planted bugs, own bugs, or part 2."""
    plan, lines = evals[0].case.ctx["plan"], evals[0].case.ctx["lines"]
    renamed = next((ev for ev in evals if ev.status == "wrong_shape" and "parameter" in _message(ev)), None)
    if renamed is not None:
        return DG["dgpt_renamed_parameter"], _message(renamed)
    whole = [ev for ev in evals if ev.case.ctx["role"] == "whole"]
    failing_whole = [ev for ev in whole if not ev.passed]
    if not failing_whole:
        cache = next(ev for ev in evals if ev.case.ctx["role"] == "cache")
        if cache.status == "not_implemented":
            return DG["dgpt_cache_not_attempted"], "part 1 passed: 0 planted bugs remain; part 2 not attempted"
        if cache.forward is not None and cache.forward.diagnosis is not None:
            return cache.forward.diagnosis, "part 1 passed; part 2: " + cache.forward.message
        return DG["dgpt_cache_position"], "part 1 passed; part 2: " + _message(cache)
    for ev in evals:  # part 2 is graded once part 1 passes
        if ev.case.ctx["role"] == "cache":
            ev.status, ev.record, ev.forward = "not_run", {"message": "graded once part 1 passes"}, None
    probes = {ev.case.ctx["function"]: ev for ev in evals if ev.case.ctx["role"] == "probe"}
    planted_fns = {library.BY_ID[b].function for b in plan.ids}
    remaining = [b for b in plan.ids if not probes[library.BY_ID[b].function].passed]
    own = [fn for fn in library.FUNCTIONS if fn not in planted_fns and not probes[fn].passed]
    notes = []
    if own:
        notes.append("your own change in " + ", ".join(own) + " (no planted bug there)")
    if not remaining:
        detail = (f"0 of {len(plan.ids)} planted bugs remain, but the model differs from the reference in "
                  f"{_failed_names(failing_whole)}: {_message(failing_whole[0])}")
        if notes:
            detail += "; " + notes[0]
        return DG["dgpt_own_bug"], detail
    detail = (f"{len(remaining)} of {len(plan.ids)} planted bugs remain, planted at {ranges(lines, remaining)} "
              f"(drill check --explain names them)")
    if notes:
        detail += "; also " + notes[0]
    return DG["dgpt_bugs_remain"], detail


def make_cases(seed: int) -> list[Case]:
    """Without a file: the cases of the documented default starter (exercises/debug_gpt.py)."""
    from drill.debug_round.plant import DEFAULT_SEED, write_starter

    return cases_for(write_starter(DEFAULT_SEED, library.DEFAULT_BUGS).text, seed)


SPEC = Spec(
    name="debug_gpt",
    graded=("GPTConfig", "GPT", "train_step", "generate"),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    source_cases=cases_for,
    verdict=verdict,
    no_determinism_probes="the mix probe and the eval logits are the determinism checks: eval-mode dropout "
                          "(dgpt_dropout_at_eval) fails them against the fixed model",
)
