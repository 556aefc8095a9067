"""Argument checks shared by every layer: integers that are not bools, and torch on demand.

Each check raises the :mod:`treegram.errors` type its caller names, so a module keeps the
exception its users already catch (``BitmaskError`` for bitmask helpers, ``ArgumentError``
elsewhere); the message always names the argument.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from treegram.errors import ArgumentError, MissingDependencyError, TreegramError

__all__ = ["is_int", "as_index", "nonnegative_int", "import_torch"]


def is_int(value: Any, *, numpy: bool = True) -> bool:
    """Whether ``value`` is an integer and not a bool.

    Numpy integers count unless ``numpy`` is false (options that are stored or hashed, such
    as cache sizes, take Python ints only).
    """
    if numpy:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    return isinstance(value, int) and not isinstance(value, bool)


def as_index(
    value: Any, name: str, error: type[TreegramError], expected: str = "an integer"
) -> int:
    """``value`` as a Python int via ``__index__`` (numpy integers count, bools do not).

    Raises
    ------
    TreegramError
        Of type ``error``: "``name`` must be ``expected``, got ...".
    """
    if isinstance(value, (bool, np.bool_)):
        raise error(f"{name} must be {expected}, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise error(f"{name} must be {expected}, got {type(value).__name__} {value!r}") from None


def nonnegative_int(value: Any, name: str, error: type[TreegramError] = ArgumentError) -> int:
    """``value`` as a Python int, or raise ``error`` when it is not an integer ``>= 0``.

    Raises
    ------
    TreegramError
        Of type ``error``, naming ``name``.
    """
    result = as_index(value, name, error, "a non-negative integer")
    if result < 0:
        raise error(f"{name} must be a non-negative integer, got {result}")
    return result


def import_torch(needed_by: str) -> Any:
    """Import and return torch, or raise MissingDependencyError naming ``needed_by``."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            f"{needed_by} needs torch; install it with pip install 'treegram[torch]'"
        ) from exc
    return torch
