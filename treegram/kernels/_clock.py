"""A monotonic clock callable from nopython kernels (for traversal time budgets).

``clock_gettime`` is declared by symbol name inside the generated code, so kernels that
read the clock stay cacheable (a ctypes function pointer would be a dynamic global).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_CLOCK_MONOTONIC = 1  # Linux value


@intrinsic
def _clock_gettime(typingctx, clock_id, timespec_ptr):
    sig = types.int32(types.int32, types.voidptr)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(8).as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
        return builder.call(fn, args)

    return sig, codegen


@njit(nogil=True, cache=True, _nrt=False)
def monotonic_ns(scratch):
    """Monotonic time in nanoseconds; ``scratch`` is an int64 [2] buffer."""
    _clock_gettime(np.int32(_CLOCK_MONOTONIC), scratch.ctypes.data)
    return scratch[0] * 1000000000 + scratch[1]
