"""The import graph of tfpriv/ is the one docs/ARCHITECTURE.md draws, and nothing else.

The graph is read with `ast` from every module of tfpriv/ (module-level and function-level imports,
and `importlib.import_module` of a constant name). Its layers and arrows are read from the two
tables of docs/ARCHITECTURE.md ("| layer | modules | may import |" and "| sideways arrow | why |"),
so the document cannot drift from the code: every module belongs to exactly one layer's entry, an
import goes to a layer below that its layer may import (or within its own entry, or along a listed
sideways arrow), every listed sideways arrow exists, and no modules import each other in a circle.
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "tfpriv"
DOC = REPO / "docs" / "ARCHITECTURE.md"


def modules() -> dict[str, pathlib.Path]:
    """Module name -> file, for every .py file of tfpriv/ (a package is its __init__.py)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str, tree: ast.Module, known: dict) -> set[str]:
    """The tfpriv modules that module `name` imports anywhere in its code."""
    is_package = known[name].name == "__init__.py"
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[:len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parent + ([base] if base else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            targets += submodules if len(submodules) == len(node.names) else [base, *submodules]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
            targets.append(node.args[0].value)
    out = set()
    for target in targets:
        while target and target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != name:
            out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, ast.parse(path.read_text()), known) for name, path in known.items()}


def table(text: str, header: str) -> list[list[str]]:
    """The rows (cells) of the markdown table under `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.replace(" ", "") == header.replace(" ", ""))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def documented():
    """(entry -> layer, layer -> layers it may import, sideways arrows) from docs/ARCHITECTURE.md."""
    text = DOC.read_text()
    layers = table(text, "| layer | modules | may import |")
    names = [row[0] for row in layers]
    entries, allowed = {}, {}
    for layer, cell, may in layers:
        for entry in re.findall(r"`([\w.]+)`", cell):
            assert entry not in entries, f"{entry} is listed twice"
            entries[entry] = layer
        allowed[layer] = {name for name in re.split(r",\s*", may) if name in names}
        assert allowed[layer] <= set(names[:names.index(layer)]), f"{layer} may import a layer above it"
    sideways = set()
    for arrow, _ in table(text, "| sideways arrow | why |"):
        source, target = re.findall(r"`([\w.]+)`", arrow)
        assert entries[source] == entries[target], f"{arrow}: not within one layer"
        sideways.add((source, target))
    return entries, allowed, sideways


def entry_of(module: str, entries: dict) -> str | None:
    """The documented entry a module belongs to: the longest listed name that is the module or a
    package holding it (the bare package `tfpriv` holds only its own __init__)."""
    matches = [e for e in entries if module == e or (e != "tfpriv" and module.startswith(e + "."))]
    return max(matches, key=len) if matches else None


@pytest.fixture(scope="module")
def imports():
    return graph()


@pytest.fixture(scope="module")
def doc():
    return documented()


def test_every_module_belongs_to_one_documented_layer(imports, doc):
    entries, _, _ = doc
    assert [m for m in imports if entry_of(m, entries) is None] == []
    assert [e for e in entries if e not in imports and not any(m.startswith(e + ".") for m in imports)] == []


def test_imports_go_down_or_along_a_documented_sideways_arrow(imports, doc):
    entries, allowed, sideways = doc
    wrong, used = [], set()
    for source, targets in imports.items():
        for target in targets:
            a, b = entry_of(source, entries), entry_of(target, entries)
            if a == b or entries[b] in allowed[entries[a]]:
                continue
            if (a, b) in sideways:
                used.add((a, b))
                continue
            wrong.append(f"{source} ({entries[a]}) -> {target} ({entries[b]})")
    assert wrong == []
    assert sideways - used == set(), "documented sideways arrows that no import uses"


def test_no_modules_import_each_other_in_a_circle(imports):
    cycles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(imports[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(imports):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def absl_flags_importers() -> set[str]:
    """The modules of tfpriv/ that import absl's flags (`from absl import flags`, `import absl.flags`,
    `from absl.flags import ...`), anywhere in their code."""
    out = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "absl" and any(a.name == "flags" for a in node.names):
                out.add(name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("absl.flags"):
                out.add(name)
            elif isinstance(node, ast.Import) and any(a.name.startswith("absl.flags") for a in node.names):
                out.add(name)
    return out


def test_only_the_command_line_defines_flags():
    assert absl_flags_importers() and all(name.startswith("tfpriv.cli.") for name in absl_flags_importers()), \
        sorted(absl_flags_importers())
