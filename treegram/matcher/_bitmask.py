"""Token bitmasks: the ecosystem's layout, allocation, validation and test helpers.

Layout (shared with xgrammar, llguidance, SGLang and vLLM): a bitmask is an ``int32``
array of shape ``(rows, ceil(vocab_size / 32))``; bit ``t % 32`` of word ``t // 32`` of a
row is set if and only if token ``t`` is allowed. ``-1`` (all bits set) allows every token.

Masks are filled by numba kernels that take 2-D ``int32`` arrays with an arbitrary row
stride and unit stride along the words. :func:`as_bitmask_array` turns whatever a caller
hands in (a numpy array or a CPU torch tensor, a view of a larger buffer included) into
such a numpy view *of the caller's memory*, or raises :class:`~treegram.errors.BitmaskError`
naming the argument, the expectation and what was given.

Nothing in this module imports torch at import time; torch is imported only by
:func:`allocate_token_bitmask` when it is asked for (or, with ``backend="auto"``, when it is
installed). The helpers :func:`bitmask_to_bool`, :func:`bool_to_bitmask` and
:func:`allowed_token_ids` are vectorised numpy (no Python loop over tokens); tests use them
to compare masks.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import numpy as np

from treegram._checks import as_index, nonnegative_int
from treegram.errors import BitmaskError, BitmaskIndexError

__all__ = [
    "bitmask_dtype",
    "get_bitmask_shape",
    "allocate_token_bitmask",
    "reset_token_bitmask",
    "as_bitmask_array",
    "check_row_index",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "allowed_token_ids",
]

bitmask_dtype = np.int32
"""The dtype of a token bitmask: ``numpy.int32`` (``torch.int32`` for torch tensors)."""

_WORD_BITS = 32
_ITEMSIZE = 4
_BACKENDS = ("auto", "numpy", "torch")
_DLPACK_CPU = 1  # DLDeviceType.kDLCPU


def _nonnegative_int(value: Any, name: str) -> int:
    """``value`` as a Python int, or raise BitmaskError if it is not an int >= 0."""
    return nonnegative_int(value, name, BitmaskError)


def _num_words(vocab_size: int) -> int:
    return (vocab_size + _WORD_BITS - 1) // _WORD_BITS


def get_bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """Return a bitmask's shape: ``(batch_size, ceil(vocab_size / 32))``.

    Raises
    ------
    BitmaskError
        If either argument is not a non-negative integer.
    """
    batch_size = _nonnegative_int(batch_size, "batch_size")
    vocab_size = _nonnegative_int(vocab_size, "vocab_size")
    return (batch_size, _num_words(vocab_size))


def _torch_module() -> Any | None:
    """Return the torch module if it is installed (importing it), else None."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def _loaded_torch_tensor_type() -> type | None:
    """Return ``torch.Tensor`` if torch is already imported, without importing it."""
    torch = sys.modules.get("torch")
    return None if torch is None else torch.Tensor


def allocate_token_bitmask(batch_size: int, vocab_size: int, *, backend: str = "auto") -> Any:
    """Allocate a bitmask of shape ``(batch_size, ceil(vocab_size / 32))`` filled with -1.

    -1 sets every bit, i.e. every token is allowed, as in xgrammar.

    Parameters
    ----------
    batch_size : int
        Number of rows (>= 0).
    vocab_size : int
        Vocabulary size the rows cover (>= 0).
    backend : {"auto", "numpy", "torch"}, keyword-only
        ``"torch"`` returns a CPU ``torch.Tensor`` of dtype ``torch.int32`` (what xgrammar
        returns); ``"numpy"`` returns a C-contiguous ``numpy.ndarray`` of dtype ``int32``;
        ``"auto"`` (default) returns a torch tensor when torch is installed (importing it)
        and a numpy array otherwise.

    Returns
    -------
    torch.Tensor or numpy.ndarray
        ``int32``, shape ``(batch_size, ceil(vocab_size / 32))``, on the CPU, all -1.

    Raises
    ------
    BitmaskError
        If a size is not a non-negative integer or ``backend`` is unknown.
    ImportError
        If ``backend="torch"`` and torch is not installed.
    """
    shape = get_bitmask_shape(batch_size, vocab_size)
    if backend not in _BACKENDS:
        raise BitmaskError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if backend == "numpy":
        return np.full(shape, -1, dtype=bitmask_dtype)
    torch = _torch_module()
    if torch is None:
        if backend == "torch":
            raise ImportError(
                "allocate_token_bitmask(backend='torch') needs torch; "
                "install it (pip install 'treegram[torch]') or use backend='numpy'"
            )
        return np.full(shape, -1, dtype=bitmask_dtype)
    return torch.full(shape, -1, dtype=torch.int32)


def reset_token_bitmask(bitmask: Any) -> None:
    """Set every bit of ``bitmask`` (fill with -1: every token allowed), in place.

    Parameters
    ----------
    bitmask : numpy.ndarray or torch.Tensor
        ``int32`` array or tensor of any shape; torch tensors may live on any device.

    Raises
    ------
    BitmaskError
        If ``bitmask`` is not an int32 numpy array or torch tensor, or is read-only.
    """
    tensor_type = _loaded_torch_tensor_type()
    if tensor_type is not None and isinstance(bitmask, tensor_type):
        torch = sys.modules["torch"]
        tensor: Any = bitmask  # a torch.Tensor (torch is not imported for type checking)
        if tensor.dtype != torch.int32:
            raise BitmaskError(f"bitmask must have dtype torch.int32, got {tensor.dtype}")
        tensor.fill_(-1)
        return
    if not isinstance(bitmask, np.ndarray):
        raise BitmaskError(
            f"bitmask must be a numpy.ndarray or torch.Tensor, got {type(bitmask).__name__}"
        )
    if bitmask.dtype != bitmask_dtype:
        raise BitmaskError(f"bitmask must have dtype int32, got {bitmask.dtype}")
    if not bitmask.flags.writeable:
        raise BitmaskError("bitmask must be writable, got a read-only numpy array")
    bitmask.fill(-1)


def _to_numpy(bitmask: Any, name: str) -> np.ndarray:
    """View ``bitmask`` as a numpy array sharing its memory (strides and offset kept)."""
    if isinstance(bitmask, np.ndarray):
        # Subclasses (np.matrix, np.memmap, ...) are viewed as plain arrays: same memory,
        # and a type the kernels accept.
        return bitmask if type(bitmask) is np.ndarray else bitmask.view(np.ndarray)
    tensor_type = _loaded_torch_tensor_type()
    if tensor_type is not None and isinstance(bitmask, tensor_type):
        torch = sys.modules["torch"]
        tensor: Any = bitmask  # a torch.Tensor (torch is not imported for type checking)
        if not tensor.is_cpu:
            raise BitmaskError(f"{name} must be on the CPU, got a tensor on {tensor.device}")
        if tensor.dtype != torch.int32:
            raise BitmaskError(f"{name} must have dtype torch.int32, got {tensor.dtype}")
        # Tensor.numpy() shares storage and keeps the storage offset and strides.
        return tensor.detach().numpy() if tensor.requires_grad else tensor.numpy()
    if hasattr(bitmask, "__dlpack__") and hasattr(bitmask, "__dlpack_device__"):
        device_type, device_id = bitmask.__dlpack_device__()
        if int(device_type) != _DLPACK_CPU:
            raise BitmaskError(
                f"{name} must be on the CPU, got a DLPack device "
                f"(type {int(device_type)}, id {int(device_id)})"
            )
        try:
            return np.from_dlpack(bitmask)
        except (TypeError, ValueError, BufferError, RuntimeError) as exc:
            raise BitmaskError(f"{name} could not be viewed through DLPack: {exc}") from exc
    raise BitmaskError(
        f"{name} must be a numpy.ndarray, a CPU torch.Tensor or a DLPack array, "
        f"got {type(bitmask).__name__}"
    )


def _validated_view(
    bitmask: Any, *, vocab_size: int, name: str, writable: bool, allow_padding: bool
) -> np.ndarray:
    vocab_size = _nonnegative_int(vocab_size, "vocab_size")
    n_words = _num_words(vocab_size)
    array = _to_numpy(bitmask, name)
    if array.dtype != bitmask_dtype:
        raise BitmaskError(f"{name} must have dtype int32, got {array.dtype}")
    if array.ndim not in (1, 2):
        raise BitmaskError(
            f"{name} must be 1-D or 2-D (rows, {n_words}), got {array.ndim}-D shape {array.shape}"
        )
    if writable and not array.flags.writeable:
        raise BitmaskError(f"{name} must be writable, got a read-only array")
    width = array.shape[-1]
    if width != n_words and not (allow_padding and width > n_words):
        expected = f">= {n_words}" if allow_padding else f"{n_words}"
        raise BitmaskError(
            f"{name} must have {expected} int32 words in its last dimension "
            f"(ceil({vocab_size} / 32)), got shape {array.shape}"
        )
    if width > 1 and array.size > 0 and array.strides[-1] != _ITEMSIZE:
        raise BitmaskError(
            f"{name} must be contiguous along its last dimension "
            f"(stride {_ITEMSIZE} bytes), got strides {array.strides} bytes"
        )
    if not array.flags.aligned:
        raise BitmaskError(f"{name} must be 4-byte aligned, got an unaligned array")
    if array.ndim == 1:
        array = array.reshape(1, width)  # a view: the 1-D array is contiguous
    if width != n_words:
        array = array[:, :n_words]
    rows = array.shape[0]
    row_stride = array.strides[0]
    if rows > 1 and n_words > 0 and abs(row_stride) < n_words * _ITEMSIZE:
        raise BitmaskError(
            f"{name} has overlapping rows: row stride {row_stride} bytes is smaller than "
            f"a row of {n_words} words ({n_words * _ITEMSIZE} bytes)"
        )
    return array


def as_bitmask_array(
    bitmask: Any,
    *,
    vocab_size: int,
    name: str = "bitmask",
    writable: bool = True,
    allow_padding: bool = False,
) -> np.ndarray:
    """Validate a caller's bitmask and return a 2-D int32 numpy view of its memory.

    Writing through the returned array writes into ``bitmask``. Row strides are kept, so a
    view of a larger buffer (``big[2:]``, ``big[::2]``, ``big[:, :n]``) maps to the right
    memory, storage offsets of torch views included. The returned array need not be
    C-contiguous; kernels must honour its row stride.

    Parameters
    ----------
    bitmask : numpy.ndarray, torch.Tensor or DLPack array
        ``int32``, shape ``(rows, n_words)`` or ``(n_words,)`` (viewed as one row), where
        ``n_words = ceil(vocab_size / 32)``; on the CPU; stride 1 element along the words.
    vocab_size : int, keyword-only
        Vocabulary size the mask covers.
    name : str, keyword-only
        Argument name used in error messages.
    writable : bool, keyword-only
        Reject read-only arrays (default True: the caller's mask is to be filled).
    allow_padding : bool, keyword-only
        Accept a last dimension wider than ``n_words`` and return the view of the first
        ``n_words`` words of each row (the padding words are neither read nor written).
        Default False: like xgrammar's ``fill_next_token_bitmask``, which rejects any
        width other than ``ceil(vocab_size / 32)``, a mismatch is an error, so a mask
        allocated for a padded model vocabulary never leaves stale padding bits behind.

    Returns
    -------
    numpy.ndarray
        ``int32``, shape ``(rows, n_words)``, sharing memory with ``bitmask``.

    Raises
    ------
    BitmaskError
        If ``bitmask`` is not on the CPU, not int32, neither 1-D nor 2-D, of the wrong
        width, read-only (when ``writable``), not unit-stride along its words, unaligned,
        or has overlapping rows (e.g. a broadcast/expanded tensor).

    Notes
    -----
    xgrammar 0.2.8 accepts strided inputs but ignores their strides (it honours only the
    storage offset); treegram honours strides instead and rejects what it cannot honour.
    """
    return _validated_view(
        bitmask, vocab_size=vocab_size, name=name, writable=writable, allow_padding=allow_padding
    )


class BitmaskViewCache:
    """The validated view (:func:`as_bitmask_array`) of the last bitmask seen, reused while
    the same object keeps the same memory, shape and strides: engines pass one buffer
    every step, and validating it costs more than filling a small mask.

    One entry, replaced whole (a single attribute store), so one cache may serve several
    threads: a thread either sees a complete entry or validates afresh.
    """

    __slots__ = ("_entry",)

    def __init__(self) -> None:
        self._entry: tuple | None = None

    def view(self, bitmask: Any, vocab_size: int, name: str = "bitmask") -> np.ndarray:
        """:func:`as_bitmask_array` (writable, no padding) of ``bitmask``, from the cache
        when ``bitmask`` is the object seen last with unchanged memory, shape and strides.

        Raises
        ------
        BitmaskError
            As :func:`as_bitmask_array`.
        """
        e = self._entry
        if e is not None and e[0] is bitmask and e[5] == vocab_size:
            if e[4] is None:  # a numpy array: shape, strides and writability can change
                if bitmask.shape == e[2] and bitmask.strides == e[3] and bitmask.flags.writeable:
                    return e[1]
            elif bitmask.data_ptr() == e[3] and bitmask.shape == e[2] and bitmask.stride() == e[4]:
                return e[1]
        arr = as_bitmask_array(bitmask, vocab_size=vocab_size, name=name)
        if isinstance(bitmask, np.ndarray):
            self._entry = (bitmask, arr, bitmask.shape, bitmask.strides, None, vocab_size)
        elif hasattr(bitmask, "data_ptr") and hasattr(bitmask, "stride"):
            self._entry = (
                bitmask,
                arr,
                bitmask.shape,
                bitmask.data_ptr(),
                bitmask.stride(),
                vocab_size,
            )
        return arr


class ContiguousRows:
    """Context manager giving the first ``rows`` rows of a validated bitmask view as a
    C-contiguous array for the kernels: the view itself when it is one, else a copy, written
    back into the view on exit (an exception included, so the view ends as a direct write
    would have left it).

    The kernels are compiled for C-contiguous bitmasks only. A view whose rows lie apart in
    memory (the rows of a wider buffer) then costs a copy per call instead of a second numba
    specialization of every kernel it reaches: tens of seconds of JIT at its first use.
    """

    __slots__ = ("_view", "_rows", "_staged")

    def __init__(self, view: np.ndarray, rows: int) -> None:
        self._view = view
        self._rows = rows
        self._staged: np.ndarray | None = None

    def __enter__(self) -> np.ndarray:
        view = self._view
        if view.flags.c_contiguous:
            return view
        self._staged = np.ascontiguousarray(view[: self._rows])
        return self._staged

    def __exit__(self, *exc: object) -> None:
        if self._staged is not None:
            self._view[: self._rows] = self._staged
            self._staged = None


def check_row_index(index: Any, rows: int, name: str = "index") -> int:
    """Return ``index`` as an int if ``0 <= index < rows``.

    Negative indices are rejected (no Python-style wrap-around), as in xgrammar.

    Raises
    ------
    BitmaskIndexError
        If ``index`` is not an integer or is out of range. It is both a
        :class:`~treegram.errors.BitmaskError` (``ValueError``) and an ``IndexError``.
    """
    if type(index) is int and 0 <= index < rows:  # the common case, checked first
        return index
    value = as_index(index, name, BitmaskIndexError, "an integer row index")
    if not 0 <= value < rows:
        raise BitmaskIndexError(
            f"{name} must be in [0, {rows}) for a bitmask with {rows} rows, got {value}"
        )
    return value


def bitmask_to_bool(bitmask: Any, vocab_size: int) -> np.ndarray:
    """Expand a bitmask into a boolean array over the vocabulary.

    Parameters
    ----------
    bitmask : numpy.ndarray or CPU torch.Tensor
        ``int32``, shape ``(rows, w)`` or ``(w,)`` with ``w >= ceil(vocab_size / 32)``;
        words past ``ceil(vocab_size / 32)`` and bits past ``vocab_size`` are ignored.
    vocab_size : int

    Returns
    -------
    numpy.ndarray
        ``bool``, shape ``(rows, vocab_size)`` (or ``(vocab_size,)`` for a 1-D input);
        ``True`` where the token is allowed.
    """
    one_d = getattr(bitmask, "ndim", None) == 1
    words = _validated_view(
        bitmask, vocab_size=vocab_size, name="bitmask", writable=False, allow_padding=True
    )
    # Little-endian bytes, then bits least significant first: bit k of byte j is token 8j+k.
    as_bytes = np.ascontiguousarray(words, dtype="<i4").view(np.uint8)
    bits = np.unpackbits(as_bytes, axis=-1, bitorder="little")[:, :vocab_size]
    result = bits.astype(bool)
    return result[0] if one_d else result


def bool_to_bitmask(mask: Any) -> np.ndarray:
    """Pack a boolean mask over the vocabulary into the int32 bitmask layout.

    Parameters
    ----------
    mask : array_like of bool
        Shape ``(rows, vocab_size)`` or ``(vocab_size,)``.

    Returns
    -------
    numpy.ndarray
        ``int32``, C-contiguous, shape ``(rows, ceil(vocab_size / 32))`` (or
        ``(ceil(vocab_size / 32),)`` for a 1-D input); the bits past ``vocab_size`` in the
        last word are 0.

    Raises
    ------
    BitmaskError
        If ``mask`` is not boolean or neither 1-D nor 2-D.
    """
    array = np.asarray(mask)
    if array.dtype != np.bool_:
        raise BitmaskError(f"mask must have dtype bool, got {array.dtype}")
    if array.ndim not in (1, 2):
        raise BitmaskError(f"mask must be 1-D or 2-D, got {array.ndim}-D shape {array.shape}")
    vocab_size = array.shape[-1]
    n_words = _num_words(vocab_size)
    padded = np.zeros((*array.shape[:-1], n_words * _WORD_BITS), dtype=np.bool_)
    padded[..., :vocab_size] = array
    packed = np.packbits(padded, axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<i4").astype(bitmask_dtype)


def allowed_token_ids(bitmask_row: Any, vocab_size: int) -> np.ndarray:
    """Return the sorted ids of the tokens a single bitmask row allows.

    Parameters
    ----------
    bitmask_row : numpy.ndarray or CPU torch.Tensor
        ``int32``, shape ``(w,)`` with ``w >= ceil(vocab_size / 32)``.
    vocab_size : int

    Returns
    -------
    numpy.ndarray
        ``int64``, shape ``(n_allowed,)``, increasing.
    """
    ndim = getattr(bitmask_row, "ndim", None)
    if ndim != 1:
        raise BitmaskError(f"bitmask_row must be 1-D, got ndim {ndim}")
    return np.flatnonzero(bitmask_to_bool(bitmask_row, vocab_size)).astype(np.int64)
