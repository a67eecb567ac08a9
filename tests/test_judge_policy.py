"""Layer 1 alone: the static policy refuses the ways out of the tensor API and keeps ordinary code (issue 13).

These call `policy.check_source` directly (no child, no torch for most): the
tamper suite (tests/test_judge_tamper.py) grades whole files through every
layer. The last test walks the modules a solution may import and fails on
any public attribute path that reaches a dangerous module or builtin under a
name the policy does not refuse (such as enum's `bltns`, the builtins
module under another name), so a torch or numpy upgrade that adds one is
caught here rather than by an attacker.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import types
import warnings

import pytest

from drill.judge import policy

REFUSED = {
    # a private the file "defines" by importing it, or by assigning a name like it
    "from_import_private": "from collections import _sys\n_sys.modules\n",
    "defined_private_on_module": "import collections\n_sys = 0\ncollections._sys.modules\n",
    "defined_private_on_alias": "import random\nr = random\n_os = 0\nr._os.system('x')\n",
    "defined_private_literal_getattr": "import typing\n_caller = 0\ngetattr(typing, '_caller')\n",
    "defined_private_on_submodule": "import torch\n_getframe = 0\ntorch.nn.functional._getframe\n",
    # an eval behind a private method of a public class, reached through a call or a function argument
    "forwardref_evaluate_on_call": (
        "import typing\nclass A:\n    _evaluate = None\nfr = typing.ForwardRef('int')\nfr._evaluate({}, {}, "
        "frozenset())\n"
    ),
    "forwardref_evaluate_on_argument": (
        "import typing\n_evaluate = None\ndef run(ref):\n    return ref._evaluate({}, {}, frozenset())\n"
        "run(typing.ForwardRef(\"__import__('os')\"))\n"
    ),
    "private_of_a_call_result": "import torch\n_base = 0\ntorch.zeros(2)._base\n",
    # stdlib modules under the names allowed modules import them as
    "enum_bltns": "import enum\nenum.bltns.exec('import os')\n",
    "typing_sys": "import typing\ntyping.sys.modules\n",
    # object graphs, frames, reflection
    "subclasses": "().__class__.__base__.__subclasses__()\n",
    "type_subclasses": "type.__subclasses__(object)\n",
    "traceback_frame": "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame\n",
    "generator_frame": "def g():\n    yield 1\ng().gi_frame.f_back\n",
    "reduce_getattr": "import functools\nfunctools.reduce(getattr, ['f_back'], None)\n",
    "attrgetter": "from operator import attrgetter\n",
    "computed_getattr": "import torch\nname = 'ops'\ngetattr(torch, name)\n",
    "builtins_name": "__builtins__['eval']\n",
    "func_globals": "def f():\n    pass\nf.__globals__\n",
    "self_of_builtin": "print.__self__.exec('x')\n",
    # torch's ways out
    "torch_ops": "import torch\ntorch.ops.aten._scaled_dot_product_flash_attention_for_cpu\n",
    "torch_library": "import torch\ntorch.library.Library('aten', 'IMPL')\n",
    "torch_save": "import torch\ntorch.save(torch.ones(1), '/tmp/x')\n",
    "torch_from_file": "import torch\ntorch.from_file('/tmp/x', shared=True, size=1)\n",
    "torch_ao": "import torch\ntorch.ao.nn.quantizable.MultiheadAttention(8, 2)\n",
    "numpy_ctypes": "import numpy as np\nnp.zeros(1).ctypes.data\n",
    "import_os": "import os\n",
    # issue 30: writing torch for the grader's code too, and attributes reached by strings
    "module_attr_assign": "import torch\ntorch.tensor = lambda *a, **k: None\n",
    "functional_attr_assign": "import torch.nn.functional as F\nF.softmax = None\n",
    "submodule_attr_assign": "import torch\ntorch.nn.functional.softmax = None\n",
    "class_attr_assign": "from torch import Tensor\nTensor.softmax = None\n",
    "alias_attr_assign": "import torch\nt = torch\nT = t.Tensor\nT.matmul = None\n",
    "module_attr_augassign": "import torch\ntorch.pi += 1\n",
    "module_attr_delete": "import torch\ndel torch.allclose\n",
    "setattr_module_literal": "import torch\nsetattr(torch, 'allclose', None)\n",
    "setattr_computed_name": "class A:\n    pass\nsetattr(A(), '__glo' + 'bals__', 1)\n",
    "update_wrapper_globals": (
        "import functools\ndef f():\n    pass\nfunctools.update_wrapper(f, print, updated=('__globals__',))\n"
    ),
    "from_functools_update_wrapper": "from functools import update_wrapper\n",
    "wraps_assigned": "import functools\n@functools.wraps(print, assigned=('__builtins__',))\ndef f():\n    pass\n",
    "match_capture_name": (
        "match '__main__':\n    case __name__:\n        pass\nif __name__ == '__main__':\n    import os\n"
    ),
    "match_star_builtins": "match [1]:\n    case [*__builtins__]:\n        pass\n",
    "walrus_name": "if (__name__ := '__main__'):\n    pass\n",
}

ALLOWED = {
    "own_private": "class A:\n    def __init__(self):\n        self._cache = {}\n    def f(self):\n        return "
                   "self._cache\n",
    "register_buffer_private": (
        "import torch\nfrom torch import nn\nclass R(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.register_buffer('_inv', torch.ones(2))\n    def forward(self, x):\n        return x * self._inv\n"
    ),
    "dataclass_namedtuple": (
        "from collections import namedtuple\nfrom dataclasses import dataclass, field\nP = namedtuple('P', 'a b')\n"
        "@dataclass\nclass C:\n    n: int = 2\n    xs: list = field(default_factory=list)\n"
    ),
    "class_name": "class A:\n    def __repr__(self):\n        return type(self).__name__ + self.__class__.__name__\n",
    "literal_getattr": "import torch\ngetattr(torch, 'float16')\n",
    "main_block": "import math\nif __name__ == '__main__':\n    import time\n    print(time.perf_counter())\n",
    # the file's own objects, whatever made them, are its own to change
    "own_module_attrs": (
        "import torch\nfrom torch import nn\nlin = nn.Linear(2, 2)\nlin.weight = nn.Parameter(torch.ones(2, 2))\n"
        "t = torch.zeros(2)\nt.requires_grad = True\n"
    ),
    "setattr_self_loop": (
        "from torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        for name in ('q_proj', 'k_proj'):\n            setattr(self, name, nn.Linear(2, 2))\n"
    ),
    "plain_wraps": "import functools\ndef deco(f):\n    @functools.wraps(f)\n    def g(*a):\n        return f(*a)\n"
                   "    return g\n",
    "match_ordinary_capture": "match (1, 2):\n    case (a, *rest):\n        print(a, rest)\n",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_policy_refuses(name: str) -> None:
    found = policy.check_source(REFUSED[name])
    assert found, f"{name} got past the policy"
    assert all(v.line >= 1 for v in found)


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_policy_allows_ordinary_code(name: str) -> None:
    assert policy.check_source(ALLOWED[name]) == []


def test_violation_detail_quotes_file_line_and_what_is_allowed() -> None:
    detail = policy.first_violation(REFUSED["from_import_private"], "attention.py")
    assert detail.startswith("attention.py:1: `from collections import _sys`")
    assert "allowed: imports of torch" in detail


_DANGEROUS_MODULES = frozenset({
    "builtins", "sys", "os", "posix", "subprocess", "_posixsubprocess", "importlib", "ctypes", "_ctypes", "gc",
    "weakref", "_weakref", "io", "_io", "threading", "_thread", "signal", "_signal", "socket", "_socket", "inspect",
    "types", "traceback", "pickle", "_pickle", "marshal", "resource", "mmap", "shutil", "pathlib", "tempfile",
    "multiprocessing", "runpy", "code", "codeop", "pty", "fcntl", "faulthandler", "atexit", "site", "sysconfig",
    "zipimport", "linecache", "ast", "dis", "pdb", "bdb", "_frozen_importlib", "_frozen_importlib_external", "_imp",
    "copyreg", "pkgutil", "glob", "asyncio", "concurrent", "logging", "sqlite3", "shelve", "dbm", "webbrowser",
    "http", "urllib", "ssl", "tracemalloc", "_testcapi", "_xxsubinterpreters",
})
_DANGEROUS_BUILTINS = ("exec", "eval", "compile", "open", "__import__", "globals", "vars", "locals", "getattr",
                       "setattr", "delattr", "breakpoint", "input")


def _dangerous(value: object) -> str | None:
    if isinstance(value, types.ModuleType):
        name = value.__name__
        return f"module {name}" if name.split(".")[0] in _DANGEROUS_MODULES else None
    for name in _DANGEROUS_BUILTINS:
        if value is getattr(builtins, name):
            return f"builtins.{name}"
    return "sys._getframe" if value is sys._getframe else None


def test_no_allowed_module_exposes_a_way_out_under_an_unrefused_name() -> None:
    """Public attribute paths (3 deep) from every allowed import to a dangerous module or builtin: each must
    pass through a name the policy refuses. Privates need no walk: on a module they are always refused."""
    checker = policy._Checker(set())
    leaks: list[str] = []
    seen: set[int] = set()

    def walk(obj: object, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 3:
            return
        seen.add(id(obj))
        try:
            names = list(vars(obj)) if isinstance(obj, (types.ModuleType, type)) else []
        except TypeError:
            return
        for name in names:
            if name.startswith("_") or checker._attr_problem(name) is not None:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    value = getattr(obj, name)
            except Exception:  # noqa: BLE001 - lazy attributes that fail to load are no way out
                continue
            what = _dangerous(value)
            if what is not None:
                leaks.append(f"{path}.{name} -> {what}")
            elif isinstance(value, types.ModuleType) or (isinstance(value, type) and depth < 2):
                walk(value, f"{path}.{name}", depth + 1)

    walked = 0
    for module in policy.ALLOWED_IMPORTS:
        try:
            walk(importlib.import_module(module), module, 0)
            walked += 1
        except ImportError:
            continue
    assert walked >= 20
    assert leaks == [], "add these attribute names to policy._STDLIB or BLOCKED_ATTRS:\n" + "\n".join(leaks[:40])


# -- issue 31 §0: a refused builtin's name that the file binds itself is its own -----------------------------
# Every name the policy refuses as a builtin, and builtins people commonly reuse as names (never refused).
_OWN_NAMES = sorted(policy.SHADOWABLE | {"format", "type", "id", "iter", "filter", "map", "min", "max", "sum",
                                         "hash", "len"})
# Each binding form, with NAME for the name; every load of NAME is in the scope that binds it.
_BINDINGS = {
    "parameter": "def f(x, NAME):\n    return NAME(x)\n",
    "posonly_kwonly": "def f(NAME, /, *, other=1):\n    return NAME\ndef g(*, NAME):\n    return NAME\n",
    "star_args": "def f(*NAME):\n    return NAME\ndef g(**NAME):\n    return NAME\n",
    "method": "class M:\n    def forward(self, NAME):\n        NAME = NAME.contiguous()\n        return NAME\n",
    "lambda": "f = lambda NAME: NAME + 1\n",
    "local": "def f(x):\n    NAME = x.contiguous()\n    return NAME\n",
    "augmented": "def f(x):\n    NAME = 0\n    NAME += x\n    return NAME\n",
    "annotated": "def f(x):\n    NAME: int = x\n    return NAME\n",
    "unpacked": "def f(xs):\n    a, (NAME, *b) = xs\n    return NAME\n",
    "walrus": "def f(x):\n    if (NAME := x):\n        return NAME\n",
    "loop_var": "def f(xs):\n    for NAME in xs:\n        print(NAME)\n",
    "with_as": "def f(c):\n    with c as NAME:\n        return NAME\n",
    "except_as": "def f():\n    try:\n        pass\n    except ValueError as NAME:\n        return NAME\n",
    "import_as": "def f():\n    import math as NAME\n    return NAME.pi\n",
    "comprehension": "def f(xs):\n    return [NAME for NAME in xs], {NAME: 1 for NAME in xs}\n",
    "def_name": "def f():\n    def NAME():\n        return 1\n    return NAME()\n",
    "class_name": "def f():\n    class NAME:\n        pass\n    return NAME\n",
    "match_capture": "def f(x):\n    match x:\n        case [NAME, *rest]:\n            return NAME\n",
    "nonlocal": "def g():\n    NAME = 1\n    def f():\n        nonlocal NAME\n        return NAME\n    return f\n",
    "closure": "def g(NAME):\n    def f():\n        return NAME\n    return f\n",
    "class_body": "class A:\n    NAME = 1\n    twice = NAME * 2\n",
    "module_level": "import torch\nNAME = torch.ones(2)\ny = NAME + 1\n",
    "module_def_before_use": (
        "import math\ndef NAME(x):\n    return x\nclass A:\n    def f(self, x):\n        return NAME(x)\n"
    ),
}


@pytest.mark.parametrize("form", sorted(_BINDINGS))
@pytest.mark.parametrize("name", _OWN_NAMES)
def test_a_name_the_file_binds_is_its_own(name: str, form: str) -> None:
    assert policy.check_source(_BINDINGS[form].replace("NAME", name)) == []


# Loads of the builtin itself, though the file binds the name somewhere: (source, line refused).
_STILL_BUILTIN = {
    "unbound": ("def f(x):\n    return input()\n", 2),
    "bound_in_another_function": ("def f(input):\n    return input\ndef g():\n    return input()\n", 4),
    "default_value_is_outside": ("def f(open=open):\n    return open\n", 1),
    "lambda_default_is_outside": ("f = lambda open=open: open\n", 1),
    "decorator_is_outside": ("def g(eval):\n    return eval\n@eval\ndef eval(x):\n    return x\n", 3),
    "class_body_not_in_methods": ("class A:\n    open = 1\n    def f(self):\n        return open\n", 4),
    "class_body_before_binding": ("class A:\n    x = open\n    open = 1\n", 2),
    "module_before_binding": ("x = input\ninput = 1\n", 1),
    "module_same_statement": ("input = input.contiguous()\n", 1),
    "module_on_one_branch": ("import torch\nif torch.cuda.is_available():\n    vars = 1\nvars()\n", 4),
    "module_deleted": ("vars = 1\ndel vars\nvars()\n", 3),
    "module_deleted_by_a_function": ("compile = 1\ndef f():\n    global compile\n    del compile\ny = compile\n", 5),
    "module_bound_after_a_call": ("import torch\nx = torch.ones(1)\nopen = 3\ndef f():\n    return open('x')\n", 5),
    "module_except_as_unbinds": ("exec = 1\ntry:\n    pass\nexcept Exception as exec:\n    pass\nexec('1')\n", 6),
    "comprehension_first_iterable": ("y = [open for open in open]\n", 1),
    "walrus_after_its_load": ("y = [(input, input := 5) for _ in range(1)]\n", 1),
    "global_declared": ("def f():\n    global input\n    input = 1\n    return input\n", 4),
    "getattr_computed": ("import torch\ndef f(getattr):\n    return getattr\ngetattr(torch, 'o' + 'ps')\n", 4),
    "imported_under_its_name": ("from math import open\n", 1),
    "dunder_parameter": ("def f(__import__):\n    return __import__\n", 2),
}


@pytest.mark.parametrize("case", sorted(_STILL_BUILTIN))
def test_the_builtin_itself_is_still_refused_with_its_line(case: str) -> None:
    source, line = _STILL_BUILTIN[case]
    found = policy.check_source(source)
    assert found and found[0].line == line, (case, found)
    assert "not allowed" in found[0].what
