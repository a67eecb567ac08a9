"""drill bench runs the learner's file as drill check does: a copy, the audit hook, the sandbox (issue 30, §4).

The attack it answers: a file that behaves in `drill check` and, in the
benchmark's own process, wrote the progress store. Layer 1 (the static
policy, which `drill check` applies before the benchmark starts) is taken
as broken here: the check is replaced by a pass, so the file may call
`open` and `subprocess` freely, and only what the benchmark's child does
itself stands between it and the learner's files. Each attack runs with the
namespace sandbox and without it (`DRILL_SANDBOX=off`: the audit hook alone).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from drill.bench.run import BenchOptions, bench_file
from drill.judge import sandbox

RMSNORM = '''
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        {in_call}
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
'''
ATTACKS = {
    # at import: overwrite a file of the learner's (the progress store, in the real attack)
    "write_at_import": ("open({victim!r}, 'w').write('owned')\n" + RMSNORM.format(in_call="pass")),
    # in a timed call at a benchmark size: start a process that writes it
    "spawn_in_call": RMSNORM.format(in_call="import subprocess; subprocess.run(['sh', '-c', 'echo owned > {victim}'])"),
}


@pytest.fixture
def passing_check(monkeypatch):
    """`drill check` says pass whatever the file is: the policy hole the benchmark must not depend on."""
    monkeypatch.setattr("drill.judge.client.grade_one", lambda path, name: SimpleNamespace(status="pass", seed=0))


@pytest.mark.parametrize("boxed", [True, False], ids=["sandbox", "audit-hook-only"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_file_that_harms_only_when_benched_harms_nothing(attack, boxed, tmp_path, passing_check, monkeypatch):
    if boxed and sandbox.mode()[0] != "namespaces":
        pytest.skip("no namespace sandbox on this machine")
    if not boxed:
        monkeypatch.setenv("DRILL_SANDBOX", "off")
    victim = tmp_path / "progress.db"
    victim.write_text("the learner's reviews")
    source = tmp_path / "rmsnorm.py"
    source.write_text(ATTACKS[attack].format(victim=str(victim)))

    report = bench_file(source, "rmsnorm", BenchOptions(max_size=512, timeout_s=30.0))

    assert victim.read_text() == "the learner's reviews"
    assert report.exit_code == 1, report.to_json()
    # inside the sandbox the victim's folder does not exist at all (its /tmp is private); outside it the audit
    # hook refuses the write or the process
    assert ("not allowed in graded code" in report.learner_error
            or (boxed and "No such file or directory" in report.learner_error)), report.learner_error
    assert report.sandbox["audit_hook"] is True and report.sandbox["seccomp"] is True
    assert report.sandbox["sandbox"] == ("namespaces" if boxed else "off")


def test_a_correct_file_is_still_measured_in_the_sandbox(tmp_path, passing_check):
    source = tmp_path / "rmsnorm.py"
    source.write_text(RMSNORM.format(in_call="pass"))
    report = bench_file(source, "rmsnorm", BenchOptions(max_size=512, timeout_s=30.0))
    assert report.exit_code == 0, report.to_json()
    assert [row.size for row in report.rows] == [512]
    assert report.rows[0].results["learner"].status == "ok"
    assert report.sandbox["audit_hook"] is True


def test_a_file_changed_after_its_check_is_not_benchmarked(tmp_path, monkeypatch):
    """The benchmark runs the copy taken before the check; a file edited in between is refused in one line."""
    source = tmp_path / "rmsnorm.py"
    source.write_text(RMSNORM.format(in_call="pass"))

    def check_then_edit(path, name):
        Path(path).write_text(RMSNORM.format(in_call="x = x + 0"))
        return SimpleNamespace(status="pass", seed=0)

    monkeypatch.setattr("drill.judge.client.grade_one", check_then_edit)
    from drill.errors import UserError

    with pytest.raises(UserError, match="changed while it was being checked"):
        bench_file(source, "rmsnorm", BenchOptions(max_size=512, timeout_s=30.0))
