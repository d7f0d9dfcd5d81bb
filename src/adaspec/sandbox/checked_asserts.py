"""Judge a program's asserts outside the process that runs it.

Test code such as `assert f([3, 1]) == [1, 3]` is split in two. The parts only the program can compute
(here `f([3, 1])`: calls of its functions, its variables, anything naming a name the judge does not
know) become *probes*, expression sources that the sandbox evaluates after running the program and
returns as plain data (`decode_plain`). Everything else, the comparison and the expected value
included, is evaluated here, in the judge's process, over those plain values. So a result whose `__eq__`
always returns True cannot pass: only its data arrives, and `==` is the judge's own. Nor can an early
exit, or a forged report, pass: the judge needs a value for every probe, and the program never sees
the expected values (they are not sent to the sandbox), so it can only report them by computing them.

What the judge evaluates itself: comparisons, boolean and arithmetic operators, literals, and calls of
`JUDGE_NAMES` (e.g. `set`, `sorted`, `len`, `math.isclose`), recursing into their arguments. Whatever
else names a name outside `JUDGE_NAMES` is a probe as a whole: `f(x)[0]`, `obj.attr`, `g(x).count(1)`.
A comprehension or lambda that calls the program is a probe as a whole too, so a comparison inside
one runs in the sandbox, where the program controls it; MBPP's asserts have none.

Statements other than top-level asserts (imports, the task's setup code) run in the sandbox before the
probes, and the names they define are the program's (they are probes, not expected values).
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import sys
import types
from dataclasses import dataclass

PROBES = "__probes__"
_SAFE_BUILTINS = (
    "abs", "all", "any", "bool", "chr", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "int", "isinstance", "len", "list", "map", "max", "min", "ord", "pow", "range",
    "repr", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "type", "zip",
)  # fmt: skip
# `sys.getsizeof` appears in MBPP's expected values (task 596); the judge and the sandbox run one Python.
_JUDGE_SYS = types.SimpleNamespace(getsizeof=sys.getsizeof, maxsize=sys.maxsize)
JUDGE_NAMES: dict[str, object] = {name: getattr(builtins, name) for name in _SAFE_BUILTINS} | {
    "math": math,
    "sys": _JUDGE_SYS,
}
_COMPOSITE = (
    ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict,
    ast.JoinedStr, ast.FormattedValue, ast.Starred, ast.keyword,
)  # fmt: skip
PLAIN_TAGS = ("tuple", "set", "frozenset", "dict", "complex", "bytes")


class NotPlainData(ValueError):
    """The sandbox's report is not the plain-data encoding `child.encode_plain` writes."""


@dataclass(frozen=True)
class Check:
    source: str  # the assert, for messages
    expression: ast.Expression  # the assert's test, its probes replaced by __probes__[i]
    probe_indices: range  # which probes it uses


@dataclass(frozen=True)
class TestPlan:
    setup: str  # statements the sandbox runs after the program, before the probes
    probes: list[str]  # expressions the sandbox evaluates, in order, and reports as plain data
    checks: list[Check]  # evaluated by the judge over the probes' values


def _bound_names(node: ast.AST) -> set[str]:
    """Names a comprehension, lambda or `:=` inside `node` binds (not names of the program)."""
    bound: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Lambda):
            bound.update(a.arg for a in ast.walk(inner.args) if isinstance(a, ast.arg))
        elif isinstance(inner, ast.comprehension | ast.NamedExpr):
            bound.update(n.id for n in ast.walk(inner.target) if isinstance(n, ast.Name))
    return bound


class _ProbeCutter(ast.NodeTransformer):
    """Replaces each subexpression the judge cannot evaluate by `__probes__[i]`, recording its source."""

    def __init__(self, trusted: frozenset[str], probes: list[str]):
        self.trusted = trusted
        self.probes = probes

    def is_trusted(self, node: ast.AST) -> bool:
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        return names - _bound_names(node) <= self.trusted

    def is_judge_call(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and self.is_trusted(node.func)

    def visit(self, node: ast.AST) -> ast.AST:
        if self.is_trusted(node):
            return node
        if isinstance(node, _COMPOSITE) or self.is_judge_call(node):
            return self.generic_visit(node)
        self.probes.append(ast.unparse(node))
        index = ast.Constant(len(self.probes) - 1)
        return ast.copy_location(ast.Subscript(ast.Name(PROBES, ast.Load()), index, ast.Load()), node)


def _assigned_names(statements: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                # `import math` binds the module the judge has too; other imports bind names of their own
                names.update(
                    (alias.asname or alias.name).split(".")[0]
                    for alias in node.names
                    if alias.asname or isinstance(node, ast.ImportFrom)
                )
    return names


def top_level_names(code: str) -> frozenset[str]:
    """Names a module defines at its top level (functions, classes, variables); none if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return frozenset()
    return frozenset(_assigned_names([s for s in tree.body if not isinstance(s, ast.Assert)]))


def plan_tests(test_code: str, program_names: frozenset[str] = frozenset()) -> TestPlan:
    """Split `test_code` into setup, probes and checks (raises SyntaxError for code that does not parse).

    `program_names`: names the program is expected to define even where they shadow a judge name (MBPP
    task 126 asks for a function called `sum`), taken from the task, never from the program under test:
    a program that defined `set` itself must not make `set(f(x)) == set(y)` its own to evaluate.
    """
    tree = ast.parse(test_code, "tests.py")
    asserts = [s for s in tree.body if isinstance(s, ast.Assert)]
    setup = [s for s in tree.body if not isinstance(s, ast.Assert)]
    trusted = frozenset(JUDGE_NAMES) - program_names - _assigned_names(setup)
    probes: list[str] = []
    checks = []
    for statement in asserts:
        source, first = ast.unparse(statement), len(probes)
        cut = _ProbeCutter(trusted, probes).visit(statement.test)
        expression = ast.fix_missing_locations(ast.Expression(cut))
        checks.append(Check(source, expression, range(first, len(probes))))
    return TestPlan(ast.unparse(ast.Module(setup, type_ignores=[])), probes, checks)


def decode_report(raw: bytes, n_probes: int) -> list:
    """The probes' values from the sandbox's report: one JSON list of `n_probes` plain values."""
    try:
        report = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # not UTF-8, not one JSON document, or an integer too long to read
        raise NotPlainData(f"unreadable report: {e}") from None
    if type(report) is not list or len(report) != n_probes:
        raise NotPlainData(f"the report holds no list of {n_probes} values")
    return [decode_plain(value) for value in report]


def decode_plain(value):
    """Turn the sandbox's JSON back into Python values, accepting only the plain-data encoding.

    JSON null/true/false/numbers/strings/arrays are None/bool/int/float/str/list; every other value is a
    one-key object naming its type: {"tuple": [...]}, {"set": [...]}, {"frozenset": [...]},
    {"dict": [[key, value], ...]}, {"complex": [real, imag]}, {"bytes": "hex"}.
    """
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [decode_plain(item) for item in value]
    if type(value) is not dict or len(value) != 1:
        raise NotPlainData(f"not plain data: {value!r:.80}")
    tag, inner = next(iter(value.items()))
    try:
        if tag in ("tuple", "set", "frozenset", "dict") and type(inner) is list:
            items = [decode_plain(item) for item in inner]
            if tag == "dict":
                return dict(_pair(entry) for entry in items)
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "complex" and type(inner) is list and len(inner) == 2:
            return complex(*(float(part) for part in inner))
        if tag == "bytes" and type(inner) is str:
            return bytes.fromhex(inner)
    except TypeError as e:  # an unhashable set member or dict key
        raise NotPlainData(f"not plain data: {e}") from None
    raise NotPlainData(f"not plain data: {value!r:.80}")


def _pair(entry) -> tuple:
    if type(entry) is not list or len(entry) != 2:
        raise NotPlainData(f"not a [key, value] pair: {entry!r:.80}")
    return entry[0], entry[1]


def first_failed_check(plan: TestPlan, values: list) -> str | None:
    """None when every check holds over the probes' `values`; else what failed, in one line."""
    namespace = {"__builtins__": JUDGE_NAMES, PROBES: values}
    for check in plan.checks:
        try:
            holds = eval(compile(check.expression, "tests.py", "eval"), dict(namespace))
        except Exception as e:  # the values do not even compare (a TypeError, say): a failed assert
            return f"{check.source}: {type(e).__name__}: {e}"
        if not holds:
            shown = ", ".join(f"{plan.probes[i]} -> {values[i]!r:.100}" for i in check.probe_indices)
            return f"AssertionError: {check.source} (the program's values: {shown})"
    return None
