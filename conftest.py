"""Doctests that need an optional library skip without it.

The doctests of skbatch's modules and of the documentation pages
(tests/test_docs.py) import matplotlib, dask, himalaya... or ask for a torch
or jax device: where that library is not installed they are skipped, as the
tests are by ``pytest.importorskip``, so that the suite passes with the
required dependencies alone (the lower-bound leg of .ci/run).
"""

import ast
import doctest
import importlib.util

import pytest

# Values of a ``device=`` argument, before any ":index", that need a library.
DEVICE_LIBRARIES = {"torch": "torch", "jax": "jax"}


def _needed_modules(source):
    """Top-level modules that one example imports or asks for as a device."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    needed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            needed.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            needed.add(node.module.partition(".")[0])
        elif (
            isinstance(node, ast.keyword)
            and node.arg == "device"
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            library = DEVICE_LIBRARIES.get(node.value.value.partition(":")[0])
            if library is not None:
                needed.add(library)
    return needed


def missing_modules(examples):
    """The modules that ``examples`` (doctest Examples) need and that are absent.

    Examples marked ``+SKIP`` never run and do not count.
    """
    needed = set()
    for example in examples:
        if not example.options.get(doctest.SKIP):
            needed |= _needed_modules(example.source)
    return sorted(name for name in needed if importlib.util.find_spec(name) is None)


def skip_without_modules(examples):
    """``pytest.skip`` naming the modules ``examples`` need, if any is absent."""
    missing = missing_modules(examples)
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, not installed")


@pytest.fixture
def doctest_requirements():
    """:func:`skip_without_modules`, for tests that run doctests themselves."""
    return skip_without_modules


def pytest_collection_modifyitems(config, items):
    for item in items:
        # pytest's doctest items hold their DocTest in ``dtest``.
        examples = getattr(getattr(item, "dtest", None), "examples", None)
        if examples:
            missing = missing_modules(examples)
            if missing:
                reason = f"needs {', '.join(missing)}, not installed"
                item.add_marker(pytest.mark.skip(reason=reason))
