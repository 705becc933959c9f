"""The registry of resampling schemes, and the factories estimators call.

:data:`SCHEMES` maps a name to a scheme class (:class:`~.base.Scheme`). A
scheme whose ``parameter`` is "block_scheme" or "permutation_type" is one
value of that estimator parameter: a new scheme is one small file whose
class registers itself (:func:`register`), and ``block_scheme=`` or
``permutation_type=`` then accepts its name. Estimators name what they were
given to :func:`bootstrap_scheme` or :func:`permutation_scheme` and draw
through the scheme returned.

The registry imports no scheme: the schemes import it to register, and the
package (``skbatch/_resampling/__init__.py``) imports every scheme module
once, in the order their names are listed in error messages.
"""

# BLOCK_SCHEMES and PERMUTATION_TYPES are read through __getattr__ below.
__all__ = [
    "SCHEMES",
    "bootstrap_scheme",
    "check_block_scheme",
    "check_permutation_type",
    "choices",
    "permutation_scheme",
    "register",
    "scheme",
]

# Name -> scheme class, in registration order.
SCHEMES = {}


def register(name):
    """Class decorator: file the scheme under ``name`` in :data:`SCHEMES`.

    Examples
    --------
    >>> from skbatch._resampling.registry import SCHEMES, register
    >>> from skbatch._resampling.iid import IIDBootstrap
    >>> @register("iid_again")
    ... class IIDAgain(IIDBootstrap):
    ...     pass
    >>> SCHEMES["iid_again"] is IIDAgain
    True
    >>> del SCHEMES["iid_again"]
    """

    def filed(cls):
        SCHEMES[name] = cls
        return cls

    return filed


def choices(parameter):
    """The registered names an estimator ``parameter`` accepts, in
    registration order."""
    return tuple(name for name, cls in SCHEMES.items() if cls.parameter == parameter)


# What ``bootstrap_counts(block_scheme=...)`` and
# ``permutation_indices(permutation_type=...)`` accept: read when asked for,
# once the package has imported (and so registered) every scheme.
_CHOICES = {"BLOCK_SCHEMES": "block_scheme", "PERMUTATION_TYPES": "permutation_type"}


def __getattr__(name):
    if name in _CHOICES:
        return choices(_CHOICES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
