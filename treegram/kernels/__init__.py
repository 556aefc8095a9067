"""numba nopython, nogil kernels over flat arrays: the hot loops of treegram."""
