"""mla grading: the reference (against itself absorbed, and against transformers' DeepseekV2Attention), the
cases, the replay of the named mistakes, and the checks beyond values (the cache, state between calls).

Fixture verdicts are checked by test_judge_fixtures.py; here the pieces they rest on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.chain import run_chain, run_interleaved
from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import mla
from drill.reference.mla import PARAMS, mla_attention

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "mla"
SIZES = dict(n_heads=3, kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=8)


def _weights(seed: int, d_model: int = 24, h=3, r=12, dn=6, dr=4, dv=8) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "q_proj.weight": torch.randn(h * (dn + dr), d_model, generator=g) / d_model**0.5,
        "kv_a_proj_with_mqa.weight": torch.randn(r + dr, d_model, generator=g) / d_model**0.5,
        "kv_a_layernorm.weight": 1 + 0.3 * torch.randn(r, generator=g),
        "kv_b_proj.weight": torch.randn(h * (dn + dv), r, generator=g) / r**0.5,
        "o_proj.weight": torch.randn(d_model, h * dv, generator=g) / (h * dv) ** 0.5,
    }


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_the_reference_absorbed_equals_expanded_and_any_split_equals_one_pass(convention: str) -> None:
    w = _weights(0)
    x = torch.randn(2, 9, 24, generator=torch.Generator().manual_seed(1))
    full, (c_full, k_full) = mla_attention(x, w, **SIZES, convention=convention)
    absorbed, cache = mla_attention(x, w, **SIZES, convention=convention, absorbed=True)
    torch.testing.assert_close(absorbed, full, atol=1e-5, rtol=1e-5)
    for split in ([4, 1, 1, 3], [2, 2, 2, 2, 1]):
        for absorb in (False, True):
            outs, past, start = [], None, 0
            for n in split:
                out, past = mla_attention(x[:, start : start + n], w, **SIZES, past=past, convention=convention,
                                          absorbed=absorb)
                outs.append(out)
                start += n
            torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(past[0], c_full)
            torch.testing.assert_close(past[1], k_full)
    assert c_full.shape == (2, 9, 12) and k_full.shape == (2, 9, 4)


def test_the_reference_equals_transformers_deepseek_v2_attention() -> None:
    modeling = pytest.importorskip("transformers.models.deepseek_v2.modeling_deepseek_v2")
    config_mod = pytest.importorskip("transformers.models.deepseek_v2.configuration_deepseek_v2")
    h, r, dn, dr, dv, d_model, t = 3, 12, 6, 4, 8, 24, 7
    config = config_mod.DeepseekV2Config(
        hidden_size=d_model, num_attention_heads=h, num_key_value_heads=h, kv_lora_rank=r, q_lora_rank=None,
        qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv, attention_bias=False, attention_dropout=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, max_position_embeddings=64,
    )
    config._attn_implementation = "eager"
    attn = modeling.DeepseekV2Attention(config, layer_idx=0).eval()
    rotary = modeling.DeepseekV2RotaryEmbedding(config)
    w = _weights(3, d_model, h, r, dn, dr, dv)
    missing = set(PARAMS) - set(dict(attn.named_parameters()))
    assert not missing, missing  # the contract's names are transformers' names
    attn.load_state_dict(w)
    assert attn.kv_a_layernorm.variance_epsilon == 1e-6
    x = torch.randn(2, t, d_model, generator=torch.Generator().manual_seed(4))
    positions = torch.arange(t)[None].expand(2, t)
    mask = torch.full((t, t), float("-inf")).triu(1)[None, None].expand(2, 1, t, t)
    with torch.no_grad():
        theirs, _ = attn(x, attention_mask=mask, position_embeddings=rotary(x, positions))
        ours, _ = mla_attention(x, w, h, r, dn, dr, dv, convention="interleaved", rope_base=10000.0)
        half, _ = mla_attention(x, w, h, r, dn, dr, dv, convention="half", rope_base=10000.0)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(half, theirs, atol=1e-3)  # the test tells the conventions apart


@pytest.mark.parametrize("seed", [0, 5, 20261129])
def test_the_cases_cover_the_splits_dtypes_cache_and_interleaving(seed: int) -> None:
    cases = mla.make_cases(seed)
    calls = [c.extra["calls"] for c in cases]
    assert any(len(c) == 1 for c in calls)
    assert any(len(c) > 2 and all(n == 1 for n in c[1:]) for c in calls)
    assert any(len(c) > 2 and len(set(c)) == 1 and c[0] > 1 for c in calls)
    assert any(c.extra.get("calls2") for c in cases)
    assert all(c.extra["past_arg"] == "past" for c in cases)
    assert {c.extra["returns"] for c in cases} == {"out", "k", "v"}
    assert {c.ctx["dtype"] for c in cases} == {"float32", "bfloat16", "float16"}
    for c in cases:
        dn, dr, dv = c.ctx["qk_nope_head_dim"], c.ctx["qk_rope_head_dim"], c.ctx["v_head_dim"]
        assert len({dn, dv, dn + dr}) == 3, c.name  # each wrong softmax scale moves the scores
        if c.ctx["dtype"] != "float32":
            assert c.module_dtype is mla.DTYPES[c.ctx["dtype"]] and c.out_dtype is c.module_dtype
    assert any(c.grad_params and c.grad_inputs == ("x",) and len(c.extra["calls"]) > 1 for c in cases)
    assert {c.ctx["base"] for c in cases} >= {10000.0, 500000.0}


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_replay_without_a_mistake_is_the_reference(convention: str) -> None:
    cases = mla.make_cases(2)
    for case in cases:
        case.expected, case.expected_grads = mla.reference(case)
    assert _declare(cases, convention) is None
    for case in cases:
        tol = mla.SPEC.tolerances[case.ctx["dtype"]]
        assert compare(mla.replay(case), case.expected, tol).ok, case.name
        assert compare(mla.replay(case, stateful=True), case.expected, tol).ok != (
            bool(case.extra.get("calls2"))), case.name  # a module keeping its cache fails the interleaved case only


CACHE_ONLY = {"mla_k_rope_per_head", "mla_full_kv_cached", "mla_cache_prenorm", "mla_cache_unrotated"}


def test_every_named_mistake_is_caught_and_the_cache_mistakes_only_by_the_cache() -> None:
    cases = mla.make_cases(3)
    for case in cases:
        case.expected, case.expected_grads = mla.reference(case)
    _declare(cases, "half")
    tol = mla.SPEC.tolerances
    for bug in mla.BUGS:
        wrong = []
        for c in cases:
            got = bug.fn(c)
            if got is not None and not compare(got, c.expected, tol[c.ctx["dtype"]]).ok:
                wrong.append(c)
        if bug.diagnosis.id == "rope_convention_swapped" and "declares CONVENTION" in bug.label:
            assert not wrong  # the 'interleaved'-declared variant is silent on a 'half' file
            continue
        assert wrong, f"{bug.diagnosis.id} ({bug.label}) never fails"
        if bug.diagnosis.id in CACHE_ONLY:
            assert {c.extra["returns"] for c in wrong} <= {"k", "v"}, bug.label
        if bug.diagnosis.id in ("mla_k_rope_per_head", "mla_full_kv_cached"):
            assert any(tuple(bug.fn(c).shape) != tuple(c.expected.shape) for c in wrong)


def _declare(cases, value):
    return mla.SPEC.prepare(cases, {"CONVENTION": {"present": True, "value": value, "type": type(value).__name__}})


def test_an_unknown_convention_is_refused_in_one_line() -> None:
    cases = mla.make_cases(1)
    refused = _declare(cases, "neox")
    assert refused is not None and refused[0].id == "rope_convention_invalid" and "'neox'" in refused[1]
    assert "\n" not in refused[1]


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_interleaved_chain_separates_a_stateful_module() -> None:
    w = _weights(5, 24)
    x, x2 = torch.randn(2, 2, 6, 24, generator=torch.Generator().manual_seed(6))
    for name, stateless in (("good_naive_expand.py", True), ("bug_state_between_calls__cache_on_self.py", False)):
        module = _load(SOLUTIONS / name).MLA(24, 3, 12, 6, 4, 8)
        module.load_state_dict(w, strict=False)
        with torch.no_grad():
            for path, t in w.items():
                module.get_parameter(path).copy_(t)
            alone, _ = run_chain(module, x, [3, 1, 2], None, "MLA", "past")
            module = _load(SOLUTIONS / name).MLA(24, 3, 12, 6, 4, 8)
            for path, t in w.items():
                module.get_parameter(path).copy_(t)
            mixed, cache = run_interleaved(module, x, x2, [3, 1, 2], [2, 2, 1], "MLA", "past")
        assert torch.allclose(mixed, alone, atol=1e-5) == stateless, name
        assert cache[0].shape == (2, 6, 12) or not stateless


def _grade(tmp_path: Path, text: str, fork_server, seed: int = 3):
    path = tmp_path / "mla.py"
    path.write_text(text, encoding="utf-8")
    return check_file(path, None, seed, Limits(), pool=fork_server)


def test_the_grader_passes_a_correct_file_and_names_a_broken_gradient(tmp_path: Path, fork_server) -> None:
    good = (SOLUTIONS / "good_naive_expand.py").read_text(encoding="utf-8")
    ok = _grade(tmp_path, good, fork_server)
    assert ok.status == "pass", ok.diagnosis_detail
    detached = good.replace("c_kv = self.kv_a_layernorm(a[..., :r])", "c_kv = self.kv_a_layernorm(a[..., :r]).detach()")
    assert detached != good
    bad = _grade(tmp_path, detached, fork_server)
    assert bad.status == "fail" and bad.diagnosis.id == "grad_broken"


def test_a_cache_in_fp32_for_half_input_fails_on_its_dtype(tmp_path: Path, fork_server) -> None:
    good = (SOLUTIONS / "good_naive_expand.py").read_text(encoding="utf-8")
    fp32 = good.replace("return self.o_proj(o), (c_kv, k_rope)", "return self.o_proj(o), (c_kv.float(), k_rope)")
    fp32 = fp32.replace("torch.cat([past[0], c_kv], dim=1)", "torch.cat([past[0].to(x.dtype), c_kv], dim=1)")
    assert fp32.count(".to(x.dtype), c_kv") == 1
    bad = _grade(tmp_path, fp32, fork_server)
    assert bad.status == "fail" and bad.diagnosis.id == "wrong_dtype", bad.diagnosis_detail


def test_the_starter_declares_the_default_convention() -> None:
    from drill.paths import exercises_dir

    assert '\nCONVENTION = "half"\n' in (exercises_dir() / "mla.py").read_text(encoding="utf-8")


def _audit_host():
    import types

    from drill.judge import chain

    return types.SimpleNamespace(
        resolve_attr=lambda obj, path, owner: [obj := getattr(obj, part) for part in path.split(".")][-1],
        extension=lambda name: chain,
    )


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("good_*.py")), ids=lambda p: p.stem)
def test_the_decode_audit_tells_naive_from_absorbed_with_the_flops(path: Path) -> None:
    from drill.judge import audit

    data = audit.run(mla.SPEC.audit, _load(path), _audit_host())
    lines, advice, measured = audit.judge("mla_work", data)
    assert measured, lines
    absorbed = "absorbed" in path.stem
    assert bool(advice) == (not absorbed), lines
    assert lines[0].startswith("decode audit: " + ("absorbed" if absorbed else "naive")), lines
    forms = audit.mla_flops_per_cached_token(data["config"])
    slope = (data["flops"][-1] - data["flops"][0]) / (data["lengths"][-1] - data["lengths"][0])
    assert slope == forms["absorbed" if absorbed else "naive"]  # the counted work is the formula's, exactly
    # the weight copied before use (rows unseen): the FLOPs alone decide the same way
    blind = dict(data, rows=[0] * len(data["rows"]))
    assert bool(audit.judge("mla_work", blind)[1]) == (not absorbed)


def test_an_audit_that_saw_no_work_cannot_measure() -> None:
    from drill.judge import audit

    data = {"lengths": [16, 32], "flops": [0, 0], "rows": [0, 0], "config": dict(mla.SPEC.audit)}
    assert audit.judge("mla_work", data)[2] is False
    assert audit.judge("mla_work", {"lengths": []})[2] is False  # unreadable: says so instead of crashing


def test_strict_fails_only_the_naive_decode(tmp_path: Path, fork_server) -> None:
    naive = check_file(SOLUTIONS / "good_naive_expand.py", "mla", 3, Limits(), strict=True, pool=fork_server)
    absorbed = check_file(SOLUTIONS / "good_absorbed_decode.py", "mla", 3, Limits(), strict=True, pool=fork_server)
    assert naive.status == "fail" and absorbed.status == "pass", (naive.audit, absorbed.audit)
    assert any("decode audit: naive" in line for line in naive.audit)


def test_in_model_the_module_decodes_through_the_decoders_latent_cache(fork_server) -> None:
    from drill.judge import decoder, inmodel

    source = decoder.source_for("mla")
    assert "def attend" not in source and "def apply_rope" not in source and "class LatentCache" in source
    for name in ("good_naive_expand.py", "good_absorbed_decode.py", "good_deepseek_interleaved_declared.py"):
        result = check_file(SOLUTIONS / name, "mla", 6, Limits(), pool=fork_server, in_model=True)
        in_model = [t.status for t in result.tests if t.in_model]
        assert in_model == ["pass", "pass"] and result.status == "pass", (name, result.diagnosis_detail)
    logits, tokens = inmodel.cases_for("mla", 6)
    assert tokens.extra["cached"] and tokens.extra["config"]["kv_lora_rank"] == inmodel.MLA_SIZES["kv_lora_rank"]
    half, inter = logits.ctx["alt"]["half"][0], logits.ctx["alt"]["interleaved"][0]
    assert not torch.allclose(half, inter, atol=1e-3)  # the two conventions' decoders really differ
    bug = check_file(SOLUTIONS / "bug_mla_positions_from_zero__arange_new.py", "mla", 6, Limits(), pool=fork_server,
                     in_model=True)
    statuses = {t.name.split(":")[1].split(" of ")[0].strip(): t.status for t in bug.tests if t.in_model}
    assert statuses == {"logits": "pass", "greedy generation": "fail"}  # a full pass has no cache; decoding does
    assert bug.diagnosis.id == "mla_positions_from_zero"
