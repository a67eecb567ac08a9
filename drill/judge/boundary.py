"""Layer 4: the one place where what the learner's process wrote becomes data the grader uses.

Everything the child produces (status records, printed output, audit
measurements) may have been written, rewritten or garbled by the learner's
code. `read_status` turns the status file into validated records: each line
is size-capped before it is parsed, parsed with the depth of its nesting
bounded (a 200000-deep document is refused, never recursed into), checked
against the schema of its event type (field names, types, sizes), and
every string in it is made safe to print (`safe_text`: control characters
and ANSI escapes shown as escapes, length capped). Anything else makes the
whole report unreadable, and the run ends as `crashed: unreadable report`:
a report that is partly forged is not partly believed.

Output tensors are read by `load_outputs`: the file (within
`MAX_OUTPUT_FILE_BYTES`) is a JSON index and raw bytes (`tensor_file`), the
index checked entry by entry against the data before anything is built from
it, nothing ever unpickled; every value must be a plain, dense CPU tensor of
a plain dtype that its file really holds (no nested, quantized, sparse, meta
or subclass tensor reaches the comparison, where some of them crashed the
grader). An archive, compressed or not, is simply not such a file.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from drill.terminal_text import escape_controls

MAX_STATUS_BYTES = 16 * 2**20
MAX_LINE_BYTES = 256 * 1024
MAX_RECORDS = 20000
MAX_DEPTH = 8
MAX_TEXT = 2000
MAX_OUTPUT_FILE_BYTES = 256 * 2**20


def safe_text(value: Any, limit: int = MAX_TEXT, *, newlines: bool = False) -> str:
    """`value` as a string that cannot drive a terminal: control characters (ESC included) and bidi
    overrides escaped as \\xNN / \\uNNNN, tabs as spaces, newlines kept only when asked, cut to `limit`."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > 4 * limit:
        text = text[: 4 * limit]
    text = text.replace("\t", "    ")
    if not newlines:
        text = text.replace("\r\n", "\n").replace("\n", " ⏎ ")
    else:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = escape_controls(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Unreadable(ValueError):
    """The child's report breaks the protocol; the message says how (for the crashed diagnosis)."""


def _depth_ok(raw: str, limit: int = MAX_DEPTH) -> bool:
    """Nesting depth of a JSON text without parsing it (strings skipped), so a deep document is never recursed."""
    depth, in_str, escape = 0, False, False
    for ch in raw:
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


# Per event: field -> allowed types. Unknown events and unknown fields are refused.
_STR, _INT, _NUM, _BOOL, _NONE = (str,), (int,), (int, float), (bool,), (type(None),)
_FAILURE = {
    "status": _STR, "message": _STR + _NONE, "type": _STR + _NONE, "line": _INT + _NONE, "source": _STR + _NONE,
    "op": _STR + _NONE, "names": (list,),
}
SCHEMA: dict[str, dict[str, tuple]] = {
    "load": {},
    "loaded": {},
    "done": {},
    "start": {"case": _INT},
    "end": {"case": _INT, "elapsed": _NUM, "cpu": _NUM, **_FAILURE},
    "load_error": dict(_FAILURE),
    "grad_error": {"case": _INT, "message": _STR},
    "attrs": {"values": (dict,)},
    "audit": {"name": _STR, "elapsed": _NUM, "data": (dict,), "error": (dict,)},
    "trip": {"op": _STR, "line": _INT + _NONE, "source": _STR + _NONE},
    "denied": {"what": _STR, "detail": _STR},
    # the grading device as the child set it up (`drill check --device cuda`), or why it could not
    "device": {"device": _STR, "name": _STR, "memory_cap_mb": _INT, "error": _STR},
    "sandbox": {"sandbox": _STR, "reason": _STR, "user": _BOOL, "pid": _BOOL, "mount": _BOOL, "net": _BOOL, "fs": _STR,
                "kernels_blocked": _INT, "audit_hook": _BOOL, "seccomp": _STR, "seccomp_reason": _STR},
}
REQUIRED = {"start": ("case",), "end": ("case", "status"), "load_error": ("status",), "trip": ("op",),
            "audit": ("name",), "attrs": ("values",), "grad_error": ("case", "message"), "sandbox": ("sandbox",),
            "device": ("device",)}


def _clean(value: Any, depth: int = 0) -> Any:
    """Strings made safe, numbers checked, containers bounded; raises Unreadable otherwise."""
    if depth > MAX_DEPTH:
        raise Unreadable("nested too deeply")
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > 2**63:
            raise Unreadable("integer out of range")
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        if len(value) > 1000:
            raise Unreadable("list too long")
        return [_clean(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if len(value) > 200 or not all(isinstance(k, str) and len(k) <= 100 for k in value):
            raise Unreadable("malformed object")
        return {safe_text(k, 100): _clean(v, depth + 1) for k, v in value.items()}
    raise Unreadable(f"unexpected value of type {type(value).__name__}")


def validate_record(obj: Any) -> dict[str, Any]:
    """One status record checked against its event's schema, strings made safe; Unreadable otherwise."""
    if not isinstance(obj, dict):
        raise Unreadable("a record is not an object")
    event = obj.get("event")
    if not isinstance(event, str) or event not in SCHEMA:
        raise Unreadable(f"unknown event {safe_text(event, 40)!s}")
    fields = SCHEMA[event]
    for key, value in obj.items():
        if key == "event":
            continue
        if key not in fields:
            raise Unreadable(f"unexpected field {safe_text(key, 40)} in a {event} record")
        if not isinstance(value, fields[key]) or (isinstance(value, bool) and bool not in fields[key]):
            raise Unreadable(f"field {key} of a {event} record has the wrong type")
    for key in REQUIRED.get(event, ()):
        if key not in obj:
            raise Unreadable(f"a {event} record lacks {key}")
    return _clean(obj)


_ATTR_FIELDS = {"present": _BOOL, "type": _STR, "value": (str, int, float, bool, type(None))}


def check_against_job(records: list[dict[str, Any]], n_cases: int, report_attrs: tuple[str, ...] = ()) -> str:
    """"" when every nested value the parent later uses is what the job allows, else why not (issue 30).

    `validate_record` checks each field's outer type; what it cannot know is the job: a case index must name
    one of the `n_cases` cases sent (an index past the list once ended in a traceback in the parent), and the
    attrs record must hold, for names the job asked about only, {present: bool, type: str, value: a JSON
    scalar} (a value of another shape once reached a dataclass `__repr__`)."""
    for rec in records:
        case = rec.get("case")
        if "case" in rec and not (isinstance(case, int) and not isinstance(case, bool) and 0 <= case < n_cases):
            return f"a {rec.get('event')} record names case {safe_text(case, 40)!s}, of {n_cases}"
        if rec.get("event") != "attrs":
            continue
        for name, info in rec["values"].items():
            if name not in report_attrs:
                return f"the attrs record reports {safe_text(name, 40)}, which was not asked for"
            if not isinstance(info, dict) or not set(info) <= set(_ATTR_FIELDS) or "present" not in info:
                return f"the attrs record's {name} is malformed"
            for key, value in info.items():
                if not isinstance(value, _ATTR_FIELDS[key]) or (isinstance(value, bool) and key == "type"):
                    return f"the attrs record's {name}.{key} has the wrong type"
    return ""


def read_status(path: Path) -> list[dict[str, Any]]:
    """Every record of the status file, validated. A missing file is no records; anything malformed raises."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_STATUS_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise Unreadable(f"status file unreadable ({exc.strerror})") from exc
    if len(raw) > MAX_STATUS_BYTES:
        raise Unreadable("status file too large")
    records = []
    for n, line in enumerate(raw.split(b"\n")):
        if not line.strip():
            continue
        if n >= MAX_RECORDS:
            raise Unreadable("too many status records")
        if len(line) > MAX_LINE_BYTES:
            raise Unreadable("a status record is too long")
        text = line.decode("utf-8", errors="replace")
        if not _depth_ok(text):
            raise Unreadable("a status record is nested too deeply")
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise Unreadable("a status record is not JSON") from exc
        records.append(validate_record(obj))
    return records


def audit_data_ok(value: Any) -> bool:
    """An audit's measurements: a bounded JSON object (the judging half checks the fields it reads)."""
    try:
        _clean(value)
    except Unreadable:
        return False
    return isinstance(value, dict)


MAX_OUTPUT_RECORDS = 200


def load_outputs(path: Path) -> dict[str, Any]:
    """The tensors one case saved (`out`, gradients, flags), or Unreadable with what was wrong.

    The file is the learner's process's to write, so it is read as data
    only: within `MAX_OUTPUT_FILE_BYTES`, through `tensor_file.read`, which
    checks its index entry by entry against the bytes it points into (plain
    dtypes, shapes that fit) and never unpickles or runs anything; then every
    value is checked to be a plain dense tensor.
    """
    from drill.judge import tensor_file

    try:
        saved = tensor_file.read(path, MAX_OUTPUT_FILE_BYTES)
    except OSError as exc:
        raise Unreadable(f"output file could not be read ({exc.strerror or type(exc).__name__})") from exc
    except ValueError as exc:
        raise Unreadable(f"output file: {safe_text(str(exc), 200)}") from exc
    if "out" not in saved:
        raise Unreadable("output file does not hold an `out` tensor")
    if len(saved) > MAX_OUTPUT_RECORDS:
        raise Unreadable("output file holds too many tensors")
    for key, value in saved.items():
        why = _tensor_problem(value)
        if why:
            raise Unreadable(f"{safe_text(key, 60)} is {why}")
    return saved


def _tensor_problem(t: Any) -> str:
    """Why `t` is not a tensor the comparison may touch, or ""."""
    import torch

    if type(t) is not torch.Tensor:
        return f"a {safe_text(type(t).__name__, 60)}, not a plain tensor"
    if t.is_nested or t.is_quantized or t.is_meta or t.layout != torch.strided or t.device.type != "cpu":
        return "not a dense CPU tensor"
    if t.dtype not in _plain_dtypes():
        return f"of dtype {safe_text(str(t.dtype), 40)}"
    if t.dim() > 16 or t.numel() * t.element_size() > MAX_OUTPUT_FILE_BYTES:
        return "larger than its file could hold"
    return ""


@functools.lru_cache(maxsize=1)
def _plain_dtypes() -> frozenset:
    """Built on first use: this module imports no torch at load time."""
    import torch

    return frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
                      torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool})
