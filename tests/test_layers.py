"""The layers import one way, lazy and string imports included: cbscore < workers < app < cbs.

``../shared/tools/import_cycles.py`` follows ``import`` statements, at the top of a module or inside
a function. A module can also be reached by name: ``importlib.import_module("workers.cli")``,
``__import__("app.cli")``, or a dotted name kept in a constant and imported later (the old
``cbs`` entry point in ``cbscore.cli`` did that). This test counts all of them as arrows and fails
on any that runs up a layer. :mod:`cbs` (the command line) sits above the three layers.

The app has one door into the workers, their public API :mod:`workers.query.api`: no app module
reaches another workers module, by any of those ways.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Lowest layer first; a module may import its own layer and those below.
LAYERS = ("cbscore", "workers", "app", "cbs")
#: Calls whose first argument names a module to import.
_IMPORTING_CALLS = {"import_module", "__import__", "find_spec", "run_module"}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def project_modules() -> set[str]:
    """Dotted names of every module and package of the layers."""
    out = set()
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of ``tree`` (they name modules for readers, not for imports)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _named_module(text: str, known: set[str]) -> str | None:
    """The project module a dotted string names (``"workers.cli"``, ``"workers.cli.register"``)."""
    if not _DOTTED.fullmatch(text):
        return None
    if text in known:
        return text
    head = text.rpartition(".")[0]
    return head if head in known and "." in head else None


def arrows(source: str, module: str, known: set[str]) -> list[tuple[int, str, str]]:
    """``(line, how, target module)`` for every project module that ``source`` (the text of
    ``module``) reaches: import statements anywhere, importing calls with a literal name, and
    dotted names of project modules kept as strings."""
    tree = ast.parse(source)
    out = []
    docs = _docstrings(tree)  # constants that are not module names kept for an import
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, "import", a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:  # a relative import stays in its package
            out.append((node.lineno, "import", node.module or ""))
        elif isinstance(node, ast.Call):
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if called in _IMPORTING_CALLS and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                out.append((node.lineno, f"{called}()", node.args[0].value))
                docs.add(id(node.args[0]))  # counted once, as the call
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            named = _named_module(node.value, known)
            if named is not None:
                out.append((node.lineno, "string", named))
    return [(line, how, target) for line, how, target in out if target.split(".")[0] in LAYERS]


def upward(source: str, module: str, known: set[str]) -> list[str]:
    """The arrows of ``module`` that run up a layer, in words."""
    own = LAYERS.index(module.split(".")[0])
    return [f"{module}:{line} {how} {target}" for line, how, target in arrows(source, module, known)
            if LAYERS.index(target.split(".")[0]) > own]


def test_no_module_reaches_up_a_layer_by_import_or_by_name():
    known = project_modules()
    bad = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            bad += upward(path.read_text(encoding="utf-8"), module, known)
    assert not bad, "imports that run up a layer:\n" + "\n".join(bad)


def test_the_check_sees_lazy_and_string_imports_up_a_layer():
    known = {"cbscore", "cbscore.cli", "workers", "workers.cli", "app", "app.cli", "cbs"}
    source = '''"""Named here for readers: workers.cli."""
import importlib

from cbscore import cli

_COMMANDS = ("cbscore.cli", "workers.cli")


def build():
    from app import cli as app_cli
    importlib.import_module("workers.cli")
    __import__("app.cli")
    for name in _COMMANDS:
        importlib.import_module(name)
'''
    found = upward(source, "cbscore.cli", known)
    assert sorted(found) == sorted([
        "cbscore.cli:6 string workers.cli",
        "cbscore.cli:10 import app",
        "cbscore.cli:11 import_module() workers.cli",
        "cbscore.cli:12 __import__() app.cli",
    ])
    # the same lines one layer up are fine, and so is the entry point above everything
    assert upward(source, "app.cli", known) == []
    assert upward("import app.cli\nimport workers.cli\n", "cbs", known) == []


def test_the_cbs_command_is_the_entry_point_above_the_layers():
    import tomllib

    from cbs import build_parser

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"cbs": "cbs:main"}
    commands = list(build_parser()._subparsers._group_actions[0].choices)
    # each layer's commands, lowest layer first
    assert commands.index("fit") < commands.index("study") < commands.index("web")
    assert {"data", "train", "fit", "theory", "worker", "study", "tracking", "web", "up"} <= set(commands)


#: The one workers module the app may import: the workers' public API (issue 43, "a typed door").
DOOR = "workers.query.api"


def past_the_door(source: str, module: str, known: set[str]) -> list[str]:
    """The arrows of app module ``module`` into a workers module other than :data:`DOOR`, in words:
    import statements anywhere (``from workers.query import api`` names the door, ``from
    workers.query import reads`` does not), importing calls with a literal name and dotted names
    kept as strings (:func:`arrows`)."""
    tree = ast.parse(source)
    out = [(line, how, target) for line, how, target in arrows(source, module, known) if how != "import"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, "import", a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:  # a submodule imported by name is the module reached
                sub = f"{node.module}.{a.name}"
                out.append((node.lineno, "import", sub if sub in known else node.module))
    return [f"{module}:{line} {how} {target}" for line, how, target in sorted(set(out))
            if target.split(".")[0] == "workers" and target != DOOR]


def test_the_app_imports_nothing_from_the_workers_but_their_api():
    known = project_modules()
    bad = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        bad += past_the_door(path.read_text(encoding="utf-8"), module, known)
    assert not bad, f"app imports from the workers past {DOOR}:\n" + "\n".join(bad)


def test_the_door_check_sees_every_way_past_the_door():
    known = {"workers", "workers.query", "workers.query.api", "workers.query.reads", "workers.infra",
             "workers.infra.parse", "app", "app.view"}
    source = '''"""Named here for readers: workers.infra.parse."""
import importlib

import workers.query.api
from workers.query import api
from workers.query.api import launch_study
from workers.infra.parse import as_float


def page():
    from workers.query import api, reads
    import workers.infra
    importlib.import_module("workers.query.reads")
    importlib.import_module("workers.query.api")
    return "workers.infra.parse.as_int"
'''
    assert past_the_door(source, "app.view", known) == [
        "app.view:7 import workers.infra.parse",
        "app.view:11 import workers.query.reads",
        "app.view:12 import workers.infra",
        "app.view:13 import_module() workers.query.reads",
        "app.view:15 string workers.infra.parse",
    ]
