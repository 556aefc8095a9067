"""Arrays from raw addresses, for kernels that reach many matchers in one call.

A batch kernel finds each request's arrays in an int64 table of (address, length) pairs
(``treegram.kernels._registry``). These intrinsics turn a pair back into a C-contiguous
array *without* a reference-counted owner, so looking up a request costs a few loads and
no atomic operations. The registry keeps the arrays alive and unchanged while a kernel
holds its read lock.
"""

from __future__ import annotations

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

__all__ = [
    "view_i32",
    "view_i64",
    "view_u8",
    "view_bool",
    "view_i32_2d",
    "view_i64_2d",
    "view_i32_ro",
    "view_i64_ro",
    "view_u8_ro",
    "same_words",
]


def _view_maker(nbtype, ndim: int, readonly: bool = False):
    arrty = types.Array(nbtype, ndim, "C", readonly=readonly)

    @intrinsic
    def view(typingctx, addr, n0, n1):
        sig = arrty(types.int64, types.int64, types.int64)

        def codegen(context, builder, signature, args):
            addr_v, n0_v, n1_v = args
            ary = context.make_array(arrty)(context, builder)
            data = builder.inttoptr(addr_v, context.get_value_type(types.CPointer(nbtype)))
            itemsize = context.get_constant(
                types.intp, context.get_abi_sizeof(context.get_data_type(nbtype))
            )
            if ndim == 1:
                shape, strides = [n0_v], [itemsize]
            else:
                shape, strides = [n0_v, n1_v], [builder.mul(n1_v, itemsize), itemsize]
            populate_array(
                ary,
                data=data,
                shape=cgutils.pack_array(builder, shape),
                strides=cgutils.pack_array(builder, strides),
                itemsize=itemsize,
                meminfo=None,
            )
            return ary._getvalue()

        return sig, codegen

    return view


# view(address, n0, n1): n1 is the row length of the 2-D views and ignored by 1-D ones.
view_i32 = _view_maker(types.int32, 1)
view_i64 = _view_maker(types.int64, 1)
view_u8 = _view_maker(types.uint8, 1)
view_bool = _view_maker(types.boolean, 1)
view_i32_2d = _view_maker(types.int32, 2)
view_i64_2d = _view_maker(types.int64, 2)
# Read-only views of arrays the scalar entry points receive read-only (the sorted
# vocabulary's): the batch and scalar paths then share one compiled specialization of
# every kernel below them (numba types a read-only array apart from a writable one).
view_i32_ro = _view_maker(types.int32, 1, readonly=True)
view_i64_ro = _view_maker(types.int64, 1, readonly=True)
view_u8_ro = _view_maker(types.uint8, 1, readonly=True)


@njit(nogil=True, cache=True, _nrt=False)
def same_words(address, words):
    """Whether the ``len(words)`` int64 words at ``address`` equal ``words`` (int64 [n]).

    A batch call compares the item pointers of its tuple of matchers (read in place, from
    the tuple object) with the ids of the last batch's in one call, instead of reading an
    attribute of each matcher (``treegram.matcher._batch._claim``). The caller keeps the
    object at ``address`` alive and at least that long."""
    held = view_i64(address, words.shape[0], 0)
    for i in range(words.shape[0]):  # noqa: SIM110 - numba: no generators
        if held[i] != words[i]:
            return False
    return True
