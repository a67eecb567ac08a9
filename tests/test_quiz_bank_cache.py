"""The warm-start bank cache rebuilds exactly the bank a fresh build gives, lazily: a question read
back holds its listed fields and unpacks the rest on first use. A cache that does not fit this
drill (foreign, stale, failing its checksum, naming an unknown type or file) is rebuilt at load,
never half-used; one written to pass the checksum but damaged inside is found when the question is
read, removed, and refused in one line. The decoder fills questions in without their frozen
__init__, which is only right while no registered type has a __post_init__: checked here too."""

from __future__ import annotations

import marshal
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.errors import UserError
from drill.paths import questions_dir
from drill.quiz import loader
from drill.quiz.schema import LISTED, PACKED


def _cache(tmp_path: Path) -> Path:
    (cache,) = tmp_path.glob("bank-*.marshal")
    return cache


def _rewrite(cache: Path, change, *, checksum: bool = True) -> None:  # type: ignore[no-untyped-def]
    """Apply `change` to the first entry (name, listed, packed record) and store the cache again."""
    blob = marshal.loads(cache.read_bytes())
    name, listed, packed = blob["questions"][0]
    blob["questions"][0] = change(name, list(listed), marshal.loads(packed))
    if checksum:
        blob["crc"] = zlib.crc32(b"".join(p for _, _, p in blob["questions"]))
    cache.write_bytes(marshal.dumps(blob))


def _packed(name, listed, record):  # type: ignore[no-untyped-def]
    return name, tuple(listed), marshal.dumps(record)


def test_a_warm_load_is_the_fresh_build_and_unpacks_a_question_on_first_use(tmp_path: Path) -> None:
    cold = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    assert _cache(tmp_path).is_file()
    warm = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    first = warm.questions[0]
    assert set(first.__dict__) == {*LISTED, PACKED}  # listed only, until another field is read
    assert first.prompt == cold.questions[0].prompt
    assert PACKED not in first.__dict__
    assert all(PACKED in q.__dict__ for q in warm.questions[1:])
    assert warm.questions == cold.questions and warm.files == cold.files
    for a, b in zip(warm.questions, cold.questions, strict=True):
        assert type(a) is type(b) and a.__dict__ == b.__dict__, a.id
    with pytest.raises(AttributeError, match="no attribute 'no_such_field'"):
        _ = warm.questions[1].no_such_field


def test_no_cached_type_has_a_post_init() -> None:
    assert [name for name, cls in loader._types().items() if hasattr(cls, "__post_init__")] == []


def _set_listed(index: int, value):  # type: ignore[no-untyped-def]
    def change(name, listed, record):  # type: ignore[no-untyped-def]
        listed[index] = value
        return _packed(name, listed, record)
    return change


AT_LOAD = {  # each rebuilt silently when the bank is loaded
    "checksum": (lambda n, ls, r: _packed(n, ls, {**r, "v": r["v"][:-1]}), False),
    "type": (lambda n, ls, r: _packed("NoSuchQuestion", ls, r), True),
    "not a question": (lambda n, ls, r: _packed("CommonWrong", ls, r), True),
    "file": (_set_listed(LISTED.index("file"), 99), True),
    "listed short": (lambda n, ls, r: _packed(n, ls[:-1], r), True),
}


@pytest.mark.parametrize("how", AT_LOAD)
def test_a_cache_that_does_not_fit_is_rebuilt_at_load(tmp_path: Path, how: str) -> None:
    fresh = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    change, checksum = AT_LOAD[how]
    _rewrite(_cache(tmp_path), change, checksum=checksum)
    again = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    assert again.questions == fresh.questions
    reread = loader.load_bank(questions_dir(), cache_dir=tmp_path)  # rewritten with the good one
    assert set(reread.questions[0].__dict__) == {*LISTED, PACKED} and reread.questions == fresh.questions


def _record(change):  # type: ignore[no-untyped-def]
    return lambda n, ls, r: _packed(n, ls, change(r))


def _other_id(record: dict) -> dict:
    names = loader._field_order(loader._types()[record[""]])
    values = list(record["v"])
    values[names.index("id")] = "someone-else"
    return {**record, "v": tuple(values)}


ON_USE = {  # pass the checksum, so found when the question is read
    "short": _record(lambda r: {**r, "v": r["v"][:-1]}),
    "list": _record(lambda r: {**r, "v": list(r["v"])}),
    "type": _record(lambda r: {**r, "": "NoSuchQuestion"}),
    "nested": _record(lambda r: {**r, "n": (0,)}),  # the id, a str, is not a dataclass
    "not marshal": lambda n, ls, r: (n, tuple(ls), b"\xff not marshal"),
    "another question": _record(_other_id),
}


@pytest.mark.parametrize("how", ON_USE)
def test_a_damaged_record_is_refused_in_one_line_and_the_cache_removed(tmp_path: Path, how: str) -> None:
    fresh = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    cache = _cache(tmp_path)
    _rewrite(cache, ON_USE[how])
    warm = loader.load_bank(questions_dir(), cache_dir=tmp_path)
    assert warm.questions[0].id == fresh.questions[0].id  # listed fields still read
    with pytest.raises(UserError, match="cache was damaged, so it was removed; run the command again") as err:
        _ = warm.questions[0].prompt
    assert err.value.where == str(cache) and not cache.exists()
    with pytest.raises(UserError):  # still packed: it fails the same way again, never half-filled
        _ = warm.questions[0].explanation
    assert loader.load_bank(questions_dir(), cache_dir=tmp_path).questions == fresh.questions


def test_the_quiz_reports_a_damaged_cache_in_one_line(home: Path) -> None:
    runner = CliRunner()
    args = ["quiz", "--cram", "-n", "1", "--topic", "attention", "--seed", "1"]
    assert runner.invoke(app, args, input="q\n").exit_code == 0  # builds the cache in this home
    cache = _cache(home / "cache")
    blob = marshal.loads(cache.read_bytes())
    blob["questions"] = [(n, ls, b"\xff") for n, ls, _ in blob["questions"]]
    blob["crc"] = zlib.crc32(b"".join(p for _, _, p in blob["questions"]))
    cache.write_bytes(marshal.dumps(blob))
    result = runner.invoke(app, args, input="q\n")
    assert result.exit_code == 2, result.output
    assert "cache was damaged, so it was removed" in result.output and "Traceback" not in result.output
    assert not cache.exists()
    assert runner.invoke(app, args, input="q\n").exit_code == 0


def test_the_shipped_folders_are_where_importlib_resources_puts_them() -> None:
    """drill.paths finds them through the import spec (no importlib.resources + zipfile on a start-up)."""
    from importlib import resources

    from drill.paths import exercises_dir

    assert questions_dir() == Path(str(resources.files("drill.questions")))
    assert exercises_dir() == Path(str(resources.files("drill.exercises")))
    assert (questions_dir() / "block.yaml").is_file()
