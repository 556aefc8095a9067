"""``xgrammar.kernels.apply_token_bitmask_inplace_cpu``: treegram's CPU apply kernel."""

from treegram.serving import apply_token_bitmask_inplace_cpu

__all__ = ["apply_token_bitmask_inplace_cpu"]
