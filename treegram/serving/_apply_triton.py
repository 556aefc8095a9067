"""Triton kernel that applies a token bitmask to logits in place.

Imported only when the ``"triton"`` backend of
:func:`~treegram.serving.apply_token_bitmask_inplace` is used (``"auto"`` picks it for CUDA
tensors when Triton is importable). Inputs arrive validated and normalised by
:mod:`treegram.serving._apply`; this module only launches.

With ``TRITON_INTERPRET=1`` set *before this module is first imported*, Triton's interpreter
runs the same kernel on CPU tensors (slowly, with numpy); tests use that to check the kernel
on machines without a GPU. :data:`INTERPRETED` tells which mode the module was loaded in.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

__all__ = ["INTERPRETED", "apply_bitmask"]

_BLOCK = 1024  # tokens per program: 32 bitmask words
_NUM_WARPS = 4


@triton.jit
def _apply_bitmask_kernel(
    logits_ptr,
    bitmask_ptr,
    indices_ptr,
    vocab_size,
    logits_row_stride,
    logits_col_stride,
    bitmask_row_stride,
    bitmask_col_stride,
    BLOCK: tl.constexpr,
):
    """Program (r, b): tokens ``[b * BLOCK, (b + 1) * BLOCK)`` of row ``r`` (or ``indices[r]``).

    Every lane loads the word holding its token's bit (the 32 lanes of a word share one
    cached load), and stores -inf where the bit is 0 and the token is below ``vocab_size``.
    """
    program_row = tl.program_id(0)
    block = tl.program_id(1)
    if indices_ptr is None:
        row = program_row.to(tl.int64)
    else:
        row = tl.load(indices_ptr + program_row).to(tl.int64)
    tokens = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_vocab = tokens < vocab_size
    words = tl.load(
        bitmask_ptr + row * bitmask_row_stride + (tokens >> 5) * bitmask_col_stride,
        mask=in_vocab,
        other=-1,
    )
    bits = (words >> (tokens & 31).to(tl.int32)) & 1
    tl.store(
        logits_ptr + row * logits_row_stride + tokens * logits_col_stride,
        float("-inf"),
        mask=in_vocab & (bits == 0),
    )


INTERPRETED: bool = type(_apply_bitmask_kernel).__name__ == "InterpretedFunction"
"""True when this module was imported with ``TRITON_INTERPRET=1`` (CPU tensors allowed)."""


def apply_bitmask(logits: Any, bitmask: Any, vocab_size: int, indices: Any | None) -> None:
    """Launch the kernel: one program per (selected row, block of ``_BLOCK`` tokens).

    Parameters
    ----------
    logits : torch.Tensor
        float32/float16/bfloat16, shape ``(rows, V)``, any strides (no internal overlap).
    bitmask : torch.Tensor
        int32, shape ``(bitmask_rows, W)`` with ``32 * W >= vocab_size``, same device.
    vocab_size : int
        Tokens ``[0, vocab_size)`` of each selected row are masked; ``vocab_size >= 1``.
    indices : torch.Tensor or None
        int64, shape ``(n,)``, on the logits' device, every entry a valid row of both; None
        selects every row of ``logits`` (which then has as many rows as ``bitmask``).
    """
    n_rows = logits.shape[0] if indices is None else indices.shape[0]
    if n_rows == 0 or vocab_size == 0:
        return
    grid = (n_rows, triton.cdiv(vocab_size, _BLOCK))
    _apply_bitmask_kernel[grid](
        logits,
        bitmask,
        indices,
        vocab_size,
        logits.stride(0),
        logits.stride(1),
        bitmask.stride(0),
        bitmask.stride(1),
        BLOCK=_BLOCK,
        num_warps=_NUM_WARPS,
    )
