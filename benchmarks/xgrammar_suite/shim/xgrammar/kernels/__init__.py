"""``xgrammar.kernels``: treegram's bitmask-apply kernels."""

from treegram.serving import apply_token_bitmask_inplace_cpu

__all__ = ["apply_token_bitmask_inplace_cpu"]
