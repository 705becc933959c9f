"""Order of the example gallery: first steps first.

A module of its own so that sphinx-gallery imports the sort key by name and
Sphinx can pickle the configuration.
"""

from pathlib import Path

GALLERY_ORDER = [
    "plot_quickstart_encoding_model.py",
    "plot_voxelwise_encoding_model.py",
    "plot_variance_partitioning.py",
    "plot_permutation_fwer.py",
    "plot_bootstrap_intervals.py",
    "plot_memory_budget_oom.py",
    "plot_pickle_to_another_host.py",
    "plot_gridsearch_batched_ridge.py",
    "plot_trf_speech_envelope.py",
]


class GalleryOrder:
    """Sort key: position in ``GALLERY_ORDER``, then unlisted files by name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        name = Path(filename).name
        if name in GALLERY_ORDER:
            return GALLERY_ORDER.index(name), name
        return len(GALLERY_ORDER), name

    def __repr__(self):
        return "GalleryOrder"
