"""The "exact" case kind: graded calls whose answers are plain Python values, compared exactly.

Some exercises return no tensors: bpe's merges (list[tuple[bytes, bytes]]), its vocabulary
(dict[int, bytes]), token ids (list[int]), a decoded str; beam search's token lists and a paged
cache's block tables are the same sort of thing. This file carries them both ways as JSON,
driven by a *schema* the spec writes down for each value, and never pickles anything:

- schema: "int", "str", "bytes", "float", "bool", ["list", T], ["tuple", T1, T2, ...] (a fixed
  length; a list of that length is accepted for it) or ["dict", K, V]. `encode` checks a
  value against one and turns it into JSON (bytes as hex text, a dict as [key, value] pairs in
  key order); a value of another type is the learner's `wrong_type`, named by its path
  ("train_bpe(...)[1][3][0] is str 'th', not bytes"). `decode` is the inverse.
- child side (`run_case`, loaded by path like grads.py; stdlib and torch only): runs a
  *program* of steps, `extra["exact"]["steps"]`, each a call of a graded name of the file
  (`{"call": "Tokenizer", "args": [...]}`) or of a method of an earlier step's result
  (`{"on": 1, "method": "encode", "args": [...]}`). An argument is `{"v": json, "s": schema}`,
  or `{"step": k}` / `{"step": k, "pick": i}`: an earlier result (or element i of it) passed
  on unchanged, so encode can run on the learner's own trained vocabulary; `{"lookup": a, "keys": b}`
  is [a[k] for k in b] (ids read back through the learner's own vocabulary). The last result
  (element `pick` of it, if given) is encoded with `returns` and comes back as one uint8
  tensor of its UTF-8 JSON, at most MAX_BYTES.
- a timed case (`extra["exact"]["timing"]`) runs the same program on the reference (its source
  sent in the job and compiled only for this case, which is the last: every value case has
  run by then) and on the learner's file, on CPU time, and returns the seconds as JSON. A
  learner run past `stop` times the reference's median is stopped by a CPU-time alarm.
- parent side: `answer` reads the tensor back (size- and depth-checked JSON); `compare_answers`
  says in words what differs ("merge 17: got (b' th', b'e'), expected (b' t', b'he')", "id 4
  of 31", "length 40, expected 41"); `fingerprint` turns an answer into an int64 vector of the
  expected answer's shape (one hash per expected element, then the length and a hash of the
  rest), which is what the bug-variant matching of diagnose.py compares: two answers have
  equal fingerprints exactly when they are equal (up to 48-bit hash collisions).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import torch

KIND = "exact"
MAX_BYTES = 8 << 20  # an answer's JSON, both ways (a 1000-entry vocab is ~20 KB)
MAX_DEPTH = 8
CLEAR = 2.0  # a timed case decides after one run of each where the learner is under factor / CLEAR (`_timed`)
_NAMES = {"int": "an int", "str": "a str", "bytes": "bytes", "float": "a float", "bool": "a bool"}


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class Stopped(BaseException):
    """A timed learner run past its CPU budget (BaseException: `except Exception` in the learner's code misses it)."""


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _wrong(path: str, value: Any, wanted: str) -> ContractError:
    return ContractError("wrong_type", f"{path} is {_type_name(value)} ({value!r:.60}), not {wanted}")


def encode(value: Any, schema: Any, path: str = "value") -> Any:
    """`value` as JSON under `schema`; ContractError("wrong_type") naming the path where it does not fit."""
    if isinstance(schema, str):
        if schema == "bytes":
            if not isinstance(value, bytes):
                raise _wrong(path, value, "bytes")
            return value.hex()
        if schema == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise _wrong(path, value, "an int")
            return int(value)
        if schema == "str":
            if not isinstance(value, str):
                raise _wrong(path, value, "a str")
            return str(value)
        if schema == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _wrong(path, value, "a float")
            return float(value)
        if schema == "bool":
            if not isinstance(value, bool):
                raise _wrong(path, value, "a bool")
            return bool(value)
        raise ValueError(f"unknown schema {schema!r}")
    head = schema[0]
    if head == "list":
        if not isinstance(value, list | tuple):
            raise _wrong(path, value, "a list")
        return [encode(v, schema[1], f"{path}[{i}]") for i, v in enumerate(value)]
    if head == "tuple":
        items = schema[1:]
        if not isinstance(value, list | tuple) or len(value) != len(items):
            raise _wrong(path, value, f"a tuple of {len(items)}")
        return [encode(v, s, f"{path}[{i}]") for i, (v, s) in enumerate(zip(value, items, strict=True))]
    if head == "dict":
        if not isinstance(value, dict):
            raise _wrong(path, value, "a dict")
        pairs = [[encode(k, schema[1], f"{path} key"), None] for k in value]
        for pair, (k, v) in zip(pairs, value.items(), strict=True):
            pair[1] = encode(v, schema[2], f"{path}[{k!r:.40}]")
        try:
            pairs.sort(key=lambda p: p[0])
        except TypeError:
            pass
        return pairs
    raise ValueError(f"unknown schema {schema!r}")


def decode(data: Any, schema: Any) -> Any:
    """The Python value of JSON made by `encode` (tuples as tuples, bytes as bytes, dicts as dicts)."""
    if isinstance(schema, str):
        return bytes.fromhex(data) if schema == "bytes" else data
    head = schema[0]
    if head == "list":
        return [decode(v, schema[1]) for v in data]
    if head == "tuple":
        return tuple(decode(v, s) for v, s in zip(data, schema[1:], strict=True))
    return {decode(k, schema[1]): decode(v, schema[2]) for k, v in data}


def show(data: Any, schema: Any, limit: int = 60) -> str:
    """One JSON element as the learner would print the Python value, clipped."""
    text = repr(decode(data, schema))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def to_tensor(data: Any) -> torch.Tensor:
    raw = json.dumps(data, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    if len(raw) > MAX_BYTES:
        raise ContractError("wrong_shape", f"the answer is {len(raw)} bytes as JSON, over the {MAX_BYTES} cap")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone() if raw else torch.zeros(0, dtype=torch.uint8)


def answer(t: torch.Tensor) -> Any:
    """Parent side: the JSON a child saved (ValueError if it is not a bounded, shallow JSON document)."""
    if t.dtype != torch.uint8 or t.dim() != 1 or t.numel() > MAX_BYTES:
        raise ValueError("not an exact answer")
    data = json.loads(bytes(t.tolist()).decode("ascii"))
    _depth(data, 0)
    return data


def _depth(data: Any, d: int) -> None:
    if d > MAX_DEPTH:
        raise ValueError("answer nested too deeply")
    if isinstance(data, list):
        for v in data:
            _depth(v, d + 1)


# ---------------------------------------------------------------- child side


def _program(target: Any, steps: list[dict], host_getattr: Any) -> list[Any]:
    results: list[Any] = []

    def arg(a: dict) -> Any:
        if "step" in a:
            v = results[int(a["step"])]
            return v[int(a["pick"])] if a.get("pick") is not None else v
        return decode(a["v"], a["s"])

    for step in steps:
        if "lookup" in step:  # [table[k] for k in keys]: ids read through the learner's own vocabulary
            table, keys = arg(step["lookup"]), arg(step["keys"])
            try:
                results.append([table[k] for k in keys])
            except (KeyError, IndexError, TypeError) as exc:
                raise ContractError("wrong_type", f"an id the call returned is not in its own vocab: {exc!r:.80}") \
                    from exc
            continue
        if "call" in step:
            fn = host_getattr(target, step["call"])
            where = step["call"]
        else:
            obj = results[int(step["on"])]
            fn = getattr(obj, step["method"])
            where = f"{type(obj).__name__}.{step['method']}"
        try:
            results.append(fn(*[arg(a) for a in step["args"]]))
        except ContractError:
            raise
        except TypeError as exc:
            if "argument" in str(exc) and "positional" in str(exc):
                raise ContractError("wrong_type", f"{where}: {exc} (the contract's signature)") from exc
            raise
    return results


def _final(results: list[Any], spec: dict, label: str) -> Any:
    out = results[-1]
    if spec.get("pick") is not None:
        if not isinstance(out, tuple | list) or len(out) <= int(spec["pick"]):
            raise ContractError("wrong_type", f"{label} returned {_type_name(out)} ({out!r:.60}), not the "
                                              f"tuple the contract gives")
        out = out[int(spec["pick"])]
        label = f"{label}[{int(spec['pick'])}]"
    return encode(out, spec["returns"], label)


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Execute one exact case; returns {"out": the answer's JSON as uint8}."""
    spec = case["extra"]["exact"]
    label = spec.get("label", case["target"])
    if spec.get("timing"):
        return {"out": to_tensor(_timed(mod, spec, host))}
    results = _program(mod, spec["steps"], getattr)
    return {"out": to_tensor(_final(results, spec, label))}


def _timed(mod: Any, spec: dict, host: Any) -> dict:
    """CPU seconds of the reference's runs and the learner's (stopped past `stop` x the reference's median).

    One run of each comes first. A learner under `factor / CLEAR` times the reference is decided there: CPU
    time does not swing by 2x between two runs of one program (load shows in wall time, not in thread time),
    and a correct solution is usually within 1-2x, so most checks pay two runs instead of five or six. Anything
    nearer the limit gets the full medians of `runs` runs."""
    import signal

    timing = spec["timing"]
    runs, factor = int(timing["runs"]), float(timing["factor"])
    namespace: dict = {"__name__": "_drill_exact_reference"}
    with host.trusted():
        exec(compile(timing["reference"], "<drill reference>", "exec"), namespace)  # noqa: S102 - the parent's

    # A reference whose time is linear in its input may run on a part of it, its time scaled up: bpe's encode
    # report times the reference on a quarter of the 200 KB (0.16 s, not 0.63 s) and the learner on all of it.
    ref_steps, scale = timing.get("reference_steps") or spec["steps"], float(timing.get("scale", 1.0))

    def reference_run() -> float:
        with host.trusted():
            t0 = time.thread_time()
            _program(namespace, ref_steps, lambda ns, name: ns[name])
            return (time.thread_time() - t0) * scale

    def alarm(signum: int, frame: Any) -> None:
        raise Stopped()

    ref = [reference_run()]
    mine: list[float] = []
    stopped = False
    old = signal.signal(signal.SIGPROF, alarm)
    try:
        while len(mine) < runs and not stopped:
            base = sorted(ref)[len(ref) // 2]
            signal.setitimer(signal.ITIMER_PROF, max(base, 1e-3) * float(timing["stop"]))
            t0 = time.thread_time()
            try:
                _program(mod, spec["steps"], getattr)
            except Stopped:
                stopped = True
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            mine.append(time.thread_time() - t0)
            if len(mine) == 1 and not stopped:
                if mine[0] < base * factor / CLEAR:
                    break
                ref += [reference_run() for _ in range(runs - 1)]
                continue
            # decided already: the median of `runs` is on one side of the limit either way
            limit = sorted(ref)[len(ref) // 2] * factor
            over = sum(m > limit for m in mine)
            need = runs // 2 + 1
            if over >= need or len(mine) - over >= need:
                break
    finally:
        signal.signal(signal.SIGPROF, old)
    namespace.clear()  # the reference's objects go before the answer is written
    return {"reference_s": ref, "learner_s": mine, "stopped": stopped}


# ---------------------------------------------------------------- parent side


def _h(data: Any) -> int:
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=6).digest(), "little")


def _elements(data: Any, schema: Any) -> list[tuple[Any, Any]] | None:
    """(key, element) pairs of a list or dict answer, None for a scalar one."""
    if isinstance(schema, str) or schema[0] == "tuple":
        return None
    if schema[0] == "list":
        return list(enumerate(data))
    return [(k, v) for k, v in data]


def fingerprint(data: Any, expected: Any, schema: Any) -> torch.Tensor:
    """An int64 vector of `expected`'s shape: per expected element, the hash of the answer's element with the
    same index (or key), -1 where it has none; then the answer's length and a hash of what it has beyond."""
    want = _elements(expected, schema)
    if want is None:
        return torch.tensor([_h(data)], dtype=torch.int64)
    have = dict(_elements(data, schema) or [])
    keys = [k for k, _ in want]
    known = set(json.dumps(k) for k in keys)
    extra = [[k, v] for k, v in have.items() if json.dumps(k) not in known]
    vec = [_h(have[k]) if k in have else -1 for k in keys]
    return torch.tensor([*vec, len(have), _h(extra)], dtype=torch.int64)


def compare_answers(data: Any, expected: Any, schema: Any, item: str = "element", what: str = "output"):
    """A compare.Comparison for an exact answer, its message saying where it first differs and how."""
    from drill.judge.compare import Comparison

    if data == expected:
        return Comparison(True, "", "", 0.0, 0.0)
    want = _elements(expected, schema)

    def fail(msg: str) -> Comparison:
        return Comparison(False, "values", f"{what}: {msg}", None, None, short=msg)

    if want is None:
        if isinstance(data, str) and isinstance(expected, str):
            i = next((j for j, (a, b) in enumerate(zip(data, expected, strict=False)) if a != b),
                     min(len(data), len(expected)))
            return fail(f"got {show(data, schema)}, expected {show(expected, schema)} (they differ from character "
                        f"{i} on)")
        return fail(f"got {show(data, schema)}, expected {show(expected, schema)}")
    sub = schema[1] if schema[0] == "list" else schema[2]
    have = _elements(data, schema) or []
    if schema[0] == "list":
        n_diff = sum(a != b for a, b in zip(data, expected, strict=False)) + abs(len(data) - len(expected))
        for i, (a, b) in enumerate(zip(data, expected, strict=False)):
            if a != b:
                return fail(f"{item} {i}: got {show(a, sub)}, expected {show(b, sub)} (the first of {n_diff} "
                            f"differences; {len(data)} {item}s, expected {len(expected)})")
        longer, cut = (data, "extra") if len(data) > len(expected) else (expected, "missing")
        i = min(len(data), len(expected))
        return fail(f"{len(data)} {item}s, expected {len(expected)}: the first {i} agree, then {cut} "
                    f"{show(longer[i], sub)}")
    got = {json.dumps(k): (k, v) for k, v in have}
    n_diff = 0
    first = None
    for k, v in want:
        g = got.pop(json.dumps(k), None)
        if g is None or g[1] != v:
            n_diff += 1
            if first is None:
                first = (k, None if g is None else g[1], v)
    n_diff += len(got)
    if first is not None:
        k, g, v = first
        gs = "nothing" if g is None else show(g, sub)
        return fail(f"{item} {show(k, schema[1])}: got {gs}, expected {show(v, sub)} (the first of {n_diff} "
                    f"differences; {len(have)} entries, expected {len(want)})")
    k, v = next(iter(got.values()))
    return fail(f"{len(have)} entries, expected {len(want)}: extra {item} {show(k, schema[1])} = {show(v, sub)}")


def evaluate(out: torch.Tensor, case: Any):
    """(Comparison, fingerprint) of a child's saved answer for an exact case whose spec set ctx["answer"]."""
    from drill.judge.compare import Comparison

    schema = case.ctx["schema"]
    try:
        data = answer(out)
    except (ValueError, UnicodeDecodeError) as exc:
        return Comparison(False, "shape", f"unreadable answer ({exc})"), None
    if case.ctx.get("normalise") is not None:  # an accepted other layout, renumbered to the expected one
        data = case.ctx["normalise"](data)
    cmp = compare_answers(data, case.ctx["answer"], schema, case.ctx.get("item", "element"),
                          case.ctx.get("what", "output"))
    return cmp, fingerprint(data, case.ctx["answer"], schema)
