"""Every test runs against its own empty progress folder, without asking for it (tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drill.store import default_path, open_store

SEEN: list[str] = []


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_a_fresh_drill_home_under_pytest_tmp(run: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    home = Path(os.environ["DRILL_HOME"])
    assert home.is_relative_to(tmp_path_factory.getbasetemp()), home  # never the learner's real store
    assert not home.exists()  # empty: as on a fresh machine
    assert default_path().parent == home
    assert str(home) not in SEEN  # not the previous test's folder
    SEEN.append(str(home))
    with open_store() as store:  # a write lands there, and the next test will not see it
        store.record_review(f"probe-{run}", 3, topic="t", card_json="{}", due="2099-01-01T00:00:00+00:00")
    assert (home / "progress.db").exists()


def test_the_home_fixture_is_that_folder(home: Path) -> None:
    assert os.environ["DRILL_HOME"] == str(home)
