"""The warm-start bank cache rebuilds exactly the bank a fresh build gives, and a cache that
marshal reads but that does not fit this drill's types (right key, wrong content) is rebuilt,
never half-used. Its decoder fills questions in without their frozen __init__, which is only
right while no registered type has a __post_init__: that is checked here too."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest

from drill.paths import questions_dir
from drill.quiz import loader


def test_a_warm_load_is_the_fresh_build(tmp_path: Path) -> None:
    cold = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    assert list(tmp_path.glob("bank-*.marshal"))
    warm = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    assert warm.questions == cold.questions and warm.files == cold.files
    for a, b in zip(warm.questions, cold.questions, strict=True):
        assert type(a) is type(b) and a.__dict__ == b.__dict__, a.id


def test_no_cached_type_has_a_post_init() -> None:
    assert [name for name, cls in loader._types().items() if hasattr(cls, "__post_init__")] == []


def _tamper(blob: dict, how: str) -> dict:
    first = blob["questions"][0]
    if how == "short":
        first["v"] = first["v"][:-1]
    elif how == "list":
        first["v"] = list(first["v"])
    elif how == "type":
        first[""] = "NoSuchQuestion"
    elif how == "nested":
        first["n"] = (0,)  # the id, a str, is not a dataclass
    elif how == "file":
        names = loader._field_order(loader._types()[first[""]])
        values = list(first["v"])
        values[names.index("file")] = 99
        first["v"] = tuple(values)
    return blob


@pytest.mark.parametrize("how", ["short", "list", "type", "nested", "file"])
def test_a_cache_that_does_not_fit_is_rebuilt(tmp_path: Path, how: str) -> None:
    fresh = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    (cache,) = tmp_path.glob("bank-*.marshal")
    cache.write_bytes(marshal.dumps(_tamper(marshal.loads(cache.read_bytes()), how)))
    again = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    assert again.questions == fresh.questions
    assert marshal.loads(cache.read_bytes())["questions"][0] != _tamper(
        marshal.loads(cache.read_bytes()), how)["questions"][0]  # rewritten with the good one


def test_the_shipped_folders_are_where_importlib_resources_puts_them() -> None:
    """drill.paths finds them through the import spec (no importlib.resources + zipfile on a start-up)."""
    from importlib import resources

    from drill.paths import exercises_dir, questions_dir

    assert questions_dir() == Path(str(resources.files("drill.questions")))
    assert exercises_dir() == Path(str(resources.files("drill.exercises")))
    assert (questions_dir() / "block.yaml").is_file()
