"""Argument checks shared by every layer: integers that are not bools, integer arrays from
numpy or CPU torch (the draft-tree inputs of ``treegram.spec`` and ``treegram.matcher``), and
torch on demand.

Each check raises the :mod:`treegram.errors` type its caller names, so a module keeps the
exception its users already catch (``BitmaskError`` for bitmask helpers, ``ArgumentError``
elsewhere); the message always names the argument.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from treegram.errors import ArgumentError, DraftTreeError, MissingDependencyError, TreegramError

__all__ = ["is_int", "as_index", "nonnegative_int", "as_numpy", "as_int64_array", "import_torch"]

_INT64 = np.dtype(np.int64)
_INT64_MAX = int(np.iinfo(np.int64).max)


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


def as_numpy(values: Any, name: str, error: type[TreegramError] = DraftTreeError) -> np.ndarray:
    """``values`` (a numpy array, a CPU torch tensor, or anything ``np.asarray`` takes) as a
    numpy array, sharing memory where it can. torch is never imported here.

    Raises
    ------
    TreegramError
        Of type ``error``: a tensor that is not on the CPU, or a value numpy cannot convert.
    """
    if isinstance(values, np.ndarray):
        return values
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(values, torch.Tensor):
        if not values.is_cpu:  # is_cpu costs a seventh of device.type
            raise error(f"{name} must be on the CPU, got a tensor on {values.device}")
        return values.detach().numpy() if values.requires_grad else values.numpy()
    try:
        return np.asarray(values)
    except Exception as exc:  # e.g. a ragged list, or an object numpy cannot read
        raise error(
            f"{name} must be a numpy array or a CPU tensor, could not convert "
            f"{type(values).__name__} ({type(exc).__name__}: {exc})"
        ) from None


def as_int64_array(
    values: Any, name: str, *, signed: bool = False, error: type[TreegramError] = DraftTreeError
) -> np.ndarray:
    """``values`` as a C-contiguous, writable int64 numpy array (no copy when it already is
    one), of any shape. A read-only array is copied: the kernels are compiled for writable
    arrays, and a read-only one would make numba compile each kernel it reaches again.

    Parameters
    ----------
    values : numpy.ndarray, CPU torch.Tensor or array_like of int
        An empty ``array_like`` (``[]``, which numpy reads as float64) counts as int64.
    name : str
        Argument name used in error messages.
    signed : bool, keyword-only
        Accept signed integer dtypes only (default False: unsigned ones too, when every
        value fits in int64).
    error : TreegramError subclass, keyword-only
        Raised for bad input (default DraftTreeError, a ValueError).

    Raises
    ------
    TreegramError
        Of type ``error``: not an integer array (bools and Python ints beyond int64, which
        make an object array, included), a tensor that is not on the CPU, or unsigned values
        that do not fit in int64.
    """
    if type(values) is np.ndarray and values.dtype is _INT64:
        flags = values.flags  # (a new object at each access)
        if flags.c_contiguous and flags.writeable:
            return values  # the common case, already what the kernels take: nothing to check
    torch = sys.modules.get("torch")
    if (  # the engines' case: a contiguous CPU int64 tensor, viewed without a copy
        torch is not None
        and type(values) is torch.Tensor
        and values.dtype is torch.int64
        and values.is_cpu
        and not values.requires_grad
        and values.is_contiguous()
    ):
        return values.numpy()
    typed = hasattr(values, "dtype")  # an array or a tensor: its dtype is the caller's
    values = as_numpy(values, name, error)
    if not typed and values.size == 0 and values.dtype.kind == "f":
        values = values.astype(np.int64)  # np.asarray([]) is float64
    kinds = "i" if signed else "iu"
    if values.dtype.kind not in kinds:
        what = "a signed integer array" if signed else "an integer array"
        raise error(f"{name} must be {what}, got dtype {values.dtype}")
    if values.dtype == np.uint64 and values.size and values.max() > _INT64_MAX:
        # Converting would wrap 2**64 - 1 to -1 (a valid "no link" sentinel).
        raise error(f"{name} holds {int(values.max())}, which does not fit in int64")
    if values.dtype != np.int64 or not values.flags.c_contiguous:
        values = np.ascontiguousarray(values, dtype=np.int64)
    if not values.flags.writeable:
        values = values.copy()
    return values


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
