"""Hidden tests for `speculative_decoding`: verify(draft_tokens, draft_probs, target_probs, uniforms) -> list[int].

The random numbers are inputs (uniforms[i] decides draft i, uniforms[K] draws the one final token), so
every case but one is graded exactly: a call case whose Python list of ints the child turns into an int64
tensor (extra "returns": "int_list"), compared with no tolerance; a failing test shows both lists and the
first position where they differ. Per seed:
- LeetGPU 87's worked example (drafts [1, 2, 0], uniforms [0.5, 0.7, 0.3, 0.9] -> [1, 3]);
- drawn steps, K from 1 to 8, V small (4 .. 12) and V ~ 1000, uniforms drawn over [0, 1);
- every draft accepted (the bonus from p[K]), ratios >= 1 (accepted whatever the uniform), the first draft
  rejected, a draft the target gives probability 0 (always rejected);
- a first rejection whose own uniform, rescaled or not, and uniforms[K] fall in three different steps of the
  residual's CDF (drawn last), so reusing the rejected uniform and rescaling it are told apart on every seed;
- a distribution check: 30 000 calls in one case (extra "over"), judged in the parent: the first token must
  follow p[0] and the second p[1] by chi-square, and a token of target probability 0 never appears.
Every uniform of an exactly graded case is kept at least 1e-4 from each acceptance ratio and each CDF step
the contract's path meets, and, on the small vocabularies, from those of the known mistakes too, so fp32
and fp64 arithmetic agree and a mistake's tokens are predictable. Every call runs with the global random
generators watched (extra "rng_unchanged"): a call that moves torch's or Python's fails, named
spec_rng_inside.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from drill.judge.spec import KIND_CALL, Bug, Case, Diagnosis, Spec, Tolerance
from drill.judge.specs._common import Draw, diagnoses, repeat_probe, twice_probes

TARGET = "verify"
ARGS = ("draft_tokens", "draft_probs", "target_probs", "uniforms")
CLEAR = 1e-4  # the contract's margin between a uniform and every threshold
N_DRAWS = 30_000
P_MIN = 1e-6  # a correct sampler fails the chi-square with this probability per run

TOLERANCES = {"exact": Tolerance(atol=0.0, rtol=0.0)}

SD = diagnoses(
    Diagnosis("spec_resample_target", "The rejected draft is replaced by a token from p, not the residual",
              "After a rejection the replacement must come from normalize(max(0, p - q)): the part of the target's "
              "distribution the draft under-covers. Drawing it from p itself counts the mass the accepted drafts "
              "already delivered twice, so the output no longer follows the target.",
              "On rejection at i, draw from r = clamp(p[i] - q[i], min=0); r / r.sum()."),
    Diagnosis("spec_ratio_inverted", "Acceptance ratio upside down: q / p instead of p / q",
              "Draft x is kept with probability min(1, p[i, x] / q[i, x]): the target's probability over the draft's. "
              "q / p keeps the tokens the target likes least, and a token the target gives probability 0 becomes "
              "certain (q / 0 is infinite).",
              "accept iff uniforms[i] < target_probs[i, x] / draft_probs[i, x]."),
    Diagnosis("spec_no_bonus", "No bonus token when every draft is accepted",
              "When all K drafts pass, the target's row K (the position after the last draft) was computed in the "
              "same pass and gives one more token for free: the step returns K + 1 tokens, never fewer than 1.",
              "After the loop without a rejection, append inverse_cdf(p[K], uniforms[K])."),
    Diagnosis("spec_continue_after_reject", "Verification goes on after the first rejection",
              "The first rejected draft ends the step: every later draft was drawn from the draft model conditioned "
              "on the rejected token, which is no longer in the sequence, so none of them may be kept.",
              "Return right after appending the residual token (break out of the loop, no bonus)."),
    Diagnosis("spec_greedy_match", "Drafts accepted by matching the target's argmax",
              "Accepting x iff x == argmax p[i] is greedy speculative decoding: it reproduces greedy decoding of "
              "the target, not sampling from it. The contract samples: accept iff uniforms[i] < p[i, x] / q[i, x].",
              "Use the probability ratio and the draft's own uniform, not argmax."),
    Diagnosis("spec_residual_unnormalised", "The residual max(0, p - q) is not normalised",
              "max(0, p - q) sums to less than 1, so its CDF never reaches a uniform above that sum: the inverse CDF "
              "then falls to the last token (or past the vocabulary). Divide by its sum before the inverse CDF.",
              "r = (p[i] - q[i]).clamp(min=0); r = r / r.sum()."),
    Diagnosis("spec_wrong_uniform", "The rejected draft's own uniform draws the residual token",
              "uniforms[i] already decided that draft i is rejected: it is known to be >= the ratio, no longer "
              "uniform on [0, 1). The contract draws the final token, residual or bonus, with uniforms[K].",
              "inverse_cdf(residual, uniforms[K]), whichever position rejected."),
    Diagnosis("spec_rescaled_uniform", "The rejected draft's uniform rescaled, (u - r) / (1 - r), draws the residual",
              "Rescaling the rejected uniform to [0, 1) is a correct sampler too, but it gives other tokens for the "
              "same uniforms: the contract (LeetGPU 87's layout) spends a separate uniform, the last, on the final "
              "token.",
              "Draw the residual token with uniforms[K]."),
    Diagnosis("spec_bonus_wrong_row", "The bonus token drawn from the wrong row",
              "Row K of target_probs is the target's distribution after all K drafts: the bonus comes from there. "
              "p[K - 1] is the distribution the last draft was checked against, and q has no row for the bonus "
              "position at all.",
              "bonus = inverse_cdf(target_probs[K], uniforms[K])."),
    Diagnosis("spec_position_offset", "Draft i checked against p[i + 1]",
              "target_probs row i is the target's distribution at the position of draft i (the same position as "
              "draft_probs row i): p[i, x] / q[i, x]. Shifting by one, as for logits where row i predicts token "
              "i + 1, compares each draft with the next position's distribution.",
              "Index both distributions with the same i; row K is used only for the bonus."),
    Diagnosis("spec_rng_inside", "verify draws random numbers of its own",
              "Random numbers are inputs: uniforms[i] decides draft i and uniforms[K] draws the final token, so one "
              "step is a pure function of its arguments. torch.multinomial, torch.rand or random.random inside it "
              "move the global generators and give tokens no one can reproduce.",
              "Use the inverse CDF of uniforms[K]: torch.searchsorted(torch.cumsum(dist, 0), u, right=True)."),
)


# ----------------------------------------------------------------------------- the contract with knobs


def _inverse_cdf(dist: torch.Tensor, u: float, *, past_end: str = "last_positive") -> int:
    cdf = torch.cumsum(dist, 0)
    j = int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True)[0])
    if j >= dist.numel():
        j = {"last_positive": lambda: int(torch.nonzero(dist > 0).max()), "clamp": lambda: dist.numel() - 1,
             "vocab": lambda: dist.numel()}[past_end]()
    return j


def _residual(p_row: torch.Tensor, q_row: torch.Tensor, normalise: bool = True) -> torch.Tensor:
    r = (p_row - q_row).clamp_min(0.0)
    return r / r.sum() if normalise else r


def _steps(dt: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor, *, accept: str = "ratio",
           final: str = "residual", past_end: str = "last_positive", final_u: str = "last", bonus: str = "p_k",
           after: str = "stop") -> list[int]:
    """The contract in float64, one knob per mistake (the defaults are the contract itself)."""
    k = dt.numel()
    out: list[int] = []
    rejected = False
    for i in range(k):
        x = int(dt[i])
        row = i + 1 if accept == "offset" else i
        if accept == "inverted":
            ratio = float(q[i, x] / p[i, x]) if p[i, x] > 0 else math.inf
        else:
            ratio = float(p[row, x] / q[i, x])
        keep = (x == int(torch.argmax(p[i]))) if accept.startswith("greedy") else float(u[i]) < ratio
        if keep:
            out.append(x)
            continue
        rejected = True
        if final_u == "own":
            uu = float(u[i])
        elif final_u == "rescaled":
            uu = (float(u[i]) - ratio) / (1.0 - ratio)
        else:
            uu = float(u[k])
        if accept == "greedy_argmax":
            out.append(int(torch.argmax(p[i])))
        elif final == "target":
            out.append(_inverse_cdf(p[i] / p[i].sum(), uu))
        elif final == "unnormalised":
            out.append(_inverse_cdf(_residual(p[i], q[i], False), uu, past_end=past_end))
        else:
            out.append(_inverse_cdf(_residual(p[row], q[i]), uu))
        if after == "stop":
            return out
        if after == "skip_on":  # the rejected draft's token given back: nothing kept for it
            out.pop()
    if after == "go_on_flag" and rejected:
        return out
    if after == "skip_on" and rejected:
        out.append(_inverse_cdf(p[k], float(u[k])))
        return out
    if bonus == "none":
        return out
    if accept == "greedy_argmax":
        out.append(int(torch.argmax(p[k])))
        return out
    dist = {"p_k": p[k], "p_k_minus_1": p[k - 1], "q_k_minus_1": q[k - 1]}[bonus]
    out.append(_inverse_cdf(dist, float(u[k])))
    return out


def _inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    a = case.args
    return a["draft_tokens"], a["draft_probs"].double(), a["target_probs"].double(), a["uniforms"].double()


def reference(case: Case):
    if case.judge is not None:  # the distribution check: judged in the parent, no expected answer
        return torch.zeros(0, dtype=torch.int64), {}
    from drill.reference.speculative import speculative_verify

    return torch.tensor(speculative_verify(*(case.args[n] for n in ARGS)), dtype=torch.int64), {}


# ----------------------------------------------------------------------------- drawing


def _dist(d: Draw, v: int, scale: float) -> torch.Tensor:
    return torch.softmax(torch.randn(v, generator=d.gen, dtype=torch.float64) * scale, 0)


def _fp32(t: torch.Tensor) -> torch.Tensor:
    """Rows as fp32, each renormalised in float64 first (the values the learner and the reference both read)."""
    return (t / t.sum(-1, keepdim=True)).float()


def _cdf_steps(dist: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(dist, 0)


def _clear_uniform(d: Draw, thresholds: list[torch.Tensor], lo: float = 0.0, hi: float = 1.0) -> float:
    """A uniform on [lo, hi), at least CLEAR from every threshold (and from hi: 1 is a CDF's last step)."""
    t = torch.cat([x.reshape(-1).double() for x in thresholds] + [torch.tensor([hi], dtype=torch.float64)])
    for _ in range(10_000):
        u = float(torch.tensor(lo + (hi - lo) * d.rng.random(), dtype=torch.float32))  # an fp32 value exactly
        if u >= 0.0 and bool((t - u).abs().min() >= CLEAR):
            return u
    raise AssertionError("no clear uniform: too many thresholds")


def _uniforms(d: Draw, dt: torch.Tensor, q32: torch.Tensor, p32: torch.Tensor, *, mode: str = "random",
              rich: bool = True) -> torch.Tensor:
    """uniforms[0 .. K-1] (their mode: "random", "accept" below every ratio, "reject_first" above the first), then
    uniforms[K] clear of the CDF steps the path of the contract meets (and the mistakes' on small vocabularies)."""
    q, p = q32.double(), p32.double()
    k = dt.numel()
    us: list[float] = []
    for i in range(k):
        x = int(dt[i])
        r = float(p[i, x] / q[i, x])
        near = [torch.tensor([r])]
        if rich:
            if p[i, x] > 0:
                near.append(torch.tensor([float(q[i, x] / p[i, x])]))
            near.append(torch.tensor([float(p[i + 1, x] / q[i, x])]))
            res, unres = _residual(p[i], q[i]), _residual(p[i], q[i], False)
            near += [_cdf_steps(res), _cdf_steps(unres), _cdf_steps(_residual(p[i + 1], q[i]))]
            if r < 1:
                near.append(r + (1 - r) * _cdf_steps(res))
        if mode in ("accept", "reject_first") and r > 4 * CLEAR and not (mode == "reject_first" and i == 0):
            us.append(_clear_uniform(d, near, 0.0, min(r, 1.0)))
        elif mode == "reject_first" and i == 0:
            us.append(_clear_uniform(d, near, r, 1.0))
        else:
            us.append(_clear_uniform(d, near))
    # the final distribution on the contract's path
    final = p[k]
    for i in range(k):
        if us[i] >= float(p[i, int(dt[i])] / q[i, int(dt[i])]):
            final = _residual(p[i], q[i])
            break
    near = [_cdf_steps(final)]
    if rich:
        for i in range(k):
            near += [_cdf_steps(_residual(p[i], q[i])), _cdf_steps(_residual(p[i], q[i], False)),
                     _cdf_steps(p[i]), _cdf_steps(_residual(p[i + 1], q[i]))]
        near += [_cdf_steps(p[k]), _cdf_steps(q[k - 1])]
    us.append(_clear_uniform(d, near))
    return torch.tensor(us, dtype=torch.float32)


def _draw_step(d: Draw, k: int, v: int, *, zero_at: int | None = None, ratios_ge_1: bool = False,
               shrink_first: bool = False):
    """Draft and target rows (fp32), drafts drawn from q; `zero_at`: the target gives that draft probability 0;
    `ratios_ge_1`: q lowered at each draft so that p / q > 1 there; `shrink_first`: p / q <= 1/2 at draft 0."""
    scale = d.rng.uniform(0.5, 2.5)
    q = torch.stack([_dist(d, v, scale) for _ in range(k)])
    p = torch.stack([_dist(d, v, scale) for _ in range(k + 1)])
    dt = torch.stack([torch.multinomial(q[i], 1, generator=d.gen)[0] for i in range(k)]).to(torch.int64)
    for i in range(k):
        x = int(dt[i])
        if ratios_ge_1:
            q[i, x] = min(float(q[i, x]), float(p[i, x])) * 0.5
            q[i] = q[i] / q[i].sum()
        if zero_at == i:
            p[i, x] = 0.0
        if shrink_first and i == 0:
            p[0, x] = min(float(p[0, x]), 0.5 * float(q[0, x]))
    return dt, _fp32(q), _fp32(p)


def _case(name: str, dt: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> Case:
    return Case(name=name, target=TARGET, kind=KIND_CALL,
                args={"draft_tokens": dt, "draft_probs": q, "target_probs": p, "uniforms": u},
                out_dtype=torch.int64, ctx={"dtype": "float32", "tol": "exact"},
                extra={"returns": "int_list", "rng_unchanged": True})


def _leetgpu() -> Case:
    q = torch.tensor([[0.1, 0.5, 0.2, 0.2], [0.2, 0.2, 0.5, 0.1], [0.4, 0.3, 0.2, 0.1]])
    p = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.25, 0.05, 0.25, 0.45], [0.3, 0.3, 0.3, 0.1], [0.25, 0.25, 0.25, 0.25]])
    return _case("LeetGPU 87's worked example: drafts [1, 2, 0], uniforms [0.5, 0.7, 0.3, 0.9] -> [1, 3]",
                 torch.tensor([1, 2, 0]), q, p, torch.tensor([0.5, 0.7, 0.3, 0.9]))


def _drawn(d: Draw, name: str, k: int, v: int, *, mode: str = "random", **how) -> Case:
    dt, q, p = _draw_step(d, k, v, shrink_first=mode == "reject_first", **how)
    return _case(f"{name} (K = {k}, V = {v})", dt, q, p, _uniforms(d, dt, q, p, mode=mode, rich=v <= 64))


def _distribution_case(d: Draw) -> Case:
    """K = 2, V = 6, 30 000 calls with drafts drawn from q and fresh uniforms; the target gives one token
    probability 0 at each position, a token the draft proposes often."""
    v = 6
    q = torch.stack([_dist(d, v, 1.0) for _ in range(2)])
    p = torch.stack([_dist(d, v, 1.0) for _ in range(3)])
    zeros = []
    for i in range(2):
        z = int(torch.argmax(q[i]))
        p[i, z] = 0.0
        zeros.append(z)
    q32, p32 = _fp32(q), _fp32(p)
    dt = torch.stack([torch.multinomial(q32[i].double(), N_DRAWS, replacement=True, generator=d.gen)
                      for i in range(2)], 1).to(torch.int64)
    u = torch.rand(N_DRAWS, 3, generator=d.gen, dtype=torch.float32)
    case = _case(f"distribution over {N_DRAWS} calls (K = 2, V = {v}): token 1 ~ p[0], token 2 ~ p[1], "
                 f"no token of target probability 0", dt, q32, p32, u)
    case.extra = {**case.extra, "over": ["draft_tokens", "uniforms"], "width": 3}
    case.ctx["zeros"] = zeros
    case.judge = _distribution_judge(p32.double(), zeros)
    return case


def _chi_square(tokens: torch.Tensor, dist: torch.Tensor) -> tuple[float, float]:
    """(statistic, p-value) of the tokens against dist over its positive entries."""
    n = tokens.numel()
    support = dist > 0
    counts = torch.bincount(tokens, minlength=dist.numel()).double()[: dist.numel()]
    want = dist / dist.sum() * n
    stat = float(((counts[support] - want[support]) ** 2 / want[support]).sum())
    df = int(support.sum()) - 1
    return stat, float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                               torch.tensor(stat / 2, dtype=torch.float64)))


def _distribution_judge(p: torch.Tensor, zeros: list[int]):
    def judge(got):
        from drill.judge.compare import Comparison

        v = p.shape[1]
        if not isinstance(got, torch.Tensor) or got.shape != (N_DRAWS, 3):
            return Comparison(False, "shape", "the distribution check's answers could not be read back")
        problems = []
        first = got[:, 0]
        second = got[:, 1][got[:, 1] >= 0]
        for label, toks, row in (("the first token", first, 0), ("the second token", second, 1)):
            if toks.numel() == 0:
                problems.append(f"{label} never appeared")
                continue
            if bool(((toks < 0) | (toks >= v)).any()):
                problems.append(f"{label} left the vocabulary (ids 0 .. {v - 1})")
                continue
            hits = int((toks == zeros[row]).sum())
            if hits:
                problems.append(f"{label} was {zeros[row]}, which the target gives probability 0, in {hits} calls")
            stat, pval = _chi_square(toks, p[row])
            if pval < P_MIN:
                problems.append(f"{label} does not follow p[{row}]: chi-square {stat:.1f} over {v - 2} degrees of "
                                f"freedom on {toks.numel()} draws, p-value {pval:.1e}")
        if not problems:
            return Comparison(True, "", "")
        message = "; ".join(problems)
        return Comparison(False, "values", message, short=message)

    return judge


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases = [_leetgpu()]
    cases.append(_drawn(d, "one draft", 1, d.int(4, 12)))
    for _ in range(3):
        cases.append(_drawn(d, "a drawn step", d.int(2, 8), d.int(4, 12)))
    cases.append(_drawn(d, "a drawn step over a large vocabulary", d.int(3, 6), d.int(900, 1100)))
    cases.append(_drawn(d, "every draft accepted: the bonus from p[K]", d.int(2, 6), d.int(4, 12), mode="accept"))
    cases.append(_drawn(d, "every draft accepted over a large vocabulary", d.int(2, 5), d.int(900, 1100),
                        mode="accept"))
    cases.append(_drawn(d, "ratios >= 1 at every draft: all accepted whatever the uniform", d.int(2, 6),
                        d.int(4, 12), ratios_ge_1=True))
    cases.append(_drawn(d, "the first draft rejected", d.int(2, 6), d.int(4, 12), mode="reject_first"))
    k = d.int(2, 6)
    cases.append(_drawn(d, "the target gives draft 1 probability 0", k, d.int(4, 12), zero_at=1,
                        mode="accept"))
    cases.append(_drawn(d, "the target gives draft 0 probability 0", d.int(1, 4), d.int(900, 1100), zero_at=0))
    twice_probes(cases)
    cases.append(_distribution_case(d))
    # Drawn last, so every earlier case keeps its draws: a first call on other drafts and distributions of the
    # same K and V (a vocabulary of ~1000, so the drafts differ), then the graded one.
    k, v = d.int(3, 6), d.int(900, 1100)
    first = _drawn(d, "the first call", k, v)
    cases.append(repeat_probe(_drawn(d, "repeat call: verify twice, same K and V", k, v), first.args))
    cases.append(_uniform_separating(d))
    return cases


def _uniform_separating(d: Draw) -> Case:
    """The first draft rejected, drawn until the residual's token differs for each uniform a sampler may spend on
    it: uniforms[K] (the contract), uniforms[0] itself, and uniforms[0] rescaled to (u - r) / (1 - r). Without it
    the drawn steps can leave the last two in one CDF step, and the two mistakes get one another's name."""
    for _ in range(500):
        k, v = d.int(2, 5), d.int(6, 12)
        dt, q, p = _draw_step(d, k, v, shrink_first=True)
        u = _uniforms(d, dt, q, p, mode="reject_first")
        x = int(dt[0])
        r = float(p[0, x].double() / q[0, x].double())
        res = _residual(p[0].double(), q[0].double())
        u0 = float(u[0])
        picks = {_inverse_cdf(res, float(u[k])), _inverse_cdf(res, u0), _inverse_cdf(res, (u0 - r) / (1 - r))}
        if len(picks) == 3 and u0 >= r and bool((u >= 0).all() and (u < 1).all()):  # rejected, uniforms in [0, 1)
            return _case(f"the first draft rejected, its uniform and uniforms[K] in different residual steps "
                         f"(K = {k}, V = {v})", dt, q, p, u)
    raise AssertionError("no step separates the three uniforms")


# ----------------------------------------------------------------------------- variants


def _variant(**knobs) -> Callable[[Case], torch.Tensor | None]:
    def run(case: Case):
        if case.judge is not None:
            return None
        return torch.tensor(_steps(*_inputs(case), **knobs), dtype=torch.int64)

    return run


SPEC_VARIANTS: list[tuple[str, str, Callable[[Case], torch.Tensor | None]]] = [
    ("spec_resample_target", "the replacement drawn from p[i]", _variant(final="target")),
    ("spec_ratio_inverted", "accept iff u < q / p", _variant(accept="inverted")),
    ("spec_no_bonus", "no token after K accepted drafts", _variant(bonus="none")),
    ("spec_continue_after_reject", "the residual token appended, the loop goes on, the bonus always",
     _variant(after="go_on")),
    ("spec_continue_after_reject", "the residual token appended, the loop goes on, no bonus after a rejection",
     _variant(after="go_on_flag")),
    ("spec_continue_after_reject", "the rejected draft skipped, the loop goes on, one token from p[K] at the end",
     _variant(after="skip_on")),
    ("spec_greedy_match", "accept iff x == argmax p[i]", _variant(accept="greedy")),
    ("spec_greedy_match", "accept iff x == argmax p[i], argmax p as the final token",
     _variant(accept="greedy_argmax")),
    ("spec_residual_unnormalised", "max(0, p - q) unnormalised, the last positive token past its mass",
     _variant(final="unnormalised")),
    ("spec_residual_unnormalised", "max(0, p - q) unnormalised, token V - 1 past its mass",
     _variant(final="unnormalised", past_end="clamp")),
    ("spec_residual_unnormalised", "max(0, p - q) unnormalised, token V past its mass",
     _variant(final="unnormalised", past_end="vocab")),
    ("spec_wrong_uniform", "uniforms[i] draws the residual", _variant(final_u="own")),
    ("spec_rescaled_uniform", "(u - r) / (1 - r) draws the residual", _variant(final_u="rescaled")),
    ("spec_bonus_wrong_row", "the bonus from p[K - 1]", _variant(bonus="p_k_minus_1")),
    ("spec_bonus_wrong_row", "the bonus from q[K - 1]", _variant(bonus="q_k_minus_1")),
    ("spec_position_offset", "draft i against p[i + 1] (ratio and residual)", _variant(accept="offset")),
]

SPEC = Spec(
    name="speculative_decoding",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=tuple(Bug(SD[i], fn, label) for i, label, fn in SPEC_VARIANTS),
    exception_bugs=(("changed the global random state", SD["spec_rng_inside"]),),
)
