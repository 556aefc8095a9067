"""A rule body's DFA in one kernel call: its NFA (:func:`._nfa.build_nfa`) determinized
(:func:`._subset.determinize`).

A large JSON Schema has thousands of rules of a few states each; called from Python, the
two kernels cost more in dispatch (a dozen arguments to type and unbox, ten NFA arrays
to box and free) than in work. Here the NFA never leaves the kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._nfa import build_nfa
from ._subset import determinize

__all__ = ["build_rule_dfa"]


@njit(nogil=True, cache=True)
def build_rule_dfa(root, self_rule, kind, a, b, kid_at, kids, data, seq_ptr, lo, hi, sizes):
    """``determinize(*build_nfa(root, ...), 0, 1)``, unless the NFA calls rule
    ``self_rule`` (-1: not checked): the caller then rewrites those calls on the NFA
    first.

    Returns
    -------
    calls_self : bool
        Whether the NFA calls ``self_rule``; the DFA is then that of the empty NFA
        (never to be used).
    nfa_calls : int32 [n_ref]
        The rules the NFA calls, one per call edge (another rule with an equal body
        reads its own ``calls_self`` from it).
    dfa : tuple
        :func:`._subset.determinize`'s arrays.
    """
    nfa = build_nfa(root, kind, a, b, kid_at, kids, data, seq_ptr, lo, hi, sizes)
    ref_rule = nfa[8]
    calls_self = False
    if self_rule >= 0:
        for j in range(ref_rule.shape[0]):
            if ref_rule[j] == self_rule:
                calls_self = True
                break
    if calls_self:
        ptr = np.zeros(3, dtype=np.int32)  # two states, no edge
        no = np.zeros(0, dtype=np.int32)
        return True, ref_rule, determinize(2, ptr, no, ptr, no, no, no, ptr, no, no, 0, 1)
    return False, ref_rule, determinize(*nfa, 0, 1)
