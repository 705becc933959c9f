"""The documentation runs as written.

Every ``>>>`` example of the pages under ``docs/`` runs as a doctest, the
Python example of the README runs, and the README's "Set up" commands are
the ones CI runs.
"""

import contextlib
import doctest
import logging
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(
    path
    for path in DOCS.rglob("*.rst")
    if not {"_build", "auto_examples", "_templates"} & set(path.parts)
)
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _page_id(path):
    return path.relative_to(DOCS).as_posix()


@contextlib.contextmanager
def _fresh_logging():
    """Let a page configure logging, then put the loggers back as they were.

    pytest's own handlers are taken off the root logger meanwhile, so that
    ``logging.basicConfig`` in a page behaves as in a fresh interpreter.
    """
    loggers = (logging.getLogger(), logging.getLogger("skbatch"))
    saved = [(logger, logger.handlers[:], logger.level) for logger in loggers]
    loggers[0].handlers.clear()
    try:
        yield
    finally:
        for logger, handlers, level in saved:
            logger.handlers[:] = handlers
            logger.setLevel(level)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
@pytest.mark.slow
def test_page_examples_run(page, tmp_path, monkeypatch, doctest_requirements):
    # Pages may write files (pickles, figures): into a scratch folder.
    monkeypatch.chdir(tmp_path)
    text = page.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {}, _page_id(page), str(page), 0)
    doctest_requirements(test.examples)
    report = []
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    with _fresh_logging():
        result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_python_snippets_are_doctests(page):
    # A ``code-block:: python`` is never run, so it drifts from the library.
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"code-block::\s*(python|pycon)\b", text)


def _readme_blocks(language):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", readme, re.M | re.S)


def test_readme_example_runs():
    (code,) = _readme_blocks("python")
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    model, Y = namespace["model"], namespace["Y"]
    assert model.alpha_.shape == (Y.shape[1],)


def _setup_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```", setup, re.M | re.S)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def test_readme_setup_runs_the_demo_then_the_tests():
    commands = _setup_commands()
    # Creating the environment and the optional CPU build of torch come
    # first; then exactly two commands: the demo and the tests.
    assert commands[0] == "python -m venv .venv && source .venv/bin/activate"
    main = [c for c in commands if "skbatch demo" in c or "pytest" in c]
    assert len(main) == 2
    demo, tests = main
    assert demo.endswith("skbatch demo")
    assert tests == 'pip install -e ".[test]" && python -m pytest'


def test_ci_runs_the_readme_test_command_then_the_slow_tests():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    tests = _setup_commands()[-1]
    position = ci.index(tests)
    slow = [i for i, line in enumerate(ci) if "pytest -m slow" in line and i > position]
    assert slow, "CI must run the slow tests after the README's command"


def test_default_test_run_skips_slow_tests():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    addopts = shlex.split(config["tool"]["pytest"]["ini_options"]["addopts"])
    marker = addopts[addopts.index("-m") + 1]
    assert marker == "not slow"


@pytest.mark.slow
def test_getting_started_shows_what_the_demo_finds(tmp_path, monkeypatch):
    # The page's table comes from a run of `skbatch demo`; times, batches and
    # memory are the machine's, the findings must be today's.
    from skbatch import _demo

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = _demo.run_demo(out=tmp_path, verbose=0)
    report = _demo.format_report(result, (_demo.N_SAMPLES, _demo.N_FEATURES), 0)
    findings = report.split("\n\n")[2].splitlines()[:-1]  # without "figures:"
    page = (DOCS / "getting_started.rst").read_text(encoding="utf-8")
    shown = [line.removeprefix("   ") for line in page.splitlines()]
    assert report.splitlines()[0] in shown
    start = shown.index(findings[0])
    assert shown[start : start + len(findings)] == findings


def _sentences(text):
    return re.split(r"(?<=[.:;])\s+", " ".join(text.split()))


def test_one_promise_of_agreement_on_dask_workers():
    # Results on dask workers agree with the fit in process to the
    # tolerance guarantees.rst states (measured up to 1.5e-15 apart), which
    # the pages state; none promises them bit for bit.
    import skbatch._engine.cluster

    texts = {page.name: page.read_text() for page in PAGES}
    texts["run_on_cluster"] = skbatch._engine.cluster.run_on_cluster.__doc__
    for name, text in texts.items():
        for sentence in _sentences(text):
            lowered = sentence.lower()
            if "bit for bit" in lowered or "bitwise" in lowered:
                assert "dask" not in lowered and "worker" not in lowered, (
                    name,
                    sentence,
                )
    scaling = " ".join(texts["scaling.rst"].split())
    assert "to a relative ``1e-12`` of the largest magnitude in float64" in scaling
    guarantees = " ".join(texts["guarantees.rst"].split())
    assert "relative ``1e-12`` of the array's largest magnitude in float64" in (
        guarantees
    )
    assert "the batches run on dask workers" in guarantees
