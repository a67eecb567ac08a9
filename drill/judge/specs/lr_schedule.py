"""Hidden tests for `lr_schedule`: cosine_lr(it, max_lr, min_lr, warmup_iters, cosine_cycle_iters).

Every case is a map (one call per row, each answer a Python float) over one
piece of the schedule, so a mistake in one piece fails only that piece's tests
and the variants below can tell them apart:
- CS336's own list, (1.0, 0.1, 7, 21) at it = 0 .. 24, which every piece and
  both boundaries cross;
- the warmup alone on drawn schedules (it = 0, 1, a few inside, Tw - 1): the
  nanoGPT warmup (it + 1) / (Tw + 1) and integer division show here;
- the cosine alone (Tw, just after it, drawn steps, Tc - 1, Tc), where the
  progress counted from 0 or divided by Tc, a missing min_lr, a rising cosine,
  a missing 1/2 and the amplitude taken from max_lr differ;
- after the cycle (Tc + 1, 2 Tc, far later): no floor lets the cosine climb back;
- warmup_iters = 0, which starts at max_lr (and divides by zero in code that
  computes the warmup ratio before choosing the piece);
- a long schedule of LLM size (Tw 2000, Tc 600 000, lr 3e-4 .. 3e-5).
The rates are drawn log-uniformly over six decades and min_lr is never 0 on the
drawn schedules, so "min_lr never added" cannot hide behind a zero floor.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from drill.judge.spec import KIND_MAP, Bug, Case, Diagnosis, Spec, Tolerance
from drill.judge.specs._common import Draw, diagnoses

TARGET = "cosine_lr"
Row = tuple[int, float, float, int, int]

# The contract's "relative 1e-12": a float64 closed form in any order of operations is within a few ulps;
# fp32 arithmetic anywhere (a torch.cos on a float32 tensor) is 1e-7 off and fails, as the contract means.
TOLERANCES = {"scalar": Tolerance(atol=0.0, rtol=1e-12)}

LD = diagnoses(
    Diagnosis("lr_warmup_plus_one", "Warmup as (it + 1) / (warmup_iters + 1)",
              "nanoGPT's warmup starts at max_lr / (Tw + 1) so that step 0 trains at all; the contract's (CS336's) "
              "starts at exactly 0 and reaches max_lr at it = Tw: it / Tw * max_lr.",
              "return it / warmup_iters * max_lr for it < warmup_iters."),
    Diagnosis("lr_progress_from_zero", "Cosine progress counted from step 0",
              "The cosine starts where the warmup ends: its progress is (it - Tw) / (Tc - Tw), 0 at Tw and 1 at Tc. "
              "it / (Tc - Tw) is already past 0 at Tw, so the rate jumps down when the warmup ends and reaches the "
              "floor early.",
              "progress = (it - warmup_iters) / (cosine_cycle_iters - warmup_iters)."),
    Diagnosis("lr_divides_by_cycle", "Cosine progress divided by cosine_cycle_iters",
              "cosine_cycle_iters is the step where the cosine ENDS, not its length: the cosine lasts Tc - Tw steps. "
              "(it - Tw) / Tc never reaches 1, so the rate at Tc is still above min_lr and then drops to it.",
              "Divide by (cosine_cycle_iters - warmup_iters)."),
    Diagnosis("lr_no_floor", "No floor after the cycle: the cosine climbs back",
              "cos(pi * progress) rises again once progress passes 1, so without a third piece the rate goes back "
              "up towards max_lr after Tc. The schedule stays at min_lr for every it > Tc.",
              "if it > cosine_cycle_iters: return min_lr (before the cosine piece)."),
    Diagnosis("lr_decays_to_zero", "min_lr never added: the cosine decays to 0",
              "The cosine piece is min_lr + 0.5 (1 + cos) (max_lr - min_lr): the half-cosine scales the DISTANCE "
              "between the rates and sits on top of min_lr. Without the min_lr term it ends at 0 at Tc and the "
              "floor piece then jumps up to min_lr.",
              "Add min_lr: min_lr + 0.5 * (1 + cos(pi * progress)) * (max_lr - min_lr)."),
    Diagnosis("lr_amplitude_max", "Cosine amplitude taken from max_lr instead of max_lr - min_lr",
              "min_lr + 0.5 (1 + cos) * max_lr starts at max_lr + min_lr at the end of the warmup (a jump above "
              "max_lr) and only reaches min_lr at Tc by luck of cos = -1.",
              "Scale by (max_lr - min_lr)."),
    Diagnosis("lr_rising", "Cosine upside down: 1 - cos",
              "0.5 (1 + cos(pi p)) falls from 1 to 0 as p goes 0 -> 1; 0.5 (1 - cos) rises, so the rate drops to "
              "min_lr when the warmup ends and climbs to max_lr at the end of the cycle.",
              "Use 1 + cos(pi * progress)."),
    Diagnosis("lr_half_missing", "The 1/2 of the half-cosine is missing",
              "(1 + cos) runs from 2 to 0: without the 0.5 the rate starts at 2 max_lr - min_lr when the warmup "
              "ends.",
              "0.5 * (1 + math.cos(math.pi * progress))."),
    Diagnosis("lr_int_division", "Integer division in the schedule",
              "// rounds down: it // Tw is 0 for every warmup step (no warmup at all, then a jump to max_lr), and "
              "(it - Tw) // (Tc - Tw) keeps the progress at 0 until Tc (no decay, then a drop to the floor).",
              "Use true division (/) for both ratios."),
    Diagnosis("lr_zero_warmup_crash", "warmup_iters = 0 divides by zero",
              "warmup_iters may be 0 (the schedule then starts at max_lr). Computing it / warmup_iters before "
              "choosing the piece divides by zero there; the warmup branch must not be evaluated at all.",
              "Test it < warmup_iters first, and only divide inside that branch."),
)


def _schedule(it: int, max_lr: float, min_lr: float, tw: int, tc: int, *, warm: str = "ratio",
              progress: str = "from_tw", shape: str = "cosine", floor: bool = True) -> float:
    """The contract in float64 with one knob per mistake (the defaults are the contract itself)."""
    if it < tw:
        if warm == "plus_one":
            return (it + 1) / (tw + 1) * max_lr
        if warm == "floor_div":
            return it // tw * max_lr
        return it / tw * max_lr
    if it > tc and floor:
        return float(min_lr)
    p = {"from_tw": (it - tw) / (tc - tw), "from_zero": it / (tc - tw), "by_cycle": (it - tw) / tc,
         "floor_div": (it - tw) // (tc - tw)}[progress]
    c = math.cos(math.pi * p)
    return {
        "cosine": min_lr + 0.5 * (1 + c) * (max_lr - min_lr),
        "no_min": 0.5 * (1 + c) * (max_lr - min_lr),
        "no_min_max": 0.5 * (1 + c) * max_lr,
        "amp_max": min_lr + 0.5 * (1 + c) * max_lr,
        "rising": min_lr + 0.5 * (1 - c) * (max_lr - min_lr),
        "no_half": min_lr + (1 + c) * (max_lr - min_lr),
    }[shape]


def _case(name: str, rows: list[Row]) -> Case:
    return Case(name=name, target=TARGET, kind=KIND_MAP, rows=[tuple(r) for r in rows], out_dtype=torch.float64,
                ctx={"dtype": "float64", "tol": "scalar"})


def _schedule_draw(d: Draw) -> tuple[float, float, int, int]:
    # Three significant digits, as a config file writes rates: a failing call stays short enough to read and rerun.
    max_lr = float(f"{10 ** d.rng.uniform(-6, 0):.3g}")
    min_lr = float(f"{max_lr * d.rng.uniform(0.01, 0.5):.3g}")
    tw = d.int(2, 3000)
    return max_lr, min_lr, tw, tw + d.int(10, 50000)


def _rows(schedule: tuple[float, float, int, int], steps: list[int]) -> list[Row]:
    max_lr, min_lr, tw, tc = schedule
    return [(it, max_lr, min_lr, tw, tc) for it in steps]


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases = [_case("CS336's list: (1.0, 0.1, Tw=7, Tc=21) at it = 0 .. 24", _rows((1.0, 0.1, 7, 21), list(range(25))))]
    warm, cos, after = [], [], []
    for _ in range(3):
        s = _schedule_draw(d)
        tw, tc = s[2], s[3]
        warm += _rows(s, [0, 1, d.int(1, tw - 1), d.int(1, tw - 1), tw - 1])
        cos += _rows(s, [tw, tw + 1, d.int(tw, tc), d.int(tw, tc), (tw + tc) // 2, tc - 1, tc])
        after += _rows(s, [tc + 1, tc + d.int(2, tc), 2 * tc, 10 * tc + d.int(0, 99)])
    cases.append(_case("the warmup on 3 drawn schedules (it < warmup_iters)", warm))
    cases.append(_case("the cosine on 3 drawn schedules (warmup_iters <= it <= cosine_cycle_iters)", cos))
    cases.append(_case("after the cycle on 3 drawn schedules (it > cosine_cycle_iters)", after))
    max_lr, min_lr, _, tc = _schedule_draw(d)
    cases.append(_case(f"warmup_iters = 0 (Tc = {tc}): starts at max_lr",
                       _rows((max_lr, min_lr, 0, tc), [0, 1, d.int(2, tc - 1), tc, tc + 1, 3 * tc])))
    cases.append(_case("an LLM-sized schedule: 3e-4 -> 3e-5, Tw = 2000, Tc = 600000",
                       _rows((3e-4, 3e-5, 2000, 600_000), [0, 999, 1999, 2000, 2001, 301_000, 599_999, 600_000,
                                                             600_001, 1_000_000])))
    return cases


def reference(case: Case):
    from drill.reference.schedule import cosine_lr

    return torch.tensor([cosine_lr(*row) for row in case.rows], dtype=torch.float64), {}


def _variant(**knobs) -> Callable[[Case], torch.Tensor]:
    return lambda case: torch.tensor([_schedule(*row, **knobs) for row in case.rows], dtype=torch.float64)


LR_VARIANTS: list[tuple[str, str, Callable[[Case], torch.Tensor]]] = [
    ("lr_warmup_plus_one", "(it + 1) / (Tw + 1) * max_lr", _variant(warm="plus_one")),
    ("lr_progress_from_zero", "progress = it / (Tc - Tw)", _variant(progress="from_zero")),
    ("lr_divides_by_cycle", "progress = (it - Tw) / Tc", _variant(progress="by_cycle")),
    ("lr_no_floor", "the cosine for every it >= Tw", _variant(floor=False)),
    ("lr_decays_to_zero", "0.5 (1 + cos) (max_lr - min_lr)", _variant(shape="no_min")),
    ("lr_decays_to_zero", "0.5 (1 + cos) max_lr", _variant(shape="no_min_max")),
    ("lr_amplitude_max", "min_lr + 0.5 (1 + cos) max_lr", _variant(shape="amp_max")),
    ("lr_rising", "min_lr + 0.5 (1 - cos) (max_lr - min_lr)", _variant(shape="rising")),
    ("lr_half_missing", "min_lr + (1 + cos) (max_lr - min_lr)", _variant(shape="no_half")),
    ("lr_int_division", "it // Tw in the warmup", _variant(warm="floor_div")),
    ("lr_int_division", "(it - Tw) // (Tc - Tw) as the progress", _variant(progress="floor_div")),
]

SPEC = Spec(
    name="lr_schedule",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=tuple(Bug(LD[i], fn, label) for i, label, fn in LR_VARIANTS),
    exception_bugs=(("division by zero", LD["lr_zero_warmup_crash"]),),
    forbidden_classes=tuple(f"torch.optim.lr_scheduler.{name}" for name in (
        "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
        "SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
        "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR", "LRScheduler")),
    no_determinism_probes="cosine_lr is a function of five numbers, graded as maps of calls (no tensors in or out): "
                          "a random draw inside it shows as wrong values on the exact comparison, with nothing a "
                          "second call would add.",
)
