"""quant_matmul grading: exact codes and scales, the forms every seed holds, every mistake shows, the product audit.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference agrees with torch's own per-channel quantiser and with an exact
integer product, each seed's cases hold the contract's forms (three input
dtypes, zero rows, the tie test, K = 4096 rows of 127, unit scales compared
exactly, M != N but for one square case) with the drawn values clear of
half-integers, every variant differs from the reference and from every variant
of another mistake on every seed, a scale one ulp off fails, the forbidden
names are real ops, and the product audit tells an integer matmul from a
dequantised float one (an advisory, a failure only under --strict).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import quant_matmul as qm
from drill.reference.quant import int8_matmul, quantize_rowwise

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "quant_matmul"
SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(qm.SPEC)
LIMITS = Limits(timeout_s=60, cpu_s=60)


def _prepared(seed: int) -> list:
    cases = qm.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = qm.reference(c)
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_agrees_with_torchs_per_channel_quantiser_and_an_exact_product(seed: int) -> None:
    for c in qm.make_cases(seed):
        if c.target == qm.QUANT and c.ctx["pick"] == 0:
            x = c.args["x"]
            codes, scale = quantize_rowwise(x)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the quantized-tensor API is deprecated, still the anchor here
                zero_points = torch.zeros(len(scale), dtype=torch.long)
                theirs = torch.quantize_per_channel(x.float(), scale.double(), zero_points, 0, torch.qint8).int_repr()
            assert torch.equal(codes, theirs), c.name
            assert scale.dtype == torch.float32 and int(codes.abs().max()) <= 127
        elif c.target == qm.MATMUL:
            a = c.args
            exact = [[sum(int(p) * int(q) for p, q in zip(ra.tolist(), rb.tolist(), strict=True)) for rb in a["b_q"]]
                     for ra in a["a_q"][:2]]
            want = torch.tensor(exact, dtype=torch.float64) * a["a_s"][:2, None].double() * a["b_s"][None, :].double()
            assert torch.equal(int8_matmul(**a)[:2], want.float()), c.name


def test_ties_round_half_to_even_and_a_zero_row_gets_scale_one() -> None:
    x = torch.tensor([[127.0, 2.5, -2.5, 0.5, 126.5, -0.5, 1.5], [0.0] * 7])
    codes, scale = quantize_rowwise(x)
    assert codes.tolist() == [[127, 2, -2, 0, 126, 0, 2], [0] * 7]
    assert scale.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_seed_holds_the_contracts_forms(seed: int) -> None:
    cases = qm.make_cases(seed)
    quant = [c for c in cases if c.target == qm.QUANT]
    mm = [c for c in cases if c.target == qm.MATMUL]
    assert {c.args["x"].dtype for c in quant} == {torch.float32, torch.float16, torch.bfloat16}
    assert all(c.ctx["tol"] == "exact" for c in quant)
    assert any(bool((c.args["x"].float().abs().amax(dim=1) == 0).any()) for c in quant if c.args["x"].dtype ==
               torch.float16)
    ties = [c for c in quant if "tie test" in c.name]
    assert ties and all(float(t) in ties[0].args["x"].flatten().tolist() for t in qm.TIES)
    assert (ties[0].args["x"].abs().amax(dim=1) == 127).all()
    for c in quant:
        if c in ties:
            continue
        x = c.args["x"]
        v = x.float() / quantize_rowwise(x)[1][:, None]
        assert ((v - torch.floor(v) - 0.5).abs() >= qm.CLEARANCE).all(), c.name
    assert sum(c.args["x"].shape[0] == c.args["x"].shape[1] for c in quant) == 2  # x_q and scale of one input
    squares = [c for c in mm if c.args["a_q"].shape[0] == c.args["b_q"].shape[0]]
    assert len(squares) == 1
    big = [c for c in mm if c.args["a_q"].shape[1] == 4096]
    assert big and (big[0].args["a_q"] == 127).all(dim=1).any() and (big[0].args["b_q"] == 127).all(dim=1).any()
    units = [c for c in mm if c.ctx["tol"] == "exact"]
    assert units and all(bool((c.args["a_s"] == 1).all() and (c.args["b_s"] == 1).all()) and
                         c.args["a_q"].shape[1] <= 1024 for c in units)
    assert all(c.args["a_q"].dtype == c.args["b_q"].dtype == torch.int8 for c in mm)
    assert any(c.repeat is not None for c in quant) and any(c.repeat is not None for c in mm)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed_and_no_two_mistakes_look_alike(seed: int) -> None:
    cases = _prepared(seed)
    outputs = {}
    for bug in qm.SPEC.bugs:
        if bug.fit:
            continue
        outs = []
        for c in cases:
            out = bug.fn(c)
            outs.append(out[0] if isinstance(out, tuple) else out)
        differs = [o is not None and (o.shape != c.expected.shape or not compare(o, c.expected, TOL(c)).ok)
                   for o, c in zip(outs, cases, strict=True)]
        assert any(differs), bug.label
        outputs[bug.label] = (bug.diagnosis.id, outs)
    for a, (id_a, outs_a) in outputs.items():
        for b, (id_b, outs_b) in outputs.items():
            if id_a < id_b:
                assert any((x is None) != (y is None) or (x is not None and not (x.shape == y.shape and torch.equal(
                    x, y))) for x, y in zip(outs_a, outs_b, strict=True)), (a, b)


def test_the_codes_and_scales_are_compared_bit_for_bit() -> None:
    case = next(c for c in _prepared(3) if c.target == qm.QUANT and c.ctx["pick"] == 1)
    one_ulp = torch.nextafter(case.expected, torch.full_like(case.expected, 2.0))
    assert not compare(one_ulp, case.expected, TOL(case)).ok
    assert compare(case.expected.clone(), case.expected, TOL(case), dtype=torch.float32).ok


def test_the_forbidden_patterns_name_real_ops() -> None:
    import fnmatch

    ops = torch._C._dispatch_get_all_op_names()
    names = {n.split("::", 1)[1].split(".", 1)[0] for n in ops if n.startswith("aten::")}
    for pattern in qm.FORBIDDEN:
        assert fnmatch.filter(names, pattern), pattern
    for op in ("quantize_per_tensor", "quantize_per_channel", "fake_quantize_per_tensor_affine",
               "fake_quantize_per_channel_affine", "_weight_int8pack_mm"):
        assert any(fnmatch.fnmatch(op, p) for p in qm.FORBIDDEN), op


def test_a_forbidden_quantiser_is_named(tmp_path: Path, fork_server) -> None:
    path = tmp_path / "quant_matmul.py"
    path.write_text((SOLUTIONS / "good_int32_accumulate.py").read_text().replace(
        "    x_q = torch.round(xf / scale[:, None]).clamp(-127, 127).to(torch.int8)\n",
        "    x_q = torch.quantize_per_channel(xf, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0,\n"
        "                                     torch.qint8).int_repr()\n"))
    r = check_file(path, "quant_matmul", 3, LIMITS, pool=fork_server)
    assert r.status == "fail" and r.diagnosis.id == "forbidden_op", (r.status, r.diagnosis)
    assert "quantize_per_channel" in r.diagnosis_detail


@pytest.mark.parametrize(("name", "advised"), [("good_int32_accumulate.py", False),
                                               ("good_fp32_codes_matmul.py", False),
                                               ("good_dequant_float_matmul.py", True)])
def test_the_product_audit_reports_a_dequantised_float_matmul(name: str, advised: bool, fork_server) -> None:
    r = check_file(SOLUTIONS / name, "quant_matmul", 5, LIMITS, pool=fork_server)
    assert r.status == "pass", (r.status, r.diagnosis_detail)
    assert any(line.startswith("product audit (") for line in r.audit), r.audit
    assert any("quant_dequant_matmul" in n for n in r.advisories) == advised, r.advisories
    strict = check_file(SOLUTIONS / name, "quant_matmul", 5, LIMITS, pool=fork_server, strict=True)
    assert strict.status == ("fail" if advised else "pass"), strict.diagnosis_detail


def test_an_fp32_dequantised_matmul_passes_and_is_reported(tmp_path: Path, fork_server) -> None:
    path = tmp_path / "quant_matmul.py"
    path.write_text((SOLUTIONS / "good_int32_accumulate.py").read_text().replace(
        "    acc = a_q.to(torch.int32) @ b_q.to(torch.int32).T\n    return acc.float() * a_s[:, None] * b_s[None, :]\n",
        "    return (a_q.float() * a_s[:, None]) @ (b_q.float() * b_s[:, None]).T\n"))
    r = check_file(path, "quant_matmul", 11, LIMITS, pool=fork_server)
    assert r.status == "pass", (r.status, r.diagnosis_detail)
    assert any("quant_dequant_matmul" in n for n in r.advisories), r.advisories


def test_the_audit_judge_reads_what_the_child_measured() -> None:
    from drill.judge.audit import judge

    cfg = {"m": 6, "n": 5, "k": 64}
    lines, notes, ok = judge("quant_matmul", {"config": cfg, "products": [
        {"op": "mm", "dtypes": ["int32", "int32"], "integral": True}]})
    assert ok and not notes and "mm on int32, int32" in lines[0]
    lines, notes, ok = judge("quant_matmul", {"config": cfg, "products": [
        {"op": "mm", "dtypes": ["float32", "float32"], "integral": True}]})
    assert ok and not notes and "integer codes" in lines[0]
    lines, notes, ok = judge("quant_matmul", {"config": cfg, "products": [
        {"op": "mm", "dtypes": ["float32", "float32"], "integral": False}]})
    assert ok and notes and notes[0].startswith("quant_dequant_matmul")
    lines, notes, ok = judge("quant_matmul", {"config": cfg, "products": []})
    assert not ok and "could not measure" in lines[0]
