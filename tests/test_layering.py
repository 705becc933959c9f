"""The package's layers: every import goes down, and no import circle.

Every import counts, those inside functions too (an import inside a
function is how a circle hides). A module's layer is that of its top-level
name under ``skbatch`` (a package, or a public module); the table below is
docs/developers/architecture.rst's drawing, top to bottom.
"""

import ast
import pathlib

import pytest

import skbatch

PACKAGE = pathlib.Path(skbatch.__file__).parent

# Top to bottom. A module may import from its own layer and those below.
LAYERS = {
    "entry points": ("skbatch", "__main__", "_demo"),
    "estimators": (
        "ridge",
        "banded",
        "bootstrap",
        "permutation",
        "partitioning",
        "delays",
        "scoring",
        "trf",
        "plotting",
        "_estimators",
        "_bootstrap",
        "_permutation",
    ),
    "solvers": ("_ridge",),
    "engine": ("_engine",),
    "device layer": ("backend", "memory", "oom", "random", "streaming", "testing"),
    "kernels": ("_kernels", "_resampling"),
    "libraries": ("_backends", "exceptions"),
}
RANK = {
    name: len(LAYERS) - depth
    for depth, names in enumerate(LAYERS.values())
    for name in names
}


def _modules():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module, path):
    """The skbatch modules ``module`` imports, anywhere in its code."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # "from . import x" names module x; "from .x import y" module x.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            # The longest skbatch module the name starts with.
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _layer(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_module_has_a_layer():
    assert {_layer(module) for module in MODULES} <= set(RANK)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module):
    if _layer(module) not in RANK:
        pytest.skip(f"{module} is in no layer (see the test above)")
    upward = sorted(
        imported
        for imported in GRAPH[module]
        # A package's own submodules are below it (the package re-exports).
        if not imported.startswith(module + ".")
        and RANK[_layer(imported)] > RANK[_layer(module)]
    )
    assert not upward, f"{module} imports {upward}, a layer above it"


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle():
    # A package's __init__ importing its submodules is how a package
    # presents them, not a circle: those edges are left out, the rest
    # (function-level imports included) must form no cycle.
    graph = {
        module: {m for m in imports if not m.startswith(module + ".")}
        for module, imports in GRAPH.items()
    }
    assert _cycles(graph) == []


def test_the_check_finds_a_cycle_and_an_upward_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert RANK["_kernels"] < RANK["streaming"] < RANK["_engine"] < RANK["_ridge"]


def test_the_parser_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from .._engine import planner\n")
    assert "skbatch._engine.planner" in _imports("skbatch._ridge.m", source)
