"""A rule body's DFA in one kernel call: its NFA (:func:`._nfa.build_nfa`) determinized
(:func:`._subset.determinize`).

A large JSON Schema has thousands of rules of a few states each; called from Python, the
two kernels cost more in dispatch (a dozen arguments to type and unbox, ten NFA arrays
to box and free) than in work. Here the NFA never leaves the kernel. The rules whose NFA
Python edits first (calls of the rule itself, tail-call cycles) go through the same
kernel, their NFA handed over packed in one array (:func:`pack_nfa`, :func:`unpack_nfa`):
a build then loads one kernel from the cache, not two (``build_nfa`` and ``determinize``:
a first compile's load time).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._nfa import build_nfa
from ._subset import determinize

__all__ = ["DFA_OF_BODY", "DFA_OF_NFA", "NFA_OF_BODY", "pack_nfa", "rule_dfa", "unpack_nfa"]

# what :func:`rule_dfa` builds
DFA_OF_BODY, NFA_OF_BODY, DFA_OF_NFA = 0, 1, 2

_HEAD = 4  # n_states, n_eps, n_byte, n_ref


def pack_nfa(nfa: tuple) -> np.ndarray:
    """``build_nfa``'s arrays ``(n, eps_ptr, eps_to, byte_ptr, lo, hi, to, ref_ptr,
    ref_rule, ref_to)`` as one int32 array: the four counts, then the arrays in order."""
    n, *arrays = nfa
    head = np.array([n, arrays[1].shape[0], arrays[3].shape[0], arrays[7].shape[0]], np.int32)
    return np.concatenate([head, *arrays]).astype(np.int32, copy=False)


def unpack_nfa(packed: np.ndarray) -> tuple:
    """The arrays :func:`pack_nfa` packed (views of ``packed``)."""
    n, n_eps, n_byte, n_ref = (int(v) for v in packed[:_HEAD])
    sizes = (n + 1, n_eps, n + 1, n_byte, n_byte, n_byte, n + 1, n_ref, n_ref)
    out: list = [n]
    at = _HEAD
    for size in sizes:
        out.append(packed[at : at + size])
        at += size
    return tuple(out)


@njit(nogil=True, cache=True)
def _unpacked_dfa(packed, start, accept):
    n, n_eps, n_byte, n_ref = packed[0], packed[1], packed[2], packed[3]
    at = _HEAD
    eps_ptr = packed[at : at + n + 1]
    at += n + 1
    eps_to = packed[at : at + n_eps]
    at += n_eps
    byte_ptr = packed[at : at + n + 1]
    at += n + 1
    lo = packed[at : at + n_byte]
    hi = packed[at + n_byte : at + 2 * n_byte]
    to = packed[at + 2 * n_byte : at + 3 * n_byte]
    at += 3 * n_byte
    ref_ptr = packed[at : at + n + 1]
    at += n + 1
    ref_rule = packed[at : at + n_ref]
    ref_to = packed[at + n_ref : at + 2 * n_ref]
    return determinize(
        np.int64(n), eps_ptr, eps_to, byte_ptr, lo, hi, to, ref_ptr, ref_rule, ref_to,
        start, accept,
    )  # fmt: skip


@njit(nogil=True, cache=True)
def rule_dfa(what, root, self_rule, nodes, packed_nfa, start, accept):
    """One rule's automaton, by ``what``:

    - ``DFA_OF_BODY``: ``determinize(*build_nfa(root, *nodes), 0, 1)``, unless the NFA
      calls rule ``self_rule`` (-1: not checked); the caller then rewrites those calls on
      the NFA first;
    - ``NFA_OF_BODY``: only the NFA of ``root``, packed (:func:`pack_nfa`);
    - ``DFA_OF_NFA``: ``determinize`` of the packed NFA ``packed_nfa`` from ``start`` to
      ``accept``.

    ``nodes`` is :meth:`._nfa.FlatIr.arrays`.

    Returns
    -------
    calls_self : bool
        Whether the NFA calls ``self_rule``; the DFA is then that of an empty NFA (never
        to be used).
    out : int32 array
        ``DFA_OF_BODY``: the rules the NFA calls, one per call edge (another rule with an
        equal body reads its own ``calls_self`` from it); ``NFA_OF_BODY``: the packed NFA;
        else empty.
    dfa : tuple
        :func:`._subset.determinize`'s arrays.
    """
    kind, a, b, kid_at, kids, data, seq_ptr, lo, hi, sizes = nodes
    empty = np.zeros(_HEAD + 3 * 3, dtype=np.int32)  # packed: two states, no edge
    empty[0] = 2
    if what == DFA_OF_NFA:
        return False, np.zeros(0, dtype=np.int32), _unpacked_dfa(packed_nfa, start, accept)
    nfa = build_nfa(root, kind, a, b, kid_at, kids, data, seq_ptr, lo, hi, sizes)
    n, eps_ptr, eps_to, byte_ptr, y_lo, y_hi, y_to, ref_ptr, ref_rule, ref_to = nfa
    if what == NFA_OF_BODY:
        n_eps, n_byte, n_ref = eps_to.shape[0], y_lo.shape[0], ref_rule.shape[0]
        out = np.empty(_HEAD + 3 * (n + 1) + n_eps + 3 * n_byte + 2 * n_ref, dtype=np.int32)
        out[0], out[1], out[2], out[3] = n, n_eps, n_byte, n_ref
        at = _HEAD
        for arr in (eps_ptr, eps_to, byte_ptr, y_lo, y_hi, y_to, ref_ptr, ref_rule, ref_to):
            out[at : at + arr.shape[0]] = arr
            at += arr.shape[0]
        return False, out, _unpacked_dfa(empty, np.int64(0), np.int64(1))
    calls_self = False
    if self_rule >= 0:
        for j in range(ref_rule.shape[0]):
            if ref_rule[j] == self_rule:
                calls_self = True
                break
    if calls_self:
        return True, ref_rule, _unpacked_dfa(empty, np.int64(0), np.int64(1))
    return False, ref_rule, determinize(*nfa, start, accept)
