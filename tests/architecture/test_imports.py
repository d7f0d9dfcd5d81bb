"""The module graph: no import cycles between project modules (imports inside functions included), and an
import inside a function only where it keeps start-up fast or an optional dependency optional, which a
comment at that import says."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def function_imports(tree: ast.Module) -> list[tuple[ast.AST, list[ast.stmt]]]:
    """(function, its import statements) for every function that imports."""
    found = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            imports = [
                n
                for n in ast.walk(function)
                if isinstance(n, ast.Import | ast.ImportFrom) and enclosing_function(function, n)
            ]
            if imports:
                found.append((function, imports))
    return found


def enclosing_function(function: ast.AST, node: ast.AST) -> bool:
    """True when `node` belongs to `function` itself, not to a function nested in it."""
    for child in ast.iter_child_nodes(function):
        if child is node:
            return True
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and enclosing_function(
            child, node
        ):
            return True
    return False


def import_graph() -> tuple[dict[str, set[str]], dict[str, ast.Module]]:
    mods = modules()
    trees = {name: ast.parse(path.read_text()) for name, path in mods.items()}
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                is_package = mods[name].name == "__init__.py"
                graph[name] |= {t for t in imported_names(node, name, is_package) if t in mods and t != name}
    return graph, trees


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_between_project_modules():
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_import_inside_a_function_says_why():
    mods = modules()
    unexplained = []
    for path in mods.values():
        source = path.read_text()
        lines = source.splitlines()
        for function, imports in function_imports(ast.parse(source)):
            first = min(n.lineno for n in imports)
            last = max(n.end_lineno or n.lineno for n in imports)
            # the comment sits on the line above the function's first import, or on one of its imports
            block = lines[first - 2 : last]
            if not any("#" in line for line in block):
                unexplained.append(f"{path.relative_to(SRC)}:{first} in {function.name}")
    assert unexplained == []
