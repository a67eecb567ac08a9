"""A tiny arithmetic language for question formulas, evaluated by walking an AST.

Why not `eval`: formulas come from YAML files anyone can edit or download, so
they are data, not code. We parse with `ast` (which never executes anything),
accept only a whitelist of node types and functions, and evaluate the tree
ourselves. The language has no loops, so a formula of MAX_FORMULA_CHARS costs
at most that many steps, and every step is bounded: powers are size-checked
before they run (`9**9**9`, `10**10**10`), integer results are capped at
MAX_RESULT_BITS, and each function has an argument contract (its arity, finite
numbers, `round`'s digits within MAX_ROUND_DIGITS — `round(1, -10**12)` would
otherwise build 10**10**12). Nesting is capped at MAX_DEPTH. The same
evaluator reads typed answers, so they get the same bounds.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

MAX_FORMULA_CHARS = 500
# Results above ~2^4096 bits are never meaningful for these questions and
# would make big-int arithmetic slow; refuse any power that would exceed it.
MAX_RESULT_BITS = 4096
MAX_ROUND_DIGITS = 30
MAX_DEPTH = 50

Number = int | float | bool


class FormulaError(ValueError):
    """A formula that cannot be parsed, is not allowed, or fails to evaluate."""


def _number(value: Number, name: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormulaError(f"{name}() takes numbers")
    if isinstance(value, float) and not math.isfinite(value):
        raise FormulaError(f"{name}() of {value}")
    return value


def _contract(name: str, function: Callable[..., Number], arity: tuple[int, int | None],
              check: Callable[[list[Number]], None] | None = None) -> Callable[..., Number]:
    """`function` behind its argument contract: how many arguments, all finite numbers, and
    any bound of its own (`check`). A call outside the contract is a FormulaError, never a hang."""
    low, high = arity

    def call(*args: Number) -> Number:
        if len(args) < low or (high is not None and len(args) > high):
            count = f"{low}" if low == high else f"{low} to {high}" if high is not None else f"at least {low}"
            raise FormulaError(f"{name}() takes {count} argument{'s' * (count != '1')}, not {len(args)}")
        values = [_number(arg, name) for arg in args]
        if check is not None:
            check(values)
        return function(*values)

    return call


def _round_digits(args: list[Number]) -> None:
    if len(args) == 2:
        digits = args[1]
        if not isinstance(digits, int) or abs(digits) > MAX_ROUND_DIGITS:
            raise FormulaError(
                f"round()'s digits must be a whole number from -{MAX_ROUND_DIGITS} to {MAX_ROUND_DIGITS}")


def _log(x: float, base: float | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "ceil": _contract("ceil", math.ceil, (1, 1)),
    "floor": _contract("floor", math.floor, (1, 1)),
    "round": _contract("round", round, (1, 2), _round_digits),
    "min": _contract("min", min, (2, None)),
    "max": _contract("max", max, (2, None)),
    "abs": _contract("abs", abs, (1, 1)),
    "sqrt": _contract("sqrt", math.sqrt, (1, 1)),
    "log": _contract("log", _log, (1, 2)),
    "log2": _contract("log2", math.log2, (1, 1)),
    "log10": _contract("log10", math.log10, (1, 1)),
    "exp": _contract("exp", math.exp, (1, 1)),
    "int": _contract("int", int, (1, 1)),
}

# Named constants a formula (and a typed answer) may use. Only pi: a RoPE wavelength is 2π·Θ^(2i/d),
# and 3.141592653589793 typed by hand is a typo waiting to happen. No `e`: exp(1) says it, and a
# typed "2e" (an unfinished 2e3) must stay a "try again", not become 5.44. A formula's own
# variable of the same name (a parameter called pi) takes precedence, as a local does in Python.
CONSTANTS: dict[str, float] = {"pi": math.pi}

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_COMPARE: dict[type[ast.cmpop], Callable[[Number, Number], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}

_ALLOWED_TEXT = "numbers, names, pi, + - * / // % **, comparisons, and/or/not, parentheses and " + ", ".join(
    sorted(FUNCTIONS)
)


@dataclass(frozen=True)
class Formula:
    """A parsed, whitelisted formula; `names` are the variables it reads (functions and CONSTANTS are not)."""

    text: str
    tree: ast.Expression = field(repr=False, compare=False)
    names: frozenset[str] = frozenset()

    @cached_property
    def _run(self) -> Callable[[Mapping[str, Number]], Number]:
        """The tree turned into nested closures once: `drill validate` evaluates each parametric
        formula on thousands of draws, and walking the tree per draw was most of its time."""
        return _compile(self.tree.body)

    def evaluate(self, env: Mapping[str, Number]) -> Number:
        """Evaluate with the given variables; raises FormulaError on any failure."""
        try:
            return self._run(env)
        except FormulaError:
            raise
        except ZeroDivisionError:
            raise FormulaError("division by zero") from None
        except OverflowError:
            raise FormulaError("number too large") from None
        except (ValueError, TypeError) as exc:  # math domain errors, int(nan), ...
            raise FormulaError(str(exc)) from None


def parse_formula(text: str) -> Formula:
    """Parse and check `text`; raises FormulaError naming the first disallowed construct."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula must be a string, not {type(text).__name__}")
    if len(text) > MAX_FORMULA_CHARS:
        raise FormulaError(f"formula longer than {MAX_FORMULA_CHARS} characters")
    if not text.strip():
        raise FormulaError("empty formula")
    try:
        with warnings.catch_warnings():  # "1and 2" warns on stderr before failing; the error says it all
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"syntax error at column {exc.offset}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):  # too deeply nested for the parser itself
        raise FormulaError("formula too deeply nested") from None
    if _depth(tree) > MAX_DEPTH:
        raise FormulaError(f"formula nested more than {MAX_DEPTH} levels deep")
    names: set[str] = set()
    for node in ast.walk(tree):
        _check_node(node, names)
    return Formula(text, tree, frozenset(names))


def _depth(tree: ast.AST) -> int:
    """How deep the tree goes, without recursion (the tree may be deeper than the stack)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _check_node(node: ast.AST, names: set[str]) -> None:
    if isinstance(node, (ast.Expression, ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd)):
        return
    if isinstance(node, (ast.BoolOp, ast.UnaryOp)):
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed (use {_ALLOWED_TEXT})")
        return
    if isinstance(node, tuple(_BINARY)):
        return
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise FormulaError(f"comparison {type(op).__name__} is not allowed")
        return
    if isinstance(node, tuple(_COMPARE)):
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise FormulaError(f"only numbers are allowed as constants, not {node.value!r}")
        return
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise FormulaError(f"name {node.id!r} is not allowed (names may not start with '_')")
        if node.id not in FUNCTIONS and node.id not in CONSTANTS:
            names.add(node.id)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            shown = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise FormulaError(f"call of {shown!r} is not allowed; functions: {', '.join(sorted(FUNCTIONS))}")
        if node.keywords:
            raise FormulaError("keyword arguments are not allowed")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise FormulaError("*args are not allowed")
        return
    label = {
        ast.Attribute: "attribute access",
        ast.Subscript: "subscripts",
        ast.Lambda: "lambda",
        ast.IfExp: "if/else expressions",
    }.get(type(node), type(node).__name__)
    raise FormulaError(f"{label} is not allowed in a formula (use {_ALLOWED_TEXT})")


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse powers whose result would be astronomically large (e.g. 9**9**9)."""
    if abs(base) <= 1:
        return
    if abs(exponent) * math.log2(abs(base)) > MAX_RESULT_BITS:
        raise FormulaError(f"power {_short(base)}**{_short(exponent)} is too large")


def _short(value: Number) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"<a {len(text)}-digit number>"


def _eval(node: ast.AST, env: Mapping[str, Number]) -> Number:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise FormulaError(f"unknown name {node.id!r}")
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, env)
        right = _eval(node.right, env)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex):
            raise FormulaError("result is a complex number (negative base with fractional power)")
        if isinstance(result, int) and result.bit_length() > MAX_RESULT_BITS:
            raise FormulaError("intermediate result too large")
        return result
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not value
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Number = True
            for item in node.values:
                result = _eval(item, env)
                if not result:
                    return result
            return result
        result = False
        for item in node.values:
            result = _eval(item, env)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, env)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        args = [_eval(a, env) for a in node.args]
        return FUNCTIONS[node.func.id](*args)
    raise FormulaError(f"{type(node).__name__} is not allowed")  # unreachable after parse checks


def _compile(node: ast.AST) -> Callable[[Mapping[str, Number]], Number]:
    """A closure computing what `_eval(node, env)` computes, with the same checks and errors,
    in the same order (the tree was whitelisted by `parse_formula`)."""
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        name = node.id

        def lookup(env: Mapping[str, Number]) -> Number:
            try:
                return env[name]
            except KeyError:
                pass
            if name in CONSTANTS:
                return CONSTANTS[name]
            raise FormulaError(f"unknown name {name!r}")

        return lookup
    if isinstance(node, ast.BinOp):
        left_fn, right_fn = _compile(node.left), _compile(node.right)
        apply = _BINARY[type(node.op)]
        if isinstance(node.op, ast.Pow):
            def power(env: Mapping[str, Number]) -> Number:
                left = left_fn(env)
                right = right_fn(env)
                _check_power(left, right)
                result = left ** right
                if isinstance(result, complex):
                    raise FormulaError("result is a complex number (negative base with fractional power)")
                if isinstance(result, int) and result.bit_length() > MAX_RESULT_BITS:
                    raise FormulaError("intermediate result too large")
                return result

            return power

        def binary(env: Mapping[str, Number]) -> Number:
            # Only ** makes a complex number out of real ones; the other operators need the size check only.
            result = apply(left_fn(env), right_fn(env))
            if isinstance(result, int) and result.bit_length() > MAX_RESULT_BITS:
                raise FormulaError("intermediate result too large")
            return result

        return binary
    if isinstance(node, ast.UnaryOp):
        operand = _compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        return lambda env: +operand(env)
    if isinstance(node, ast.BoolOp):
        items = [_compile(item) for item in node.values]
        if isinstance(node.op, ast.And):
            def all_of(env: Mapping[str, Number]) -> Number:
                result: Number = True
                for item in items:
                    result = item(env)
                    if not result:
                        return result
                return result

            return all_of

        def any_of(env: Mapping[str, Number]) -> Number:
            result: Number = False
            for item in items:
                result = item(env)
                if result:
                    return result
            return result

        return any_of
    if isinstance(node, ast.Compare):
        first = _compile(node.left)
        steps = [(_COMPARE[type(op)], _compile(c)) for op, c in zip(node.ops, node.comparators, strict=True)]

        def compare(env: Mapping[str, Number]) -> Number:
            left = first(env)
            for test, comparator in steps:
                right = comparator(env)
                if not test(left, right):
                    return False
                left = right
            return True

        return compare
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        function = FUNCTIONS[node.func.id]
        arguments = [_compile(a) for a in node.args]
        return lambda env: function(*[a(env) for a in arguments])
    kind = type(node).__name__

    def refuse(env: Mapping[str, Number]) -> Number:
        raise FormulaError(f"{kind} is not allowed")  # unreachable after parse checks

    return refuse


def evaluate(text: str, env: Mapping[str, Number] | None = None) -> Number:
    """Parse and evaluate in one go (convenience for tests and one-off checks)."""
    return parse_formula(text).evaluate(env or {})
