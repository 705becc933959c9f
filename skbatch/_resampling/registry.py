"""The registry of resampling schemes, and the factories estimators call.

:data:`SCHEMES` maps a name to a scheme class (:class:`~.base.Scheme`). A
scheme whose ``parameter`` is "block_scheme" or "permutation_type" is one
value of that estimator parameter: a new scheme is one small file and one
line here, and ``block_scheme=`` or ``permutation_type=`` then accepts its
name. Estimators name what they were given to :func:`bootstrap_scheme` or
:func:`permutation_scheme` and draw through the scheme returned.
"""

from .block_bootstrap import CircularBlocks, MovingBlocks, StationaryBlocks
from .cluster import ClusterBootstrap
from .enumeration import Exact
from .iid import IIDBootstrap
from .permutations import BlockShuffle, CircularShift, Shuffle
from .sign_flip import SignFlip

__all__ = [
    "BLOCK_SCHEMES",
    "PERMUTATION_TYPES",
    "SCHEMES",
    "bootstrap_scheme",
    "check_block_scheme",
    "check_permutation_type",
    "choices",
    "permutation_scheme",
    "scheme",
]

SCHEMES = {
    "iid": IIDBootstrap,
    "cluster": ClusterBootstrap,
    "moving": MovingBlocks,
    "circular": CircularBlocks,
    "stationary": StationaryBlocks,
    "shuffle": Shuffle,
    "circular_shift": CircularShift,
    "block_shuffle": BlockShuffle,
    "exact": Exact,
    "sign_flip": SignFlip,
}


def choices(parameter):
    """The registered names an estimator ``parameter`` accepts, in
    registration order."""
    return tuple(name for name, cls in SCHEMES.items() if cls.parameter == parameter)


# What ``bootstrap_counts(block_scheme=...)`` accepts, as registered at import.
BLOCK_SCHEMES = choices("block_scheme")
# What ``permutation_indices(permutation_type=...)`` accepts, likewise.
PERMUTATION_TYPES = choices("permutation_type")


def scheme(name, n_samples, groups=None, **params):
    """The registered scheme ``name`` for ``n_samples`` rows labelled by
    ``groups``, its ``params`` (``block_size``...) checked.

    Examples
    --------
    >>> from skbatch._resampling.registry import scheme
    >>> scheme("circular_shift", 4).rows(0, [0]).shape
    (1, 4)
    """
    if name not in SCHEMES:
        raise ValueError(f"scheme must be one of {tuple(SCHEMES)}, got {name!r}")
    return SCHEMES[name](n_samples, groups, **params)


def check_block_scheme(block_scheme, block_size):
    """Refuse an unknown ``block_scheme``, or one other than "moving" without
    ``block_size``."""
    allowed = choices("block_scheme")
    if not isinstance(block_scheme, str) or block_scheme not in allowed:
        raise ValueError(
            f"block_scheme must be one of {allowed}, got {block_scheme!r} "
            f"(with block_size={block_size!r})"
        )
    if block_scheme != "moving" and block_size is None:
        raise ValueError(
            f"block_scheme={block_scheme!r} needs block_size, got block_size=None; "
            f"set block_size, or leave block_scheme='moving' for the iid bootstrap"
        )


def check_permutation_type(permutation_type, block_size):
    """Refuse an unknown ``permutation_type``, ``block_size`` missing where the
    scheme cuts blocks, or given where it does not."""
    allowed = choices("permutation_type")
    if permutation_type not in allowed:
        raise ValueError(
            f"permutation_type must be one of {allowed}, got {permutation_type!r}"
        )
    cutting = [name for name in allowed if SCHEMES[name].uses_block_size]
    if SCHEMES[permutation_type].uses_block_size and block_size is None:
        raise ValueError(
            f"permutation_type={permutation_type!r} needs block_size, an int >= 1, "
            f"got block_size=None"
        )
    if not SCHEMES[permutation_type].uses_block_size and block_size is not None:
        only = " or ".join(f"permutation_type={name!r}" for name in cutting)
        raise ValueError(
            f"block_size is only used with {only}, got block_size={block_size!r} "
            f"with permutation_type={permutation_type!r}"
        )


def bootstrap_scheme(n_samples, groups=None, *, block_size=None, block_scheme="moving"):
    """The bootstrap of an estimator's parameters: rows (iid) without
    ``groups`` or ``block_size``, whole groups (cluster) with ``groups``
    alone, blocks of ``block_scheme`` with ``block_size``.

    Examples
    --------
    >>> from skbatch._resampling.registry import bootstrap_scheme
    >>> type(bootstrap_scheme(6, [0, 0, 1, 1, 2, 2])).__name__
    'ClusterBootstrap'
    """
    check_block_scheme(block_scheme, block_size)
    if block_size is not None:
        return scheme(block_scheme, n_samples, groups, block_size=block_size)
    return scheme("iid" if groups is None else "cluster", n_samples, groups)


def permutation_scheme(
    n_samples, groups=None, *, permutation_type="shuffle", block_size=None, exact=False
):
    """The permutations of an estimator's parameters: scheme
    ``permutation_type``, or with ``exact`` its enumeration.

    Examples
    --------
    >>> from skbatch._resampling.registry import permutation_scheme
    >>> permutation_scheme(4, exact=True).rows(0, [0, 1])
    array([[0, 1, 2, 3],
           [0, 1, 3, 2]])
    """
    check_permutation_type(permutation_type, block_size)
    params = {"block_size": block_size} if block_size is not None else {}
    if exact:
        return scheme(
            "exact", n_samples, groups, permutation_type=permutation_type, **params
        )
    return scheme(permutation_type, n_samples, groups, **params)
