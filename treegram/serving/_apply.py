"""Apply a token bitmask to logits in place, and bitmask <-> bool-mask conversion for torch.

The bitmask layout is the ecosystem's (see :mod:`treegram.matcher._bitmask`): int32 words,
bit ``t % 32`` of word ``t // 32`` set if and only if token ``t`` is allowed.

:func:`apply_token_bitmask_inplace` follows xgrammar 0.2.8's function of the same name:

- masked (bit 0) logits become ``-inf``; allowed ones are left untouched;
- ``vocab_size`` defaults to ``min(logits.shape[-1], 32 * bitmask.shape[-1])``; when the
  bitmask covers fewer tokens than the logits have, a ``UserWarning`` is emitted and the
  trailing logits are left unmasked (pass ``vocab_size`` explicitly to silence it);
- ``indices`` names rows: for each ``i`` in ``indices``, logits row ``i`` is masked with
  bitmask row ``i`` (the *same* index into both, not the k-th bitmask row), so the two may
  have different numbers of rows; without ``indices`` they must have the same number;
- a 1-D logits or bitmask tensor is one row.

Where xgrammar fails with an assertion or a C++ check, or silently does something else,
treegram raises an error that names the argument (:class:`~treegram.errors.ArgumentError`,
:class:`~treegram.errors.BitmaskError`, :class:`~treegram.errors.BitmaskIndexError`, all
``ValueError``); see the function's Notes.

This module imports torch inside its functions only, so ``import treegram.serving`` does not
import torch. The Triton kernel lives in :mod:`treegram.serving._apply_triton`, imported only
when that backend runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import Any

import numpy as np

from treegram._checks import as_index, import_torch, nonnegative_int
from treegram.errors import ArgumentError, BitmaskError, BitmaskIndexError, MissingDependencyError

__all__ = [
    "apply_token_bitmask_inplace",
    "apply_token_bitmask_inplace_cpu",
    "bitmask_to_bool_tensor",
    "bool_tensor_to_bitmask",
]

_WORD_BITS = 32
_BACKENDS = ("auto", "torch", "triton")
_TRITON_MODULE = "treegram.serving._apply_triton"

# Per-device caches: the 32 single-bit int32 words (1 << k; k = 31 is -2**31), and 0..31.
_BIT_WORDS: dict[Any, Any] = {}
_SHIFTS: dict[Any, Any] = {}
# The bits of -inf per float dtype, as a signed integer of the same width.
_NEG_INF_BITS: dict[Any, int] = {}


# ---------------------------------------------------------------------------- helpers


def _torch() -> Any:
    """Import and return torch, or raise MissingDependencyError."""
    return import_torch("treegram.serving")


def _bit_words(torch: Any, device: Any) -> Any:
    """int32 tensor ``[1, 2, 4, ..., 2**30, -2**31]`` (bit k set in entry k) on ``device``."""
    words = _BIT_WORDS.get(device)
    if words is None:
        values = np.left_shift(np.uint32(1), np.arange(_WORD_BITS, dtype=np.uint32))
        words = torch.from_numpy(values.view(np.int32).copy()).to(device)
        _BIT_WORDS[device] = words
    return words


def _shifts(torch: Any, device: Any) -> Any:
    """int32 tensor ``[0, 1, ..., 31]`` on ``device``."""
    shifts = _SHIFTS.get(device)
    if shifts is None:
        shifts = torch.arange(_WORD_BITS, dtype=torch.int32, device=device)
        _SHIFTS[device] = shifts
    return shifts


def _bits(torch: Any, words: Any, vocab_size: int) -> Any:
    """int32 tensor ``(rows, vocab_size)`` of 0/1: the bit of each token.

    ``words`` is int32 ``(rows, w)`` with ``32 * w >= vocab_size``, any strides and device.
    Integer shifts only (no Python loop, no signed overflow).
    """
    n_words = -(-vocab_size // _WORD_BITS)
    bits = (words[:, :n_words].unsqueeze(-1) >> _shifts(torch, words.device)).bitwise_and_(1)
    return bits.reshape(words.shape[0], n_words * _WORD_BITS)[:, :vocab_size]


def _overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True if two elements of a strided tensor share memory (e.g. an ``expand``-ed one)."""
    dims = sorted((abs(s), n) for n, s in zip(shape, strides, strict=True) if n > 1)
    if any(n == 0 for n in shape):
        return False
    span = 0  # largest offset reachable with the dimensions seen so far
    for stride, size in dims:
        if stride <= span:
            return True
        span += stride * (size - 1)
    return False


def _check_logits(torch: Any, logits: Any) -> Any:
    """Validate ``logits``; return it as a 2-D view (a 1-D tensor becomes one row)."""
    if not isinstance(logits, torch.Tensor):
        raise ArgumentError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ArgumentError(
            f"logits must have dtype torch.float32, torch.float16 or torch.bfloat16, "
            f"got {logits.dtype}"
        )
    if logits.dim() not in (1, 2):
        raise ArgumentError(
            f"logits must be 1-D (vocab,) or 2-D (batch, vocab), got {logits.dim()}-D shape "
            f"{tuple(logits.shape)}"
        )
    if _overlaps(tuple(logits.shape), tuple(logits.stride())):
        raise ArgumentError(
            f"logits must not have elements sharing memory (an expanded/broadcast tensor), "
            f"got shape {tuple(logits.shape)} with strides {tuple(logits.stride())}"
        )
    return logits.unsqueeze(0) if logits.dim() == 1 else logits


def _check_bitmask(torch: Any, bitmask: Any) -> Any:
    """Validate ``bitmask``; return it as a 2-D int32 tensor (numpy arrays are wrapped)."""
    if isinstance(bitmask, np.ndarray):
        if bitmask.dtype != np.int32:
            raise BitmaskError(f"bitmask must have dtype int32, got numpy {bitmask.dtype}")
        array = np.ascontiguousarray(bitmask)
        bitmask = torch.from_numpy(array if array.flags.writeable else array.copy())
    if not isinstance(bitmask, torch.Tensor):
        raise BitmaskError(
            f"bitmask must be a torch.Tensor or numpy.ndarray, got {type(bitmask).__name__}"
        )
    if bitmask.dtype != torch.int32:
        raise BitmaskError(f"bitmask must have dtype torch.int32, got {bitmask.dtype}")
    if bitmask.dim() not in (1, 2):
        raise BitmaskError(
            f"bitmask must be 1-D (words,) or 2-D (batch, words), got {bitmask.dim()}-D shape "
            f"{tuple(bitmask.shape)}"
        )
    return bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask


def _resolve_vocab_size(vocab_size: Any, logits_width: int, bitmask_width: int) -> int:
    """Return the number of leading tokens to mask (see apply_token_bitmask_inplace)."""
    covered = _WORD_BITS * bitmask_width
    if vocab_size is None:
        if covered < logits_width:
            warnings.warn(
                f"the bitmask covers only {covered} tokens ({bitmask_width} int32 words) but "
                f"logits have {logits_width}, so logits[..., {covered}:] are left unmasked; "
                "allocate the bitmask for the full (padded) vocabulary or pass vocab_size",
                UserWarning,
                stacklevel=3,
            )
        return min(logits_width, covered)
    value = as_index(vocab_size, "vocab_size", ArgumentError, "a non-negative integer or None")
    if value < 0:
        raise ArgumentError(f"vocab_size must be a non-negative integer, got {value}")
    if value > logits_width:
        raise ArgumentError(
            f"vocab_size must be <= the logits' last dimension {logits_width}, got {value}"
        )
    if value > covered:
        raise BitmaskError(
            f"vocab_size {value} needs ceil({value} / 32) = {-(-value // _WORD_BITS)} bitmask "
            f"words per row, but the bitmask has {bitmask_width}"
        )
    return value


def _resolve_indices(torch: Any, indices: Any, logits_rows: int, bitmask_rows: int) -> Any:
    """Return None or a validated CPU int64 tensor of row indices."""
    if indices is None:
        if logits_rows != bitmask_rows:
            raise BitmaskError(
                f"without indices, logits and bitmask must have the same number of rows, "
                f"got {logits_rows} logits rows and {bitmask_rows} bitmask rows"
            )
        return None
    if isinstance(indices, torch.Tensor):
        if (
            indices.dtype.is_floating_point
            or indices.dtype.is_complex
            or (indices.dtype == torch.bool)
        ):
            raise BitmaskIndexError(f"indices must be integers, got a tensor of {indices.dtype}")
        array = indices.detach().to("cpu").numpy()
    else:
        try:
            array = np.asarray(indices)
        except (TypeError, ValueError) as exc:
            raise BitmaskIndexError(
                f"indices must be a sequence of integers, got {type(indices).__name__}"
            ) from exc
        if array.size == 0:
            array = array.astype(np.int64)
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
            raise BitmaskIndexError(
                f"indices must be integers, got {type(indices).__name__} of dtype {array.dtype}"
            )
    if array.ndim != 1:
        raise BitmaskIndexError(f"indices must be 1-D, got shape {tuple(array.shape)}")
    array = array.astype(np.int64, copy=False)
    rows = min(logits_rows, bitmask_rows)
    bad = np.flatnonzero((array < 0) | (array >= rows))
    if bad.size:
        raise BitmaskIndexError(
            f"indices must be in [0, {rows}) (rows of both logits ({logits_rows}) and bitmask "
            f"({bitmask_rows})), got indices[{bad[0]}] = {array[bad[0]]}"
        )
    return torch.from_numpy(np.ascontiguousarray(array))


def _triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def _triton_module() -> Any:
    """Import (once) and return :mod:`treegram.serving._apply_triton`."""
    try:
        return importlib.import_module(_TRITON_MODULE)
    except ImportError as exc:
        raise MissingDependencyError(
            f"backend='triton' needs the triton package, which could not be imported: {exc}"
        ) from exc


def _choose_backend(backend: Any, device: Any) -> str:
    if backend not in _BACKENDS:
        raise ArgumentError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" and _triton_available() else "torch"
    return backend


# ---------------------------------------------------------------------------- public API


def apply_token_bitmask_inplace(
    logits: Any,
    bitmask: Any,
    *,
    vocab_size: int | None = None,
    indices: Any = None,
    backend: str = "auto",
) -> None:
    """Set the logits of disallowed tokens to ``-inf``, in place.

    For every selected row ``i`` and token ``t < vocab_size``: if bit ``t % 32`` of word
    ``t // 32`` of ``bitmask[i]`` is 0, ``logits[i, t] = -inf``. Allowed logits, tokens at or
    past ``vocab_size`` and rows not selected are left untouched.

    Parameters
    ----------
    logits : torch.Tensor
        float32, float16 or bfloat16, shape ``(batch, V)`` or ``(V,)`` (one row); any device,
        any strides (elements must not share memory). Modified in place.
    bitmask : torch.Tensor or numpy.ndarray
        int32, shape ``(bitmask_batch, W)`` or ``(W,)`` (one row), on the logits' device (a
        numpy array counts as a CPU tensor); any strides. Read only.
    vocab_size : int or None, keyword-only
        Number of leading tokens to mask, at most ``V`` and at most ``32 * W``; use it when
        the logits or the bitmask are padded. Default ``min(V, 32 * W)``; when that is less
        than ``V`` (the bitmask is narrower than the logits) a ``UserWarning`` is emitted and
        ``logits[..., 32 * W:]`` are left unmasked, as in xgrammar.
    indices : sequence of int, numpy.ndarray or torch.Tensor, optional, keyword-only
        1-D integer row indices; for each ``i``, logits row ``i`` is masked with bitmask row
        ``i``. Rows of other requests (unconstrained ones in a mixed batch) are left alone,
        and ``batch`` may differ from ``bitmask_batch``. Each index must be in
        ``[0, min(batch, bitmask_batch))``; repeats are allowed (masking is idempotent).
        Without ``indices`` every row is masked and ``batch == bitmask_batch`` is required.
    backend : {"auto", "torch", "triton"}, keyword-only
        ``"torch"``: vectorised torch ops on any device (the bits are expanded with integer
        shifts into a per-token keep mask that selects, bit for bit, between each logit and
        ``-inf``; no Python loop over rows). ``"triton"``: one Triton kernel on CUDA tensors (or on
        CPU tensors when ``TRITON_INTERPRET=1`` was set before the kernel module was first
        imported). ``"auto"`` (default): Triton for CUDA tensors when it is importable, else
        torch.

    Raises
    ------
    ArgumentError
        ``logits`` is not a 1-D/2-D float32/float16/bfloat16 tensor or has overlapping
        elements; ``vocab_size`` is not an integer in ``[0, V]``; ``backend`` is unknown, or
        ``"triton"`` was asked for tensors that are not on CUDA (outside interpreter mode).
    BitmaskError
        ``bitmask`` is not a 1-D/2-D int32 tensor (or numpy array), is on another device than
        ``logits``, is too narrow for an explicit ``vocab_size``, or (without ``indices``) has
        a different number of rows than ``logits``.
    BitmaskIndexError
        ``indices`` is not a 1-D sequence of integers or holds an index outside
        ``[0, min(batch, bitmask_batch))``. Also an ``IndexError``.
    MissingDependencyError
        torch is not installed, or ``backend="triton"`` and Triton cannot be imported.

    Warns
    -----
    UserWarning
        ``vocab_size`` is None and ``32 * W < V``.

    Notes
    -----
    Deviations from xgrammar 0.2.8, all on inputs xgrammar mishandles: a negative
    ``vocab_size`` is an error (xgrammar's CPU kernel masks nothing); indices given as a
    tuple or numpy array are honoured (its CPU kernel then masks every row); logits that are
    not contiguous along the vocabulary are masked at the right elements (its CPU kernel
    ignores that stride); errors are ``ValueError`` subclasses rather than
    ``AssertionError`` (bitmask errors are ``RuntimeError`` too, as xgrammar's are).

    ``indices`` are range-checked on the host: a CUDA tensor of indices costs one
    device-to-host copy. Pass a list or a CPU tensor on hot paths.

    Thread safety: no shared state is written (except a small per-device constant cache);
    concurrent calls on distinct logits are safe.
    """
    torch = _torch()
    logits2d = _check_logits(torch, logits)
    bitmask2d = _check_bitmask(torch, bitmask)
    if bitmask2d.device != logits2d.device:
        raise BitmaskError(
            f"bitmask must be on the logits' device ({logits2d.device}), "
            f"got a bitmask on {bitmask2d.device}"
        )
    chosen = _choose_backend(backend, logits2d.device)
    width = _resolve_vocab_size(vocab_size, logits2d.shape[1], bitmask2d.shape[1])
    rows = _resolve_indices(torch, indices, logits2d.shape[0], bitmask2d.shape[0])
    if (
        width == 0
        or (rows is None and logits2d.shape[0] == 0)
        or (rows is not None and rows.numel() == 0)
    ):
        return
    if chosen == "triton":
        module = _triton_module()
        if logits2d.device.type != "cuda" and not module.INTERPRETED:
            raise ArgumentError(
                f"backend='triton' needs CUDA tensors, got logits on {logits2d.device} "
                "(set TRITON_INTERPRET=1 before the first use to run Triton's interpreter "
                "on CPU tensors, or use backend='torch')"
            )
        if rows is not None:
            rows = rows.to(logits2d.device, non_blocking=True)
        module.apply_bitmask(logits2d, bitmask2d, width, rows)
        return
    _apply_torch(torch, logits2d, bitmask2d, width, rows)


def _apply_torch(torch: Any, logits: Any, bitmask: Any, vocab_size: int, rows: Any) -> None:
    """Torch backend: integer bit operations on the logits' bits.

    Each token's bit becomes a word ``keep`` (all ones if allowed, 0 if not) of the logits'
    width, and the logits, viewed as integers, become ``((x ^ NEG_INF) & keep) ^ NEG_INF``:
    ``x`` itself where allowed (bit for bit), the ``-inf`` pattern elsewhere. Same result as
    ``masked_fill_(~allowed, -inf)``, but every pass is a vectorised integer op (torch's CPU
    ``masked_fill_`` and ``where`` with a bool mask run about ten times slower).
    """
    int_dtype = torch.int32 if logits.element_size() == 4 else torch.int16
    neg_inf = _NEG_INF_BITS.get(logits.dtype)
    if neg_inf is None:
        neg_inf = int(torch.tensor(float("-inf"), dtype=logits.dtype).view(int_dtype).item())
        _NEG_INF_BITS[logits.dtype] = neg_inf
    as_int = logits[:, :vocab_size].view(int_dtype)
    words = bitmask if rows is None else bitmask.index_select(0, rows.to(bitmask.device))
    keep = _bits(torch, words, vocab_size).to(int_dtype).neg_()  # 0 -> 0, 1 -> -1 (all ones)
    target = as_int if rows is None else as_int.index_select(0, rows.to(logits.device))
    target.bitwise_xor_(neg_inf).bitwise_and_(keep).bitwise_xor_(neg_inf)
    if rows is not None:
        # Repeated indices write identical rows, so index_copy_'s write order does not matter.
        as_int.index_copy_(0, rows.to(logits.device), target)


def bitmask_to_bool_tensor(bitmask: Any, vocab_size: int) -> Any:
    """Expand a bitmask tensor into a boolean tensor over the vocabulary (torch version of
    :func:`treegram.bitmask_to_bool`).

    Parameters
    ----------
    bitmask : torch.Tensor
        int32, shape ``(rows, w)`` or ``(w,)`` with ``w >= ceil(vocab_size / 32)``; any device
        and strides. Words past ``ceil(vocab_size / 32)`` and bits past ``vocab_size`` are
        ignored.
    vocab_size : int

    Returns
    -------
    torch.Tensor
        bool, shape ``(rows, vocab_size)`` (``(vocab_size,)`` for a 1-D input), on the
        bitmask's device; True where the token is allowed.

    Raises
    ------
    BitmaskError
        ``bitmask`` is not a 1-D/2-D int32 tensor, ``vocab_size`` is not a non-negative
        integer, or the bitmask has fewer than ``ceil(vocab_size / 32)`` words per row.
    """
    torch = _torch()
    vocab_size = nonnegative_int(vocab_size, "vocab_size", BitmaskError)
    if not isinstance(bitmask, torch.Tensor):
        raise BitmaskError(f"bitmask must be a torch.Tensor, got {type(bitmask).__name__}")
    words = _check_bitmask(torch, bitmask)
    n_words = -(-vocab_size // _WORD_BITS)
    if words.shape[1] < n_words:
        raise BitmaskError(
            f"bitmask must have >= {n_words} int32 words in its last dimension "
            f"(ceil({vocab_size} / 32)), got shape {tuple(bitmask.shape)}"
        )
    result = _bits(torch, words, vocab_size).to(torch.bool)
    return result[0] if bitmask.dim() == 1 else result


def bool_tensor_to_bitmask(mask: Any) -> Any:
    """Pack a boolean tensor over the vocabulary into the int32 bitmask layout (torch version
    of :func:`treegram.bool_to_bitmask`).

    Parameters
    ----------
    mask : torch.Tensor
        bool, shape ``(rows, vocab_size)`` or ``(vocab_size,)``; any device.

    Returns
    -------
    torch.Tensor
        int32, contiguous, shape ``(rows, ceil(vocab_size / 32))`` (``(ceil(vocab_size /
        32),)`` for a 1-D input), on the mask's device; the bits past ``vocab_size`` in the
        last word are 0.

    Raises
    ------
    BitmaskError
        ``mask`` is not a 1-D/2-D bool tensor.
    """
    torch = _torch()
    if not isinstance(mask, torch.Tensor):
        raise BitmaskError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise BitmaskError(f"mask must have dtype torch.bool, got {mask.dtype}")
    if mask.dim() not in (1, 2):
        raise BitmaskError(f"mask must be 1-D or 2-D, got {mask.dim()}-D shape {tuple(mask.shape)}")
    rows = mask.reshape(-1, mask.shape[-1])
    vocab_size = rows.shape[1]
    n_words = -(-vocab_size // _WORD_BITS)
    padded = torch.zeros(
        (rows.shape[0], n_words * _WORD_BITS), dtype=torch.int32, device=mask.device
    )
    padded[:, :vocab_size] = rows
    # Weights 2**k with bit 31 weighing -2**31: every sum lies in the int32 range, exactly.
    weighted = padded.view(rows.shape[0], n_words, _WORD_BITS) * _bit_words(torch, mask.device)
    packed = weighted.sum(dim=-1, dtype=torch.int64).to(torch.int32)
    return packed[0] if mask.dim() == 1 else packed


def apply_token_bitmask_inplace_cpu(
    logits: Any, bitmask: Any, vocab_size: int | None = None, indices: Any = None
) -> None:
    """xgrammar's CPU kernel entry point (``xgrammar.kernels.apply_token_bitmask_inplace_cpu``):
    :func:`apply_token_bitmask_inplace` on CPU tensors with the torch backend.

    Parameters
    ----------
    logits : torch.Tensor
        On the CPU; as for :func:`apply_token_bitmask_inplace`. Modified in place.
    bitmask : torch.Tensor or numpy.ndarray
        int32, on the CPU.
    vocab_size : int or None
        As for :func:`apply_token_bitmask_inplace` (positional here, as in xgrammar).
    indices : sequence of int, numpy.ndarray or torch.Tensor, optional
        As for :func:`apply_token_bitmask_inplace`.

    Raises
    ------
    ArgumentError
        ``logits`` is not a CPU tensor (and the errors of
        :func:`apply_token_bitmask_inplace`).
    """
    torch = _torch()
    if isinstance(logits, torch.Tensor) and logits.device.type != "cpu":
        raise ArgumentError(f"logits must be a CPU tensor, got one on {logits.device}")
    apply_token_bitmask_inplace(
        logits, bitmask, vocab_size=vocab_size, indices=indices, backend="torch"
    )
