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

Output tensors are read by the caller with `torch.load(weights_only=True)`
after a size check (`MAX_OUTPUT_FILE_BYTES`); nothing is ever unpickled.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

MAX_STATUS_BYTES = 16 * 2**20
MAX_LINE_BYTES = 256 * 1024
MAX_RECORDS = 20000
MAX_DEPTH = 8
MAX_TEXT = 2000
MAX_OUTPUT_FILE_BYTES = 256 * 2**20

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


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

    def esc(m: re.Match) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    text = _CONTROL.sub(esc, text)
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
    "end": {"case": _INT, "elapsed": _NUM, **_FAILURE},
    "load_error": dict(_FAILURE),
    "grad_error": {"case": _INT, "message": _STR},
    "attrs": {"values": (dict,)},
    "audit": {"name": _STR, "elapsed": _NUM, "data": (dict,), "error": (dict,)},
    "trip": {"op": _STR, "line": _INT + _NONE, "source": _STR + _NONE},
    "denied": {"what": _STR, "detail": _STR},
    "sandbox": {"sandbox": _STR, "reason": _STR, "user": _BOOL, "pid": _BOOL, "mount": _BOOL, "net": _BOOL, "fs": _STR,
                "kernels_blocked": _INT, "audit_hook": _BOOL},
}
REQUIRED = {"start": ("case",), "end": ("case", "status"), "load_error": ("status",), "trip": ("op",),
            "audit": ("name",), "attrs": ("values",), "grad_error": ("case", "message"), "sandbox": ("sandbox",)}


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
