"""Hidden tests for `rope_scaling`: scaled_inv_freq(d_head, base, kind, factor, *, ...) -> (inv_freq, attention_scale).

The function returns a pair; each scenario is two cases, one per element
(`extra["tuple"]`; attention_scale is a Python float by contract, which the
child turns into a 0-dim float64 tensor, `"numbers"`). The keyword-only
arguments are passed by keyword (`extra["keywords"]`), and only where a
scenario sets them: the others must take the contract's defaults.

What the scenarios reveal, per kind (d_head 32-128, bases 1e4-1e6, factors 2-16):
- "default" and "linear": the factor put into the base instead of dividing;
- "ntk": no exponent, or d / (d - 2) turned over;
- "dynamic" three times: seq_len left out and seq_len just under L0 (nothing
  may change: scaling "always", or a formula without the max(L, L0), moves
  it), and seq_len > L0 (the `- (factor - 1)` offset shows);
- "yarn" twice, with the defaults and with drawn L0 / beta_fast / beta_slow: the
  ramp turned round, the correction range not truncated, 2 pi missing, and the
  attention scale missing, squared or rooted; correction dims stay 1e-4 or more
  from an integer, so floor and ceil are never on a knife edge;
- "llama3" twice, Llama 3.1's own setting (d 128, base 500000, factor 8) and a
  drawn one: bands swapped, the smoothing turned round, 2 pi missing; every
  wavelength stays 1e-4 (relative) or more from both band edges;
- an unknown kind, which must raise ValueError (`ropes_unknown_kind_accepted`
  otherwise; judged by the case itself, `extra["raises"]`);
- a repeat call (the same d_head, another base): a table cached per d_head.

inv_freq is graded within rtol 1e-5 of the float64 formula (see TOLS), the
attention scale within 1e-9.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from drill.judge.registry import default
from drill.judge.spec import Bug, Case, Diagnosis, Spec, Tolerance
from drill.judge.specs._common import TOLERANCES, Draw, call_case, diagnoses, repeat_probe, twice_probes

TARGET = "scaled_inv_freq"
OUTPUTS = ("inv_freq", "attention_scale")
KEYWORDS = ("original_max_position", "seq_len", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor")
EDGE_CLEARANCE = 1e-4  # relative, a wavelength from a llama3 band edge
DIM_CLEARANCE = 1e-4  # absolute, a YaRN correction dim from an integer
UNKNOWN_KINDS = ("longrope", "ntk-by-parts", "su", "proportional", "xpos")

# inv_freq: the contract asks for rtol 2e-6 of transformers' fp32 values, which are themselves up to 1.7e-6 from the
# float64 formula this spec grades against (llama3's smoothed band amplifies the fp32 rounding of the wavelength);
# measured fp32 solutions reach 3.0e-6 (transformers' own arithmetic) and 5.9e-6 (exp(-2i/d ln base)) over 2000 draws.
# rtol 1e-5 keeps them passing; every named mistake moves some frequency by 1e-3 or more.
TOLS = {**TOLERANCES, "inv": Tolerance(atol=0.0, rtol=1e-5), "scale": Tolerance(atol=0.0, rtol=1e-9),
        "raises": Tolerance(atol=0.0, rtol=0.0)}


def _default(name: str):
    return default("rope_scaling", name)


RD = diagnoses(
    Diagnosis("ropes_linear_on_base", "Linear scaling applied to the base",
              "Position interpolation divides every position by the factor, which is the same as dividing every "
              "inverse frequency by it: inv_i / factor. Multiplying the base by the factor instead leaves the "
              "highest frequency (i = 0) untouched and divides the lowest by almost the whole factor: a different, "
              "uneven stretch.",
              "inv_freq = base ** (-2i / d) / factor for kind 'linear'."),
    Diagnosis("ropes_ntk_no_exponent", "NTK-aware scaling without the d / (d - 2) exponent",
              "NTK-aware scaling raises the base to base * factor ** (d / (d - 2)) so that the LOWEST frequency, "
              "inv_{d/2-1} = base ** (-(d - 2) / d), ends up divided by exactly the factor. base * factor alone "
              "divides it by factor ** ((d - 2) / d), a bit less.",
              "base_ntk = base * factor ** (d / (d - 2)) (the dynamic kind's growth term gets the same exponent)."),
    Diagnosis("ropes_ntk_exponent_inverted", "NTK exponent turned over: (d - 2) / d",
              "The exponent is d / (d - 2), slightly above 1, so that the lowest frequency is divided by the whole "
              "factor; (d - 2) / d, slightly below 1, stretches it by less than the factor.",
              "factor ** (d / (d - 2))."),
    Diagnosis("ropes_dynamic_always", "Dynamic NTK scaling changes the frequencies while seq_len <= L0",
              "Dynamic scaling starts only past the trained context: L = max(seq_len or L0, L0), and at L = L0 the "
              "growth term factor * L / L0 - (factor - 1) is exactly 1, so the base is unchanged. Applying the "
              "static factor always, or dropping the max() (a short sequence then shrinks the base, or takes a "
              "negative number to a fractional power), changes a model that should behave as trained.",
              "L = max(seq_len if seq_len is not None else L0, L0); base * (factor * L / L0 - (factor - 1)) ** "
              "(d / (d - 2))."),
    Diagnosis("ropes_dynamic_no_offset", "Dynamic NTK growth term without - (factor - 1)",
              "The base grows with (factor * L / L0 - (factor - 1)), which is exactly 1 at L = L0 and grows by "
              "factor for every further L0 tokens: the scaling starts from nothing at the trained length. Without "
              "the offset the term is already the whole factor at L0, a jump to the full static scaling as soon "
              "as (or even before) the context is exceeded.",
              "base * (factor * L / L0 - (factor - 1)) ** (d / (d - 2))."),
    Diagnosis("ropes_yarn_ramp_reversed", "YaRN's ramp used the wrong way round",
              "ramp_i rises from 0 below the low correction dim to 1 above the high one. The fast-rotating "
              "dimensions (small i, ramp 0) keep their frequency, the slow ones (ramp 1) are interpolated: "
              "inv_i' = inv_i / factor * ramp_i + inv_i * (1 - ramp_i). Swapping the weights interpolates the "
              "high frequencies and keeps the low ones, the opposite of YaRN (transformers names 1 - ramp the "
              "'extrapolation factor', which is easy to read backwards).",
              "inv_i' = inv_i / factor * ramp_i + inv_i * (1 - ramp_i)."),
    Diagnosis("ropes_yarn_no_truncate", "YaRN's correction range not rounded to whole dims",
              "With transformers' default truncate=True the range is low = floor(c(beta_fast)), high = "
              "ceil(c(beta_slow)), then clamped to [0, d - 1]: the ramp starts and ends on whole dimensions. "
              "Using the fractional dims moves every ramp value in between.",
              "low = max(math.floor(c(beta_fast)), 0); high = min(math.ceil(c(beta_slow)), d - 1)."),
    Diagnosis("ropes_yarn_mscale", "YaRN's attention scale is wrong",
              "YaRN asks attention to multiply its logits' temperature back with attention_scale = 0.1 * ln(factor) "
              "+ 1 (1.0 for factor <= 1); transformers multiplies cos and sin by it, so each logit gets it squared "
              "there, but the value returned is the plain 0.1 ln(factor) + 1. Leaving it at 1, squaring it or "
              "taking its square root gives another number.",
              "attention_scale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0, for kind 'yarn' only."),
    Diagnosis("ropes_llama3_bands_swapped", "Llama 3's bands swapped",
              "Long wavelengths (beyond L0 / low_freq_factor: the dims that never turned once in the trained "
              "context) are divided by the factor; short ones (under L0 / high_freq_factor) are kept. Swapping the "
              "two conditions, or the two factors, scales the local, high-frequency dims and leaves the global "
              "ones unscaled.",
              "wavelen > L0 / low_freq_factor: inv / factor; wavelen < L0 / high_freq_factor: inv."),
    Diagnosis("ropes_llama3_smooth_inverted", "Llama 3's smoothing turned round",
              "In the middle band s = (L0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor) "
              "runs from 0 at the long edge to 1 at the short edge, and the frequency is (1 - s) * inv / factor "
              "+ s * inv: fully scaled where the long band starts, untouched where the short band starts. "
              "s * inv / factor + (1 - s) * inv jumps at both edges.",
              "(1 - s) * inv / factor + s * inv."),
    Diagnosis("ropes_wavelen_no_2pi", "Wavelength without 2 pi",
              "A dimension with inverse frequency inv turns once every 2 pi / inv positions: that is its "
              "wavelength, which llama3 compares with L0 / low_freq_factor and L0 / high_freq_factor, and YaRN's "
              "correction dims come from L0 / (2 pi * beta) likewise. 1 / inv is the wavelength in radians, 2 pi "
              "times too short, so the bands and the ramp move.",
              "wavelen = 2 * math.pi / inv; c(n) = d * ln(L0 / (2 pi n)) / (2 ln base)."),
    Diagnosis("ropes_unknown_kind_accepted", "An unknown kind does not raise ValueError",
              "The contract's kinds are default, linear, ntk, dynamic, yarn and llama3; anything else must raise "
              "ValueError (a typo in a config must not silently give unscaled frequencies). A dict lookup raises "
              "KeyError, a fall-through returns something.",
              "if kind not in KINDS: raise ValueError(f'unknown kind {kind!r}')."),
)


# ----------------------------------------------------------------------------- the formula with knobs


def _inv(d: int, base: float) -> list[float]:
    return [base ** (-2.0 * i / d) for i in range(d // 2)]


def _corr(d: int, base: float, l0: float, n: float, two_pi: bool = True) -> float:
    return d * math.log(l0 / ((2 * math.pi if two_pi else 1.0) * n)) / (2 * math.log(base))


def formula(a: dict, *, linear: str = "divide", ntk: str = "exp", ntk_on_dynamic: bool = False,
            dynamic: str = "contract", ramp: str = "contract", truncate: bool = True, mscale: str = "contract",
            bands: str = "contract", smooth: str = "contract", two_pi: bool = True) -> tuple[torch.Tensor, float]:
    """(inv_freq fp32, attention_scale) of the case's arguments, one knob per mistake (defaults: the contract).

    ntk: "exp" | "none" | "inverted" (the kind ntk, and dynamic too with ntk_on_dynamic). dynamic: "contract" |
    "static" (the static factor whatever L) | "no_max" (L = seq_len or L0) | "no_offset". ramp: "reversed".
    mscale: "missing" | "squared" | "sqrt". bands: "swapped" (the two conditions) | "factors" (the two
    factors). smooth: "inverted". two_pi: False drops 2 pi from llama3's wavelength and YaRN's correction dims.
    """
    d, base, kind, factor = a["d_head"], a["base"], a["kind"], a.get("factor", _default("factor"))
    l0 = a.get("original_max_position", _default("original_max_position"))
    exponent = {"exp": d / (d - 2), "none": 1.0, "inverted": (d - 2) / d}
    inv = _inv(d, base)
    scale = 1.0
    if kind == "linear":
        inv = [f / factor for f in inv] if linear == "divide" else _inv(d, base * factor)
    elif kind == "ntk":
        inv = _inv(d, base * factor ** exponent[ntk])
    elif kind == "dynamic":
        e = exponent[ntk] if ntk_on_dynamic else exponent["exp"]
        seq = a.get("seq_len")
        length = seq if seq is not None else l0
        if dynamic != "no_max":
            length = max(length, l0)
        if dynamic == "static":
            grow = factor
        elif dynamic == "no_offset":
            grow = factor * length / l0
        else:
            grow = factor * length / l0 - (factor - 1)
        inv = [math.nan] * (d // 2) if grow <= 0 else _inv(d, base * grow ** e)
    elif kind == "yarn":
        bf, bs = a.get("beta_fast", _default("beta_fast")), a.get("beta_slow", _default("beta_slow"))
        low, high = _corr(d, base, l0, bf, two_pi), _corr(d, base, l0, bs, two_pi)
        if truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001
        ramps = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(d // 2)]
        if ramp == "reversed":
            ramps = [1 - r for r in ramps]
        inv = [f / factor * r + f * (1 - r) for f, r in zip(inv, ramps, strict=True)]
        m = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
        scale = {"contract": m, "missing": 1.0, "squared": m * m, "sqrt": math.sqrt(m)}[mscale]
    elif kind == "llama3":
        lf, hf = a.get("low_freq_factor", _default("low_freq_factor")), a.get("high_freq_factor",
                                                                               _default("high_freq_factor"))
        if bands == "factors":
            lf, hf = hf, lf
        long_edge, short_edge = l0 / lf, l0 / hf
        out = []
        for f in inv:
            wl = (2 * math.pi if two_pi else 1.0) / f
            scaled_band, kept_band = (wl > long_edge, wl < short_edge)
            if bands == "swapped":
                scaled_band, kept_band = wl < short_edge, wl > long_edge
            if scaled_band:
                out.append(f / factor)
            elif kept_band:
                out.append(f)
            else:
                s = (l0 / wl - lf) / (hf - lf)
                if smooth == "inverted":
                    s = 1 - s
                out.append((1 - s) * f / factor + s * f)
        inv = out
    return torch.tensor(inv, dtype=torch.float64).to(torch.float32), float(scale)


# ----------------------------------------------------------------------------- drawing


def _clear(a: dict) -> bool:
    """The contract's margins: llama3's wavelengths away from both band edges, YaRN's correction dims away from
    integers (both with and without 2 pi, so the variants are as well defined as the reference)."""
    d, base = a["d_head"], a["base"]
    l0 = a.get("original_max_position", _default("original_max_position"))
    if a["kind"] == "llama3":
        lf = a.get("low_freq_factor", _default("low_freq_factor"))
        hf = a.get("high_freq_factor", _default("high_freq_factor"))
        for f in _inv(d, base):
            for wl in (2 * math.pi / f, 1 / f):
                if any(abs(wl - edge) < EDGE_CLEARANCE * edge for edge in (l0 / lf, l0 / hf)):
                    return False
    if a["kind"] == "yarn":
        for n in (a.get("beta_fast", _default("beta_fast")), a.get("beta_slow", _default("beta_slow"))):
            for two_pi in (True, False):
                c = _corr(d, base, l0, n, two_pi)
                if abs(c - round(c)) < DIM_CLEARANCE:
                    return False
    return True


def _pair(d: Draw, name: str, args: dict) -> list[Case]:
    """The inv_freq case and its attention_scale twin, on the very same call."""
    keywords = [k for k in KEYWORDS if k in args]
    n = args["d_head"] // 2
    base = call_case(d, name, TARGET, args, out_shape=(n,), out_dtype=torch.float32,
                     ctx={"dtype": "float32"})
    out = []
    for pick, what in enumerate(OUTPUTS):
        out.append(dataclasses.replace(
            base, name=f"{name}: {what}", out_dtype=torch.float32 if pick == 0 else torch.float64,
            ctx={**base.ctx, "what": what, "pick": pick, "tol": "inv" if pick == 0 else "scale"},
            extra={"keywords": keywords, "tuple": {"names": list(OUTPUTS), "pick": pick, "numbers": [1]}},
        ))
    return out


def _draw(d: Draw, build: Callable[[], dict]) -> dict:
    for _ in range(200):
        a = build()
        if _clear(a):
            return a
    raise AssertionError("no draw clear of the band edges and integer dims")


def _d(d: Draw) -> int:
    return d.choice([32, 48, 64, 80, 96, 128])


def _base(d: Draw) -> float:
    return float(f"{10 ** d.rng.uniform(4, 6):.4g}")


def _factor(d: Draw) -> float:
    return d.choice([2.0, 4.0, 8.0, 16.0, round(d.rng.uniform(2, 16), 2)])


def _l0(d: Draw) -> int:
    return d.choice([2048, 4096, 8192, 16384, 32768])


def _label(a: dict) -> str:
    shown = ", ".join(f"{k}={a[k]!r}" for k in ("factor", *KEYWORDS) if k in a)
    return f"scaled_inv_freq({a['d_head']}, {a['base']:g}, {a['kind']!r}{', ' + shown if shown else ''})"


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    scenarios: list[tuple[str, dict]] = []

    def add(why: str, build: Callable[[], dict]) -> None:
        a = _draw(d, build)
        scenarios.append((f"{_label(a)} ({why})", a))

    add("no scaling", lambda: {"d_head": _d(d), "base": _base(d), "kind": "default"})
    add("position interpolation", lambda: {"d_head": _d(d), "base": _base(d), "kind": "linear", "factor": _factor(d)})
    add("static NTK-aware", lambda: {"d_head": _d(d), "base": _base(d), "kind": "ntk", "factor": _factor(d)})
    add("dynamic, seq_len left out: L = L0", lambda: {"d_head": _d(d), "base": _base(d), "kind": "dynamic",
                                                      "factor": _factor(d), "original_max_position": _l0(d)})

    def short() -> dict:
        l0 = _l0(d)
        return {"d_head": _d(d), "base": _base(d), "kind": "dynamic", "factor": d.choice([2.0, 4.0, 6.0, 8.0]),
                "original_max_position": l0, "seq_len": int(l0 * d.rng.uniform(0.9, 0.98))}

    add("dynamic, seq_len < L0: unchanged", short)

    def long() -> dict:
        l0 = _l0(d)
        return {"d_head": _d(d), "base": _base(d), "kind": "dynamic", "factor": _factor(d),
                "original_max_position": l0, "seq_len": int(l0 * d.rng.uniform(1.5, 6.0))}

    add("dynamic, seq_len > L0", long)
    add("YaRN, the defaults", lambda: {"d_head": _d(d), "base": _base(d), "kind": "yarn", "factor": _factor(d)})
    add("YaRN, drawn L0 and betas", lambda: {
        "d_head": _d(d), "base": _base(d), "kind": "yarn", "factor": _factor(d), "original_max_position": _l0(d),
        "beta_fast": d.choice([16.0, 24.0, 32.0, 64.0]), "beta_slow": d.choice([1.0, 2.0])})
    add("Llama 3.1's own setting", lambda: {"d_head": 128, "base": 500000.0, "kind": "llama3", "factor": 8.0})
    add("llama3, drawn L0 and band factors", lambda: dict(
        {"d_head": _d(d), "base": _base(d), "kind": "llama3", "factor": _factor(d), "original_max_position": _l0(d)},
        **dict(zip(("low_freq_factor", "high_freq_factor"), d.choice([(1.0, 4.0), (2.0, 8.0), (1.0, 2.0)]),
                   strict=True))))
    cases: list[Case] = []
    for name, a in scenarios:
        cases += _pair(d, name, a)
    cases.append(_unknown_kind(d))
    cases += _repeats(d)
    return twice_probes(cases)


def _unknown_kind(d: Draw) -> Case:
    kind = d.choice(list(UNKNOWN_KINDS))
    args = {"d_head": _d(d), "base": _base(d), "kind": kind, "factor": 4.0}
    case = Case(name=f"{_label(args)} (not a kind of the contract: must raise ValueError)", target=TARGET, args=args,
                out_dtype=torch.int64, ctx={"dtype": "float32", "tol": "raises", "raises": True},
                extra={"raises": "ValueError", "keywords": []})
    case.judge = _raises_judge(case)
    return case


def _raises_judge(case: Case):
    def judge(got):
        from drill.judge.compare import Comparison

        call = f"{TARGET}({case.args['d_head']}, {case.args['base']:g}, {case.args['kind']!r}, 4.0)"
        value = int(got.reshape(-1)[0]) if isinstance(got, torch.Tensor) and got.numel() == 1 else -1
        if value == 1:
            return Comparison(True, "", "")
        what = {0: "returned instead of raising ValueError",
                2: "raised another exception than ValueError (a KeyError from a dict lookup?)"}.get(
            value, "could not be read back")
        return Comparison(False, "values", f"{call} {what}", short=f"{call} {what}",
                          diagnosis=RD["ropes_unknown_kind_accepted"])

    return judge


def _repeats(d: Draw) -> list[Case]:
    """Drawn last: the same d_head with another base just before (a table cached per d_head answers wrong)."""
    a = _draw(d, lambda: {"d_head": _d(d), "base": _base(d), "kind": "linear", "factor": _factor(d)})
    first = dict(a, base=a["base"] * 3.0)
    out = []
    for c in _pair(d, "", a):
        c.name = f"repeat call: {_label(a)}: {c.ctx['what']} just after base={first['base']:g}"
        out.append(repeat_probe(c, first, vary=("base",)))
    return out


def reference(case: Case):
    if case.extra.get("raises"):
        return torch.tensor([1]), {}
    from drill.reference.rope_scaling import scaled_inv_freq

    a = case.args
    inv, scale = scaled_inv_freq(a["d_head"], a["base"], a["kind"], a.get("factor", _default("factor")),
                                 **{k: a[k] for k in KEYWORDS if k in a})
    return (inv, {}) if case.ctx["pick"] == 0 else (torch.tensor(scale, dtype=torch.float64), {})


# ----------------------------------------------------------------------------- variants


def _variant(kinds: tuple[str, ...], **knobs):
    def run(case: Case):
        if case.extra.get("raises") or case.args["kind"] not in kinds:
            return None
        inv, scale = formula(case.args, **knobs)
        return inv if case.ctx["pick"] == 0 else torch.tensor(scale, dtype=torch.float64)

    return run


ROPES_VARIANTS = [
    ("ropes_linear_on_base", "linear: base * factor", _variant(("linear",), linear="base")),
    ("ropes_ntk_no_exponent", "ntk: base * factor", _variant(("ntk",), ntk="none")),
    ("ropes_ntk_no_exponent", "ntk and dynamic: no exponent", _variant(("ntk", "dynamic"), ntk="none",
                                                                        ntk_on_dynamic=True)),
    ("ropes_ntk_exponent_inverted", "ntk: factor ** ((d - 2) / d)", _variant(("ntk",), ntk="inverted")),
    ("ropes_ntk_exponent_inverted", "ntk and dynamic: (d - 2) / d", _variant(("ntk", "dynamic"), ntk="inverted",
                                                                             ntk_on_dynamic=True)),
    ("ropes_dynamic_always", "dynamic: the static factor at every length", _variant(("dynamic",), dynamic="static")),
    ("ropes_dynamic_always", "dynamic: L = seq_len without max(L, L0)", _variant(("dynamic",), dynamic="no_max")),
    ("ropes_dynamic_no_offset", "dynamic: (factor * L / L0) ** (d / (d - 2))",
     _variant(("dynamic",), dynamic="no_offset")),
    ("ropes_yarn_ramp_reversed", "yarn: inv / factor * (1 - ramp) + inv * ramp", _variant(("yarn",), ramp="reversed")),
    ("ropes_yarn_no_truncate", "yarn: fractional correction dims", _variant(("yarn",), truncate=False)),
    ("ropes_yarn_mscale", "yarn: attention_scale 1.0", _variant(("yarn",), mscale="missing")),
    ("ropes_yarn_mscale", "yarn: attention_scale squared", _variant(("yarn",), mscale="squared")),
    ("ropes_yarn_mscale", "yarn: attention_scale's square root", _variant(("yarn",), mscale="sqrt")),
    ("ropes_llama3_bands_swapped", "llama3: the two band conditions swapped", _variant(("llama3",), bands="swapped")),
    ("ropes_llama3_bands_swapped", "llama3: low_freq_factor and high_freq_factor swapped",
     _variant(("llama3",), bands="factors")),
    ("ropes_llama3_smooth_inverted", "llama3: s * inv / factor + (1 - s) * inv",
     _variant(("llama3",), smooth="inverted")),
    ("ropes_wavelen_no_2pi", "llama3: wavelen = 1 / inv", _variant(("llama3",), two_pi=False)),
    ("ropes_wavelen_no_2pi", "yarn: L0 / beta without 2 pi", _variant(("yarn",), two_pi=False)),
    ("ropes_wavelen_no_2pi", "llama3 and yarn: no 2 pi", _variant(("llama3", "yarn"), two_pi=False)),
]

SPEC = Spec(
    name="rope_scaling",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLS,
    bugs=tuple(Bug(RD[i], fn, label) for i, label, fn in ROPES_VARIANTS),
)
