"""Sphinx configuration of the skbatch documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html`` (warnings are
errors). The gallery runs every ``examples/plot_*.py`` at small sizes.
"""

import re
import sys
from pathlib import Path

import skbatch

# Local extensions and helpers (the gallery's sort key).
sys.path.insert(0, str(Path(__file__).parent / "sphinxext"))

project = "skbatch"
author = "skbatch developers"
copyright = "skbatch developers"
version = release = skbatch.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb"]
root_doc = "index"

autosummary_generate = True
autodoc_typehints = "none"
# Members are listed by the autosummary templates; numpydoc would list them
# a second time.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

html_theme = "pydata_sphinx_theme"
html_title = f"skbatch {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navbar_align": "left",
    "show_prev_next": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"index": [], "getting_started": []}
html_show_sourcelink = False


sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": re.escape("/plot_"),
    "within_subsection_order": "gallery_order.GalleryOrder",
    "backreferences_dir": "generated/backreferences",
    "doc_module": ("skbatch",),
    "abort_on_example_error": True,
    "write_computation_times": False,
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
}


# Docstring text that docutils misreads: a bare ``name_`` is a hyperlink
# reference and a bare ``*`` opens emphasis. Each is rewritten as autodoc
# reads it, so that the sources stay plain for help(); an entry without a
# match does nothing.
DOCSTRING_FIXES = {
    "(n_features_in_,)": "(``n_features_in_``,)",
    "(n_bootstrap, *estimate.shape)": "(n_bootstrap, ``*estimate.shape``)",
    'default="coef_"': 'default="coef\\_"',
}


def _fix_docstring(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        for wrong, right in DOCSTRING_FIXES.items():
            line = line.replace(wrong, right)
        lines[i] = line


def _check_api_covers_all(app):
    """Fail the build when a name of ``skbatch.__all__`` is missing from api.rst."""
    from sphinx.util import logging

    listed = Path(app.srcdir, "api.rst").read_text()
    missing = [
        name
        for name in skbatch.__all__
        if not re.search(rf"^\s+{re.escape(name)}$", listed, re.MULTILINE)
    ]
    if missing:
        logging.getLogger(__name__).warning(
            "api.rst does not list these names of skbatch.__all__: %s",
            ", ".join(missing),
        )


def setup(app):
    app.connect("builder-inited", _check_api_covers_all)
    # Before numpydoc (priority 500) turns the sections into reST.
    app.connect("autodoc-process-docstring", _fix_docstring, priority=100)
