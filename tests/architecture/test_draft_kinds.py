"""Issue 49 (3): a kind of draft is one module in `adaspec.drafts` (and its config): nothing outside that package asks
which kind a draft is, by class (`isinstance`) or by name (`model.draft_kind`, `Draft.kind`); what differs between
kinds is declared by the kind (`adaspec.drafts.trained.TrainedDraft`). `config/rules.py` is left out: it checks which
config keys go with `model.draft_kind` (`DraftKind`) before any draft exists, in the config's own terms, as `conf/`
does. And no module of the package keeps state of its own (a memo of the target's features was one)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "adaspec"
DRAFTS = PACKAGE / "drafts"
CONFIG_RULES = PACKAGE / "config" / "rules.py"


def kinds() -> dict[str, str]:
    """{class name: kind name} of every concrete kind of draft: a class in `adaspec.drafts` that says `kind = "..."`."""
    found = {}
    for path in DRAFTS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if (isinstance(statement, ast.Assign) and any(
                            isinstance(t, ast.Name) and t.id == "kind" for t in statement.targets)
                            and isinstance(statement.value, ast.Constant)):
                        found[node.name] = statement.value.value
    return found


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _mentions_draft_kind(node: ast.AST) -> bool:
    """`draft_kind`, `cfg.model.draft_kind`, `str(...draft_kind)`, `cfg.model.get("draft_kind", ...)`."""
    return "draft_kind" in _names(node) or any(
        isinstance(n, ast.Constant) and n.value == "draft_kind" for n in ast.walk(node))


def _is_kind_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "kind"


def kind_questions(source: str, classes: dict[str, str]) -> list[str]:
    """The lines of `source` that ask a draft's kind: `isinstance`/`issubclass` with a kind's class, a comparison of
    `draft_kind`, of a `.kind` with a kind's name, or of anything with a kind's name other than "model"."""
    names = set(classes.values())
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2
                and _names(node.args[1]) & set(classes)):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            constants = [c for o in operands for c in (o.elts if isinstance(o, ast.Tuple | ast.List | ast.Set) else [o])]
            named = [c.value for c in constants if isinstance(c, ast.Constant) and c.value in names]
            if (any(_mentions_draft_kind(o) for o in operands)
                    or (named and any(_is_kind_attribute(o) for o in operands))
                    or any(name != "model" for name in named)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_kinds_are_found():
    found = kinds()
    assert {"ModelDraft": "model", "Eagle3Draft": "eagle3", "PromptLookupDraft": "prompt_lookup"}.items() <= found.items()


def test_no_module_outside_the_drafts_asks_a_drafts_kind():
    classes = kinds()
    asked = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if DRAFTS in path.parents or path == CONFIG_RULES:
            continue
        questions = kind_questions(path.read_text(), classes)
        if questions:
            asked[str(path.relative_to(PACKAGE))] = questions
    assert asked == {}


def test_the_check_finds_each_way_of_asking():
    classes = {"Eagle3Draft": "eagle3", "PromptLookupDraft": "prompt_lookup", "ModelDraft": "model"}
    asking = [
        "isinstance(draft, Eagle3Draft)",
        "isinstance(draft, ModelDraft | Eagle3Draft)",
        "isinstance(draft, (drafts.PromptLookupDraft, int))",
        'cfg.model.draft_kind == "eagle3"',
        'str(cfg.model.draft_kind) != "eagle3"',
        'cfg.model.get("draft_kind", "model") == "model"',
        "model.draft_kind == DraftKind.eagle3",
        'draft.kind == "prompt_lookup"',
        'draft.kind != "model"',
        'name == "eagle3"',
        'kind in ("eagle3", "hybrid")',
    ]
    for line in asking:
        assert [q.split(":")[0] for q in kind_questions(line, classes)] == ["1"], line
    not_asking = [
        "isinstance(model, Draft)",
        'step.kind == "cache"',
        'source == "model"',
        'print(f"a {draft.kind} draft")',
        "trained_kind(cfg.model.draft_kind).folder_suffix",
        "draft.takes_lookup_branch or not shape.lookup",
    ]
    for line in not_asking:
        assert kind_questions(line, classes) == [], line


def module_state(source: str) -> list[str]:
    """Module-level names bound to an empty mutable container: state a module keeps between calls."""
    empty = ("dict", "list", "set", "defaultdict", "OrderedDict")
    found = []
    for node in ast.parse(source).body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if (isinstance(value, ast.Dict) and not value.keys) or (isinstance(value, ast.List | ast.Set) and not value.elts) or (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in empty
                and not value.args):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_draft_module_keeps_state_of_its_own():
    kept = {path.name: module_state(path.read_text()) for path in sorted(DRAFTS.glob("*.py"))}
    assert {name: lines for name, lines in kept.items() if lines} == {}


def test_the_check_finds_module_state():
    assert module_state("_last: dict[int, tuple] = {}\nCACHE = dict()\nWIDTHS = (1, 2)\nKINDS = {'a': 1}\n") == [
        "1: _last: dict[int, tuple] = {}", "2: CACHE = dict()"]
