"""Loading a question bank (a folder of `<topic>.yaml` files, or one file).

`scan` parses and checks everything and returns all problems; `load_bank`
is what the quiz uses: it refuses a bank with any problem (nothing is
partially loaded) and keeps the built questions in the data folder so the
next start skips YAML parsing, building and the slow checks. That cache is
keyed by every file's name, size, mtime and inode plus the drill/Python
versions and the fields of every registered question type; a stale, unreadable or foreign cache is
ignored and rebuilt, and it only ever holds a bank that passed every check.
It is marshal data (no code runs when it is read): plain values, with each
question and its parts as a dict naming its type, rebuilt only from the
kinds' own registered types. Each question is stored twice over: its listed
fields (id, topic, kind, ...: what filtering and scheduling read) as plain
values, and the whole of it packed, unpacked the first time another field is
read. A start that shows one question of five hundred decodes one.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import sys
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from drill import __version__
from drill.errors import UserError
from drill.quiz import kinds
from drill.quiz.build import Collector, Problem, build_file
from drill.quiz.numbers import Tolerance
from drill.quiz.schema import LISTED, PACKED, Bank, CommonWrong, Question
from drill.quiz.yamlread import YamlSyntaxError, read_yaml

# 5: built questions, not the parse; 6: field values in order, nested ones named; 7: text escaped;
# 8: each question's listed fields apart, its rest packed (decoded on first use) under a checksum
CACHE_FORMAT = 8


class BankError(UserError):
    """A bank with problems: the message is the first one, `problems` has them all."""

    def __init__(self, problems: list[Problem], path: Path) -> None:
        first = problems[0]
        more = f" (and {len(problems) - 1} more; run `drill validate {display(path)}`)" if len(problems) > 1 else ""
        super().__init__(first.message + more, f"{first.file}:{first.line}" if first.line else first.file)
        self.problems = problems


@dataclass(frozen=True)
class ScanResult:
    """A bank as built, every problem found in it, and the audits' figures (`drill validate`)."""

    bank: Bank
    problems: list[Problem]
    figures: dict[str, Any] = field(default_factory=dict)  # the audits' figures (see validate.audit_problems)

    def summary(self) -> str:
        counts = Counter(q.kind for q in self.bank.questions)
        mix = ", ".join(f"{kind} {counts[kind]}" for kind in kinds.names() if counts[kind])
        files = len(self.bank.files)
        status = "ok" if not self.problems else f"{len(self.problems)} problem{'s' * (len(self.problems) != 1)}"
        count = len(self.bank.questions)
        line = f"{count} question{'s' * (count != 1)} in {files} file{'s' * (files != 1)}: {status}"
        line += f"; {mix}" if mix else ""
        longest = self.figures.get("longest_right")
        if longest and longest[1]:
            line += (f"; right option longest in {longest[0]} of {longest[1]} choice questions"
                     f" ({longest[0] / longest[1]:.0%})")
        positions = self.figures.get("right_positions")
        if positions and sum(positions.values()):
            line += "; right option at " + " ".join(f"{p} {n}" for p, n in positions.items())
        return line


def display(path: Path, here: Path | None = None) -> str:
    """A path as the user would type it: relative to the working folder (`here`, resolved) when inside it."""
    try:
        return str(path.resolve().relative_to(here or Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _shown(files: list[Path]) -> list[str]:
    """`display` of each file, resolving the working folder once."""
    try:
        here = Path.cwd().resolve()
    except OSError:
        return [str(f) for f in files]
    return [display(f, here) for f in files]


MAX_BANK_FILES = 500


def bank_files(path: Path) -> list[Path]:
    """The YAML entries of a bank folder (sorted), or the one path given.

    Entries that are not regular files (a FIFO, a device, a folder named
    x.yaml, a dangling link) are kept, so that reading them reports them."""
    try:
        if not path.exists():
            raise UserError("no such file or folder; give a bank folder or a .yaml file", str(path))
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        else:
            return [path]
    except OSError as exc:
        raise UserError(f"cannot read this bank ({exc.strerror or exc})", str(path)) from None
    if not files:
        raise UserError("no question files (*.yaml) in this folder", str(path))
    if len(files) > MAX_BANK_FILES:
        raise UserError(f"{len(files)} question files in this folder (at most {MAX_BANK_FILES}); is it the right "
                        "folder?", str(path))
    return files


def _parse_file(file: Path) -> tuple[Any, list[Problem]]:
    try:
        return read_yaml(file), []
    except YamlSyntaxError as exc:
        return None, [Problem(display(file), exc.line, exc.message)]


def _build(parsed: list[tuple[Path, Any]], *, deep: bool, audit: bool = False) -> ScanResult:
    """Structural checks per file, duplicate ids across files, then (if deep) the run-time
    checks, and (if audit, on a bank without problems) the grading-quality audits."""
    problems: list[Problem] = []
    questions: list[Question] = []
    first_seen: dict[str, Question] = {}
    for file, data in parsed:
        out = Collector(display(file))
        built = build_file(data, file.stem, out)
        problems.extend(out.problems)
        for question in built:
            if question.id in first_seen:
                other = first_seen[question.id]
                problems.append(Problem(question.file, question.line_of("id"),
                                        f"duplicate id '{question.id}' (first used at "
                                        f"{other.file}:{other.line_of('id')}); ids must be unique across the bank — "
                                        "pick a new one"))
                continue
            first_seen[question.id] = question
            questions.append(question)
    stems = {file.stem for file, _ in parsed}
    for question in questions:  # a question's own topic must be one of the bank's, or filters and stats split
        if len(stems) > 1 and question.topic not in stems:
            problems.append(Problem(question.file, question.line_of("topic"),
                                    f"question '{question.id}': topic '{question.topic}' is not a topic of this bank "
                                    f"(its files: {', '.join(sorted(stems))})"))
    figures: dict[str, Any] = {}
    if deep:
        from drill.quiz.validate import audit_problems, deep_problems

        for question in questions:
            problems.extend(deep_problems(question))
        if audit and not problems:  # grading quality is judged on a bank that works
            found, figures = audit_problems(questions)
            problems.extend(found)
    return ScanResult(Bank(tuple(questions), tuple(display(f) for f, _ in parsed)), problems, figures)


def scan(path: Path, *, audit: bool = True) -> ScanResult:
    """Parse and check a bank completely, collecting every problem (no cache); `drill validate`."""
    return _scan(path, audit=audit)[0]


def _scan(path: Path, *, audit: bool = False) -> tuple[ScanResult, list[tuple[Path, Any]]]:
    parsed: list[tuple[Path, Any]] = []
    syntax: list[Problem] = []
    for file in bank_files(path):
        data, problems = _parse_file(file)
        syntax.extend(problems)
        if not problems:
            parsed.append((file, data))
    result = _build(parsed, deep=True, audit=audit and not syntax)
    files = tuple(display(f) for f in bank_files(path))
    problems = sorted(syntax + result.problems, key=_order(files))
    return ScanResult(Bank(result.bank.questions, files), problems, result.figures), parsed


def _order(files: tuple[str, ...]):  # type: ignore[no-untyped-def]
    rank = {f: i for i, f in enumerate(files)}
    return lambda p: (rank.get(p.file, len(rank)), p.line)


def load_bank(path: Path | None = None, *, cache_dir: Path | None = None) -> Bank:
    """A fully valid bank, or BankError; uses and refreshes the parse cache."""
    if path is None:
        from drill.paths import questions_dir

        path = questions_dir()
    files = bank_files(path)
    cache_file = _cache_path(path, cache_dir)
    key = _cache_key(files)
    cached = _read_cache(cache_file, key, files) if cache_file is not None and key is not None else None
    if cached is not None:
        return cached
    result, _parsed = _scan(path)
    if result.problems:
        raise BankError(result.problems, path)
    if cache_file is not None and key is not None:
        _write_cache(cache_file, key, files, result.bank)
    return result.bank


# --- cache ---------------------------------------------------------------------


def _cache_path(path: Path, cache_dir: Path | None) -> Path | None:
    if cache_dir is None:
        try:
            from drill.paths import data_home

            cache_dir = data_home() / "cache"
        except Exception:  # noqa: BLE001
            return None
    # Only names the file: the key inside decides whether it is used, so a clash costs a rebuild,
    # never a wrong bank. (crc32, not hashlib: loading OpenSSL costs milliseconds per start.)
    digest = f"{zlib.crc32(str(path.resolve()).encode()):08x}"
    return cache_dir / f"bank-{digest}.marshal"


def _cache_key(files: list[Path]) -> tuple[Any, ...] | None:
    """What a cached bank must match; None (no cache) when a file cannot be stat'ed."""
    stats = []
    try:
        for file in files:
            st = file.stat()
            stats.append((str(file.resolve()), st.st_size, st.st_mtime_ns, st.st_ino))
    except OSError:
        return None
    shapes = tuple((name, tuple(f.name for f in dataclasses.fields(cls))) for name, cls in sorted(_types().items()))
    return (CACHE_FORMAT, __version__, sys.version, shapes, tuple(stats))


def _types() -> dict[str, type]:
    """The only types a cached bank may be rebuilt into: each kind's question and parts."""
    found: dict[str, type] = {"CommonWrong": CommonWrong, "Tolerance": Tolerance}
    for kind in kinds.REGISTRY.values():
        for cls in (kind.question, *kind.exports):
            found[cls.__name__] = cls
    return found


def _encode(value: Any, types: dict[str, type], files: dict[str, int]) -> Any:
    """A built question as marshal data: a dataclass is {"": type name, "v": its field values in
    field order, "n": the indexes of the values holding dataclasses}, a tuple holding dataclasses
    a list (plain tuples stay tuples); a question's `file` is the index of its file (display names
    depend on the working folder: recomputed at load). Values in field order, with the nested ones
    named, let a warm start rebuild a question without looking at every field."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if types.get(name) is not type(value):
            raise TypeError(f"{name} is not a registered type")
        values = [_encode(getattr(value, f.name), types, files) for f in dataclasses.fields(value)]
        if isinstance(value, Question):
            values[_field_order(type(value)).index("file")] = files[value.file]
        nested = tuple(i for i, item in enumerate(values) if isinstance(item, (dict, list)))
        return {"": name, "v": tuple(values), "n": nested}
    if isinstance(value, tuple):
        items = [_encode(item, types, files) for item in value]
        return items if any(isinstance(item, (dict, list)) for item in items) else tuple(items)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot cache a {type(value).__name__}")


def _decode(data: dict[str, Any], types: dict[str, type], shown: list[str]) -> Any:
    """The dataclass `_encode` made `data` from (a KeyError/TypeError/IndexError for anything else)."""
    cls = types[data[""]]
    names = _field_order(cls)
    values = data["v"]
    if type(values) is not tuple or len(values) != len(names):
        raise KeyError(cls.__name__)  # not what this drill's type holds: the caller rebuilds
    nested = data["n"]
    if nested:
        values = list(values)
        for i in nested:
            item = values[i]
            if type(item) is dict:
                values[i] = _decode(item, types, shown)
            elif type(item) is list:
                values[i] = tuple(_decode(x, types, shown) if type(x) is dict else x for x in item)
            else:
                raise KeyError(i)  # named as nested but not: not this drill's cache
    fields = dict(zip(names, values, strict=True))
    if issubclass(cls, Question):
        fields["file"] = shown[fields["file"]]
    # Filled in directly rather than through the frozen __init__ (a setattr per field): the names
    # are the type's own, in its order, and no registered type has a __post_init__.
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


@lru_cache(maxsize=64)
def _field_order(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _read_cache(cache_file: Path, key: tuple[Any, ...], files: list[Path]) -> Bank | None:
    """The cached bank, each question holding its LISTED fields and its packed rest; None (rebuild)
    when the file is missing, foreign, stale or fails its checksum."""
    try:
        blob = marshal.loads(cache_file.read_bytes())
        if not isinstance(blob, dict) or blob.get("key") != key:
            return None
        entries = blob["questions"]
        if _checksum(packed for _, _, packed in entries) != blob["crc"]:
            return None
        shown = _shown(files)
        types = _types()
        questions = []
        for name, listed, packed in entries:
            cls = types[name]
            if not issubclass(cls, Question) or type(listed) is not tuple or type(packed) is not bytes:
                return None
            obj = object.__new__(cls)
            fields = obj.__dict__
            fields.update(zip(LISTED, listed, strict=True))
            fields["file"] = shown[fields["file"]]
            fields[PACKED] = partial(_unpack, packed, listed, types, shown, cache_file)
            questions.append(obj)
        return Bank(tuple(questions), tuple(shown))
    except Exception:  # noqa: BLE001 - missing, truncated, corrupt, foreign: rebuild silently
        return None


def _checksum(blobs: Iterable[bytes]) -> int:
    """CRC32 of the packed records in order, as of their concatenation (without building it)."""
    crc = 0
    for blob in blobs:
        crc = zlib.crc32(blob, crc)
    return crc


def _unpack(packed: bytes, listed: tuple[Any, ...], types: dict[str, type], shown: list[str],
            cache_file: Path) -> dict[str, Any]:
    """The fields of one cached question, on first use. The checksum passed at load, so only a cache
    written to pass it lands here damaged: it is removed, and the one line says to start again."""
    try:
        fields = _decode(marshal.loads(packed), types, shown).__dict__
        if any(fields[name] != value for name, value in zip(LISTED, listed, strict=True) if name != "file"):
            raise ValueError("its listed fields are not its own")
        return fields
    except Exception:  # noqa: BLE001
        try:
            cache_file.unlink()
        except OSError:
            pass
        raise UserError("the question bank's cache was damaged, so it was removed; run the command again "
                        "(it is rebuilt from the YAML files)", str(cache_file)) from None


def _write_cache(cache_file: Path, key: tuple[Any, ...], files: list[Path], bank: Bank) -> None:
    """Store the built questions of a bank that just passed every check (best effort, atomic)."""
    tmp = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
    try:
        index = {name: i for i, name in enumerate(_shown(files))}
        types = _types()
        entries = [(type(q).__name__, tuple(index[q.file] if name == "file" else getattr(q, name) for name in LISTED),
                    marshal.dumps(_encode(q, types, index))) for q in bank.questions]
        if _cache_key(files) != key:  # a file changed while we were checking it
            return
        crc = _checksum(packed for _, _, packed in entries)
        blob = marshal.dumps({"key": key, "crc": crc, "questions": entries})
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, cache_file)
    except Exception:  # noqa: BLE001 - read-only data folder, an unregistered type: just no cache
        try:
            tmp.unlink()
        except OSError:
            pass
