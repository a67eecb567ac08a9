"""The shared spec building blocks (`specs/_common.py`, `specs/_norm.py`) do what the specs rely on.

They are what a new exercise's spec is built from, so each is checked
against PyTorch's own op where there is one (a norm recomputation against
F.layer_norm / the RMSNorm reference, the causal mask against a position
comparison) and for the drawing-order promise: a block draws at most the
upstream gradient, last, so switching a spec to it keeps its cases per seed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from drill.judge.spec import KIND_CALL, KIND_MODULE, Bug, Diagnosis
from drill.judge.specs import _backward, _norm
from drill.judge.specs._common import (
    DTYPE_SWEEP,
    Draw,
    call_case,
    causal_mask,
    diagnoses,
    module_case,
    module_dtype,
    repeat_after,
    sweep,
    variant_bugs,
)


def test_normalise_is_rmsnorm_by_default_and_layernorm_when_centred() -> None:
    from drill.reference.norm import rms_norm

    d = Draw(1)
    x, w, b = d.normal(3, 5, 16, shift=2.0), d.normal(16, shift=1.0), d.normal(16)
    torch.testing.assert_close(_norm.normalise(x, w, None, 1e-6), rms_norm(x, w, 1e-6))
    torch.testing.assert_close(_norm.normalise(x, w, b, 1e-5, centre=True), F.layer_norm(x, (16,), w, b, 1e-5))
    torch.testing.assert_close(_norm.normalise(x, w, b, 1e-5, centre=True, stat=_norm.STAT_VAR),
                               F.layer_norm(x, (16,), w, b, 1e-5))


@pytest.mark.parametrize("knob", [
    {"stat": _norm.STAT_VAR_UNBIASED, "centre": True},
    {"eps_at": _norm.EPS_OUTSIDE},
    {"eps_at": _norm.EPS_ON_RECIPROCAL},
    {"dim": 0},
    {"dim": None},
])
def test_each_knob_of_normalise_is_a_visible_mistake(knob: dict) -> None:
    d = Draw(2)
    x, w = d.normal(4, 16, scale=0.05), d.normal(16, shift=1.0)  # small inputs: eps matters at eps=1e-2
    right = _norm.normalise(x, w, None, 1e-2, centre=knob.get("centre", False))
    wrong = _norm.normalise(x, w, None, 1e-2, **knob)
    assert (wrong - right).abs().max() > 1e-2


def test_normalise_in_half_precision_collapses_where_fp32_does_not() -> None:
    x = Draw(3).normal(2, 32, dtype="float16", scale=400.0)  # x**2 overflows fp16: rsqrt(inf) = 0
    w = torch.ones(32, dtype=torch.float16)
    right, wrong = _norm.normalise(x, w, None, 1e-6), _norm.normalise(x, w, None, 1e-6, upcast=False)
    assert right.dtype == wrong.dtype == torch.float32
    assert right.abs().max() > 1.0 and wrong.abs().max() == 0.0


def test_over_axis_skips_the_axis_that_is_the_last_one() -> None:
    x2, x3 = torch.zeros(3, 4), torch.zeros(2, 3, 4)
    assert not _norm.over_axis(1)(x2) and _norm.over_axis(1)(x3)
    assert not _norm.over_axis(3)(x3)  # beyond the rank: cannot show
    assert _norm.over_axis(None)(x2) and _norm.over_axis(-2)(x2)


def test_diagnosis_templates_are_named_for_the_exercise() -> None:
    table = diagnoses(_norm.missing_param("ln", "weight"), _norm.missing_param("ln", "bias"),
                      _norm.eps_outside_sqrt("ln", "var", "x.var(-1, unbiased=False, keepdim=True)"),
                      _norm.half_precision_stats("ln"), _norm.wrong_axis("ln", "mean and variance", "Use dim=-1."))
    assert list(table) == ["ln_missing_weight", "ln_missing_bias", "ln_eps_outside_sqrt", "ln_no_fp32_upcast",
                           "ln_wrong_axis"]
    assert "shifted by the learnable `bias`" in table["ln_missing_bias"].why
    assert "all zeros" in table["ln_missing_bias"].why and table["ln_missing_bias"].fix == "Add self.bias at the end."
    assert "sqrt(var) + eps differs from sqrt(var + eps)" in table["ln_eps_outside_sqrt"].why
    assert "x.var(-1, unbiased=False, keepdim=True) + eps" in table["ln_eps_outside_sqrt"].fix
    with pytest.raises(AssertionError, match="defined twice"):
        diagnoses(_norm.half_precision_stats("ln"), _norm.half_precision_stats("ln"))


def _after(seed: int, make) -> torch.Tensor:
    """The next value the Draw gives after `make(d)`: equal for two makes that drew the same."""
    d = Draw(seed)
    make(d)
    return d.normal(3)


def test_module_case_draws_only_the_upstream_and_last() -> None:
    def case(d: Draw, grads: bool):
        x = d.normal(2, 3, 8)
        return module_case(d, "c", "M", {"x": x}, init=(8,), params={"weight": d.normal(8)}, dtype="float16",
                           grads=grads, ctx={"eps": 1e-6})

    c = case(Draw(4), True)
    assert c.kind == KIND_MODULE and c.upstream.shape == (2, 3, 8) and c.grad_inputs == ("x",) and c.grad_params
    assert c.module_dtype == torch.float16 and c.out_dtype == torch.float16
    assert c.ctx == {"dtype": "float16", "eps": 1e-6}
    plain = case(Draw(4), False)
    assert plain.upstream is None and plain.grad_inputs == () and not plain.wants_grads
    assert torch.equal(_after(4, lambda d: case(d, False)), _after(4, lambda d: (d.normal(2, 3, 8), d.normal(8))))
    assert module_dtype("float32") is None and module_dtype("bfloat16") == torch.bfloat16


def test_call_case_grades_the_named_inputs_against_an_output_shaped_upstream() -> None:
    d = Draw(5)
    logits = d.normal(4, 10)
    c = call_case(d, "loss", "cross_entropy", {"logits": logits, "targets": torch.zeros(4, dtype=torch.int64)},
                  grads=("logits",), out_shape=())
    assert c.kind == KIND_CALL and c.grad_inputs == ("logits",) and c.upstream.shape == ()
    assert c.out_dtype == torch.float32 and c.ctx["dtype"] == "float32"
    probs = call_case(d, "p", "filter_logits", {"logits": logits.half()}, dtype="float16", out_dtype=torch.float32)
    assert probs.upstream is None and probs.out_dtype == torch.float32 and probs.ctx["dtype"] == "float16"


def test_sweep_builds_one_case_per_dtype_in_order() -> None:
    d = Draw(6)
    cases = sweep(lambda dt: call_case(d, f"{dt} x", "f", {"x": d.normal(3, dtype=dt)}, dtype=dt))
    assert [c.ctx["dtype"] for c in cases] == list(DTYPE_SWEEP)
    assert [c.args["x"].dtype for c in cases] == [torch.float32, torch.float16, torch.bfloat16]


def test_repeat_after_redraws_float_args_and_keeps_the_rest() -> None:
    d = Draw(7)
    x, positions = d.normal(2, 3, 4, dtype="bfloat16"), torch.arange(3)
    case = call_case(d, "c", "f", {"x": x, "positions": positions, "base": 10000.0}, dtype="bfloat16")
    probe = repeat_after(d, case, {"positions": positions + 5})
    first = probe.repeat
    assert first["x"].shape == x.shape and first["x"].dtype == x.dtype and not torch.equal(first["x"], x)
    assert torch.equal(first["positions"], positions + 5) and first["base"] == 10000.0
    with pytest.raises(AssertionError):  # a first call with another shape would not probe a shape-keyed cache
        repeat_after(Draw(8), call_case(Draw(8), "c", "f", {"x": x}), {"x": d.normal(5)})


def test_variant_bugs_keeps_order_and_filters() -> None:
    table = diagnoses(Diagnosis("a", "A", "", ""), Diagnosis("b", "B", "", ""))
    variants = [("a", "first", 1), ("b", "second", 2), ("a", "third", 3)]
    bugs = variant_bugs(table, variants, wrap=lambda n: (lambda case: n))
    got = [(b.diagnosis.id, b.label, b.fn(None)) for b in bugs]
    assert got == [("a", "first", 1), ("b", "second", 2), ("a", "third", 3)]
    assert all(isinstance(b, Bug) for b in bugs)
    assert [b.label for b in variant_bugs(table, variants, only=("a",))] == ["first", "third"]


@pytest.mark.parametrize("t_q,t_k", [(5, 5), (3, 7), (7, 3), (1, 4)])
def test_causal_mask_is_bottom_right_aligned(t_q: int, t_k: int) -> None:
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    assert torch.equal(causal_mask(t_q, t_k), torch.arange(t_k)[None, :] <= query_pos)
    assert torch.equal(causal_mask(t_q), torch.ones(t_q, t_q, dtype=torch.bool).tril())


def test_norm_cases_are_the_battery_and_reproducible() -> None:
    def build(d, name, shape, *, eps=None, dtype="float32", scale=1.0, shift=0.0, grads=False):
        x = d.normal(*shape, dtype=dtype, scale=scale, shift=shift)
        return module_case(d, name, "N", {"x": x}, init=(shape[-1],), params={"weight": d.normal(shape[-1])},
                           dtype=dtype, grads=grads, ctx={"eps": 1e-6 if eps is None else eps})

    cases = _norm.norm_cases(Draw(9), build)
    again = _norm.norm_cases(Draw(9), build)
    assert [c.name for c in cases] == [c.name for c in again]
    assert all(torch.equal(a.args["x"].float(), b.args["x"].float()) for a, b in zip(cases, again, strict=True))
    assert {c.ctx["dtype"] for c in cases} == set(DTYPE_SWEEP)
    assert {c.args["x"].dim() for c in cases} == {2, 3, 4}
    assert [c.repeat is not None for c in cases] == [False] * 8 + [True]  # the repeat call is drawn last
    assert sum(c.wants_grads for c in cases) == 3


def _ln_build(d, name, shape, *, eps=None, dtype="float32", scale=1.0, shift=0.0, grads=False, big_mean=False):
    x = d.normal(*shape, dtype=dtype, scale=scale, shift=shift)
    params = {"weight": d.normal(shape[-1], shift=1.0), "bias": d.normal(shape[-1])}
    ctx = {"eps": 1e-5 if eps is None else eps, "default_eps": eps is None, "big_mean": big_mean}
    return module_case(d, name, "N", {"x": x}, init=(shape[-1],), params=params, dtype=dtype, grads=grads, ctx=ctx)


def test_norm_cases_extra_cases_come_before_the_repeat_and_leave_the_battery_unchanged() -> None:
    plain = _norm.norm_cases(Draw(9), _ln_build)
    more = _norm.norm_cases(Draw(9), _ln_build, lambda d, build: [build(d, "extra 1-D", (16,))])
    assert [c.name for c in more[:-1]] == [c.name for c in plain[:-1]] + ["extra 1-D"]
    assert more[-1].name.startswith("repeat call")
    assert all(torch.equal(a.args["x"], b.args["x"]) for a, b in zip(plain[:-1], more[:-2], strict=True))
    assert more[-1].repeat is not None and more[-2].args["x"].shape == (16,)


def test_default_eps_variants_change_only_the_cases_built_with_the_default() -> None:
    d = Draw(5)
    default_case = _ln_build(d, "default", (2, 16), scale=1e-4)
    explicit = _ln_build(d, "explicit", (2, 16), eps=1e-2, scale=1e-4)
    right = lambda x, w, b, eps: _norm.normalise(x, w, b, eps, centre=True)  # noqa: E731
    diag = _norm.wrong_default_eps("ln", 1e-5, "nn.LayerNorm's")
    bugs = _norm.default_eps_variants(diag, right, 1e-5)
    assert [b.label for b in bugs][:2] == ["default eps=1e-6 instead of 1e-5", "default eps=1e-12 instead of 1e-5"]
    assert diag.id == "ln_wrong_default_eps" and "eps=1e-5" in diag.why and "nn.LayerNorm's" in diag.why
    p = default_case.params
    want = F.layer_norm(default_case.args["x"], (16,), p["weight"], p["bias"], 1e-6)
    torch.testing.assert_close(bugs[0].fn(default_case), want)
    assert bugs[0].fn(explicit) is None  # an explicit eps is the learner's to use


def test_cancellation_fit_reproduces_a_one_pass_variance_and_rejects_anything_else() -> None:
    d = Draw(6)
    case = _ln_build(d, "big mean", (3, 4, 64), scale=1.0, shift=100.0, big_mean=True)
    x, w, b = case.args["x"], case.params["weight"], case.params["bias"]
    mean = x.mean(-1, keepdim=True)
    one_pass = (x - mean) * torch.rsqrt((x * x).mean(-1, keepdim=True) - mean * mean + 1e-5) * w + b
    right = F.layer_norm(x, (64,), w, b, 1e-5)
    assert (one_pass - right).abs().max() > 1e-3  # the cancellation is visible on this case
    bug = _norm.cancellation_fit(_norm.variance_cancellation("ln"))
    assert bug.fit and bug.diagnosis.id == "ln_var_cancellation"
    from drill.judge.compare import compare
    from drill.judge.specs._common import TOLERANCES

    assert compare(bug.fn(case, one_pass), one_pass, TOLERANCES["float32"]).ok  # the member is the learner's output
    off = (x - mean) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) * 1.1) * w + b  # 10 %: not rounding
    assert bug.fn(case, off) is None
    no_bias = right - b  # not a per-row rescaling: the nearest member does not reproduce it
    member = bug.fn(case, no_bias)
    assert member is None or not compare(member, no_bias, TOLERANCES["float32"]).ok
    assert bug.fn(_ln_build(d, "plain", (2, 8)), one_pass) is None  # no large mean: the family is the reference


def test_centring_diagnoses_name_their_fix() -> None:
    table = diagnoses(_norm.unbiased_variance("ln"), _norm.variance_cancellation("ln"))
    assert "unbiased=False" in table["ln_unbiased_variance"].fix
    assert "Centre first" in table["ln_var_cancellation"].fix
    assert _norm.eps_text(1e-05) == "1e-5" and _norm.eps_text(1e-12) == "1e-12" and _norm.eps_text(0.01) == "0.01"
def test_one_thread_restores_the_count_after_nested_and_concurrent_uses() -> None:
    import threading

    from drill.judge.specs._common import one_thread

    before = torch.get_num_threads()
    seen = []

    def work() -> None:
        with one_thread():
            with one_thread():
                seen.append(torch.get_num_threads())

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1] * 6 and torch.get_num_threads() == before


def test_backward_elements_grade_one_returned_gradient_each_in_its_arguments_dtype() -> None:
    d = Draw(5)
    x, w = d.normal(3, 4, dtype="float16"), d.normal(4)
    case = call_case(d, "half x, fp32 weight", "f", {"x": x, "weight": w}, dtype="float16", ctx={"eps": 1e-5})
    twins = _backward.elements(case, (("grad_x", "x"), ("grad_weight", "weight")))
    assert [t.name for t in twins] == ["half x, fp32 weight: grad_x", "half x, fp32 weight: grad_weight"]
    assert [t.out_dtype for t in twins] == [torch.float16, torch.float32]
    assert [t.extra["tuple"] for t in twins] == [{"names": ["grad_x", "grad_weight"], "pick": i} for i in (0, 1)]
    assert all(t.args is case.args and t.ctx["eps"] == 1e-5 for t in twins) and "pick" not in case.ctx
    both = _backward.picked(lambda c: (c.args["x"].float() * 2, c.args["weight"] + 1))
    assert torch.equal(both(twins[1]), w + 1) and _backward.picked(lambda c: None)(twins[0]) is None
    g = torch.ones(2)
    assert _backward.half_only(g, torch.float16) is g
    kept, unknown = _backward.half_only(g, torch.bfloat16)
    assert kept is g and bool(unknown.all())
