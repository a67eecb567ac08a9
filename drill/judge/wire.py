"""The grading server's wire format: JSON lines, validated on both sides (never pickle).

One request per connection, one JSON object per line, each way:

    client -> server  {"v": VERSION, "op": "check", "fingerprint": F, "items": [ITEM, ...]}
                      {"v": VERSION, "op": "status" | "stop", "fingerprint": F}
    server -> client  {"alive": true}                      (every HEARTBEAT_S while grading)
                      {"index": i, "result": RESULT}       (as each item finishes, any order)
                      {"index": i, "error": {"message": str, "where": str | null}}   (a UserError)
                      {"index": i, "internal": str}        (an unexpected failure: the client grades it itself)
                      {"done": true} | {"stale": true} | {"status": {...}} | {"stopping": true}
                      {"refused": str}                     (a request this server will not run)

ITEM = {"path": absolute path, "exercise": str | null, "seed": int,
"limits": {timeout_s, cpu_s, memory_mb, processes}, "strict", "in_model",
"audit", "policy": bool, "device": "cpu" | "cuda" | "auto" | null}. The
client draws the seed, so a check that falls back to the in-process path
replays the same cases. The device is part of the request: a server whose
status says `"cuda": false` is never sent a check that needs CUDA (the
client grades that one itself), and refuses one if it is.

Everything read from the other side goes through `parse_request` or
`result_from_wire`: unknown or mistyped fields, oversized strings and lists
are refused with `WireError`, never half-used. No torch here: the client
side of `drill check` stays torch-free.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from drill.judge.devices import CHOICES as DEVICES
from drill.judge.limits import Limits

if TYPE_CHECKING:
    from drill.judge.check import Result


VERSION = 2  # 2: items carry the device, results the device and reference backend (issue 17)
MAX_LINE_BYTES = 32 * 2**20  # one result line; a result with every test is far below this
MAX_ITEMS = 1000
MAX_TESTS = 20000
MAX_TEXT = 200_000  # one string (output_tail is 2000, messages are short)
HEARTBEAT_S = 2.0
OPS = ("check", "status", "stop")
STATUSES = ("pass", "fail", "error")
TEST_STATUSES = ("pass", "fail", "error", "not_run")


class WireError(ValueError):
    """A message from the other side that does not fit the format: it is not used at all."""


def encode(obj: dict[str, Any]) -> bytes:
    """One line; NaN/inf are written as null (JSON has no such numbers)."""
    return (json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False) + "\n").encode()


def decode(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_LINE_BYTES:
        raise WireError("message too large")
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {type(exc).__name__}") from None
    if not isinstance(value, dict):
        raise WireError("not a JSON object")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# -- requests ------------------------------------------------------------------------------------


def item(path: str, exercise: str | None, seed: int, limits: Limits, *, strict: bool = False, in_model: bool = False,
         audit: bool = True, policy: bool = True, device: str | None = None) -> dict[str, Any]:
    return {"path": path, "exercise": exercise, "seed": int(seed),
            "limits": {"timeout_s": float(limits.timeout_s), "cpu_s": float(limits.cpu_s),
                       "memory_mb": int(limits.memory_mb), "processes": int(limits.processes)},
            "strict": bool(strict), "in_model": bool(in_model), "audit": bool(audit), "policy": bool(policy),
            "device": device}


def request(op: str, fingerprint: str, items: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"v": VERSION, "op": op, "fingerprint": fingerprint}
    if items is not None:
        out["items"] = items
    return out


def parse_request(doc: dict[str, Any]) -> dict[str, Any]:
    """The request, checked field by field (the server runs nothing it has not validated)."""
    _keys(doc, {"v", "op", "fingerprint"}, {"items"}, "request")
    if doc["v"] != VERSION:
        raise WireError(f"protocol version {doc['v']!r}, this server speaks {VERSION}")
    if doc["op"] not in OPS:
        raise WireError(f"unknown op {doc['op']!r}")
    _text(doc["fingerprint"], "fingerprint", 200)
    if doc["op"] != "check":
        return doc
    items = doc.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
        raise WireError(f"items must be a list of 1..{MAX_ITEMS}")
    for it in items:
        _item(it)
    return doc


def _item(it: Any) -> None:
    _keys(it, {"path", "exercise", "seed", "limits", "strict", "in_model", "audit", "policy", "device"}, set(), "item")
    path = _text(it["path"], "path", 4096)
    if not path.startswith("/") or "\0" in path:
        raise WireError("path must be absolute")
    if it["exercise"] is not None:
        _text(it["exercise"], "exercise", 200)
    if not _is_int(it["seed"]) or not 0 <= it["seed"] < 2**63:
        raise WireError("seed must be a non-negative integer")
    lim = it["limits"]
    _keys(lim, {"timeout_s", "cpu_s", "memory_mb", "processes"}, set(), "limits")
    for key in ("timeout_s", "cpu_s"):
        if not _is_num(lim[key]) or not 0 < lim[key] <= 1e6:
            raise WireError(f"limits.{key} out of range")
    for key in ("memory_mb", "processes"):
        if not _is_int(lim[key]) or not 0 < lim[key] <= 2**40:
            raise WireError(f"limits.{key} out of range")
    for key in ("strict", "in_model", "audit", "policy"):
        if not isinstance(it[key], bool):
            raise WireError(f"{key} must be true or false")
    if it["device"] is not None and it["device"] not in DEVICES:
        raise WireError(f"device must be one of {', '.join(DEVICES)} or null")


def item_limits(it: dict[str, Any]) -> Limits:
    lim = it["limits"]
    return Limits(timeout_s=float(lim["timeout_s"]), cpu_s=float(lim["cpu_s"]), memory_mb=int(lim["memory_mb"]),
                  processes=int(lim["processes"]))


# -- results -------------------------------------------------------------------------------------

_TEST_FIELDS = ("name", "status", "message", "max_abs", "max_rel", "detail", "short", "in_model")
_DIAGNOSIS_FIELDS = ("id", "title", "why", "fix")


def result_to_wire(result: Result) -> dict[str, Any]:
    """Every field the client's report and store need (more than --json: the panel's short lines too)."""
    d = result.diagnosis
    return {
        "exercise": result.exercise, "file": result.file, "status": result.status, "seed": result.seed,
        "tests": [{f: getattr(t, f) for f in _TEST_FIELDS} for t in result.tests],
        "diagnosis": None if d is None else {f: getattr(d, f) for f in _DIAGNOSIS_FIELDS},
        "diagnosis_detail": result.diagnosis_detail, "diagnosis_partial": result.diagnosis_partial,
        "advisories": list(result.advisories), "audit": list(result.audit), "elapsed_s": float(result.elapsed_s),
        "output_tail": result.output_tail, "layers": dict(result.layers), "unmeasured": result.unmeasured,
        "device": result.device, "reference_backend": result.reference_backend,
    }


def prepare_to_read() -> None:
    """Import what reading a result takes (check's and spec's dataclasses, ~10 ms): a client calls it once its
    request is sent, so that work overlaps the server's grading instead of delaying the request."""
    import drill.judge.check
    import drill.judge.spec  # noqa: F401


def result_from_wire(doc: Any) -> Result:
    """A `Result` rebuilt from the server's document; WireError if any field is missing or mistyped."""
    from drill.judge.check import Result, TestResult
    from drill.judge.spec import Diagnosis

    _keys(doc, {"exercise", "file", "status", "seed", "tests", "diagnosis", "diagnosis_detail", "diagnosis_partial",
                "advisories", "audit", "elapsed_s", "output_tail", "layers", "unmeasured", "device",
                "reference_backend"}, set(), "result")
    if doc["status"] not in STATUSES:
        raise WireError("bad result status")
    if not _is_int(doc["seed"]):
        raise WireError("bad seed")
    tests = doc["tests"]
    if not isinstance(tests, list) or len(tests) > MAX_TESTS:
        raise WireError("bad tests list")
    parsed = []
    for t in tests:
        _keys(t, set(_TEST_FIELDS), set(), "test")
        if t["status"] not in TEST_STATUSES:
            raise WireError("bad test status")
        for f in ("name", "message", "detail", "short", "in_model"):
            _text(t[f], f"test.{f}")
        for f in ("max_abs", "max_rel"):
            if t[f] is not None and not _is_num(t[f]):
                raise WireError(f"bad test.{f}")
        parsed.append(TestResult(**{f: (float(t[f]) if f in ("max_abs", "max_rel") and t[f] is not None else t[f])
                                    for f in _TEST_FIELDS}))
    diagnosis = None
    if doc["diagnosis"] is not None:
        _keys(doc["diagnosis"], set(_DIAGNOSIS_FIELDS), set(), "diagnosis")
        diagnosis = Diagnosis(*(_text(doc["diagnosis"][f], f"diagnosis.{f}") for f in _DIAGNOSIS_FIELDS))
    layers = doc["layers"]
    if not isinstance(layers, dict) or len(layers) > 20:
        raise WireError("bad layers")
    for k, v in layers.items():
        _text(k, "layers key", 100)
        _text(v, "layers value")
    for f in ("advisories", "audit"):
        if not isinstance(doc[f], list) or len(doc[f]) > 1000:
            raise WireError(f"bad {f}")
        for s in doc[f]:
            _text(s, f)
    for f in ("diagnosis_partial", "unmeasured"):
        if not isinstance(doc[f], bool):
            raise WireError(f"bad {f}")
    if not _is_num(doc["elapsed_s"]):
        raise WireError("bad elapsed_s")
    return Result(
        exercise=_text(doc["exercise"], "exercise", 200), file=_text(doc["file"], "file", 4096), status=doc["status"],
        seed=int(doc["seed"]), tests=parsed, diagnosis=diagnosis,
        diagnosis_detail=_text(doc["diagnosis_detail"], "diagnosis_detail"), diagnosis_partial=doc["diagnosis_partial"],
        advisories=list(doc["advisories"]), audit=list(doc["audit"]), elapsed_s=float(doc["elapsed_s"]),
        output_tail=_text(doc["output_tail"], "output_tail"), layers=dict(layers), unmeasured=doc["unmeasured"],
        device=_text(doc["device"], "device", 500),
        reference_backend=_text(doc["reference_backend"], "reference_backend", 5000),
    )


def parse_reply(doc: dict[str, Any], n_items: int) -> tuple[str, Any]:
    """(kind, payload) of one server line: ("alive", None), ("result", (i, Result)), ("error", (i, msg, where)),
    ("internal", (i, text)), ("done"|"stale"|"stopping", None), ("status", dict), ("refused", text)."""
    if doc == {"alive": True}:
        return "alive", None
    for flag in ("done", "stale", "stopping"):
        if doc == {flag: True}:
            return flag, None
    if set(doc) == {"status"} and isinstance(doc["status"], dict):
        return "status", doc["status"]
    if set(doc) == {"refused"}:
        return "refused", _text(doc["refused"], "refused", 2000)
    if "index" in doc and len(doc) == 2:
        i = doc["index"]
        if not _is_int(i) or not 0 <= i < n_items:
            raise WireError("bad index")
        if "result" in doc:
            return "result", (i, result_from_wire(doc["result"]))
        if "error" in doc:
            err = doc["error"]
            _keys(err, {"message", "where"}, set(), "error")
            where = None if err["where"] is None else _text(err["where"], "where", 5000)
            return "error", (i, _text(err["message"], "message", 5000), where)
        if "internal" in doc:
            return "internal", (i, _text(doc["internal"], "internal", 5000))
    raise WireError("unexpected message")


# -- checks --------------------------------------------------------------------------------------


def _keys(doc: Any, required: set[str], optional: set[str], what: str) -> None:
    if not isinstance(doc, dict):
        raise WireError(f"{what} must be an object")
    missing = required - set(doc)
    extra = set(doc) - required - optional
    if missing or extra:
        raise WireError(f"{what}: " + (f"missing {sorted(missing)}" if missing else f"unknown {sorted(extra)}"))


def _text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise WireError(f"{what} must be a string of at most {limit} characters")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)
