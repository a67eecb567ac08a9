"""The spec blocks added for the positional and sampling exercises: Distinct, repeat_probe(vary=), and the
position-scaled tolerances (test_spec_blocks.py has the older blocks)."""

from __future__ import annotations

import pytest
import torch

from drill.judge.spec import Case
from drill.judge.specs._common import (
    POSITION_BUCKETS,
    TOLERANCES,
    Distinct,
    Draw,
    position_bucket,
    position_tol,
    position_tolerances,
    repeat_probe,
)


def test_distinct_never_repeats_while_it_can() -> None:
    d, pick = Draw(3), Distinct().pick
    drawn = [pick(lambda: (d.int(1, 3), d.int(1, 3))) for _ in range(9)]
    assert sorted(drawn) == [(a, b) for a in (1, 2, 3) for b in (1, 2, 3)]  # all nine, none twice
    assert pick(lambda: (1, 1)) == (1, 1)  # the space is used up: the draw is accepted after `tries`


def test_distinct_draws_are_reproducible() -> None:
    def run(seed: int) -> list:
        d, pick = Draw(seed), Distinct().pick
        return [pick(lambda: d.int(0, 5)) for _ in range(5)]

    assert run(7) == run(7) and len(set(run(7))) == 5


def test_repeat_probe_lets_named_sizes_differ_and_nothing_else() -> None:
    case = Case(name="bias", target="alibi_bias", args={"n_heads": 8, "t_q": 1, "t_k": 9})
    probe = repeat_probe(case, {"n_heads": 8, "t_q": 9, "t_k": 9}, vary=("t_q",))
    assert probe.repeat == {"n_heads": 8, "t_q": 9, "t_k": 9}
    with pytest.raises(AssertionError, match="t_k"):
        repeat_probe(Case(name="b", target="alibi_bias", args={"n_heads": 8, "t_q": 1, "t_k": 9}),
                     {"n_heads": 8, "t_q": 9, "t_k": 10}, vary=("t_q",))
    x = torch.zeros(2, 3)
    with pytest.raises(AssertionError):  # tensors keep their rule: same shape, other values
        repeat_probe(Case(name="x", target="f", args={"x": x}), {"x": torch.zeros(2, 4)}, vary=("x",))


def test_position_tolerances_widen_atol_by_bucket_only() -> None:
    table = position_tolerances(3e-7)
    assert position_bucket(1) == 1024 and position_bucket(1025) == 2048 and position_bucket(10**9) == 131072
    assert position_tol("bfloat16", 12000) == "bfloat16@16384"
    for dtype in ("float32", "float16", "bfloat16"):
        assert table[dtype] == TOLERANCES[dtype]
        for b in POSITION_BUCKETS:
            wide = table[f"{dtype}@{b}"]
            assert wide.rtol == TOLERANCES[dtype].rtol and wide.atol == pytest.approx(TOLERANCES[dtype].atol + 3e-7 * b)
