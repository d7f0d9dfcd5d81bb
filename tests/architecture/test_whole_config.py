"""Functions take what they use (issue 49): the whole Hydra config (`cfg`, the project's one name for it) stays in
the entry points and the pipeline's composition; everything below receives sub-configs (`model`, `task`, ...) or
objects built from it (`paths.Layout`, `StageRun`, `EvalSettings`, `AnswerSpec`, `Provenance`). This counts the functions with a `cfg`
parameter, so that the number only goes down. (The identity rules in `adaspec.config` take the resolved config as
a plain `dict`: declarations of the schema, not counted.)"""

from __future__ import annotations

import ast
from pathlib import Path

import adaspec

SOURCE = Path(adaspec.__file__).parent
MOST = 20  # issue 49: the entry points, the pipeline's composition and the builders of the objects above


def _functions(root: Path):
    for file in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{file.relative_to(root)}:{node.name}", node


def _takes_the_config(node) -> bool:
    params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    return any(p.arg == "cfg" and (p.annotation is None or ast.unparse(p.annotation) != "dict") for p in params)


def whole_config_takers(root: Path = SOURCE) -> list[str]:
    return [name for name, node in _functions(root) if _takes_the_config(node)]


def config_rebinders(root: Path = SOURCE) -> list[str]:
    """Functions that assign to their `cfg` parameter: the config below that line is not the one passed in."""
    return [name for name, node in _functions(root) if _takes_the_config(node) and any(
        isinstance(target, ast.Name) and target.id == "cfg"
        for assign in ast.walk(node) if isinstance(assign, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for target in ([assign.target] if not isinstance(assign, ast.Assign) else assign.targets)
        for target in ([target] if not isinstance(target, ast.Tuple) else target.elts))]


def test_at_most_twenty_functions_take_the_whole_config():
    takers = whole_config_takers()
    assert len(takers) <= MOST, (
        f"{len(takers)} functions take the whole config (at most {MOST}): pass the sub-config or the object built "
        f"from it instead\n" + "\n".join(takers))


def test_no_function_rebinds_the_config_it_was_given():
    assert config_rebinders() == []


def test_the_checks_see_a_function_that_takes_or_rebinds_the_whole_config(tmp_path):
    (tmp_path / "module.py").write_text(
        "def takes(cfg): ...\ndef annotated(cfg: DictConfig): ...\ndef sub(model, task): ...\n"
        "def rule(cfg: dict): ...\nclass A:\n    def method(self, *, cfg=None): ...\n"
        "def rebinds(cfg):\n    cfg, splits = resolve(cfg)\n"
        "def composes(overrides):\n    cfg = compose(*overrides)\n")
    assert sorted(whole_config_takers(tmp_path)) == ["module.py:annotated", "module.py:method", "module.py:rebinds",
                                                     "module.py:takes"]
    assert config_rebinders(tmp_path) == ["module.py:rebinds"]
