"""Thompson NFAs of rule bodies, built by a numba kernel from the IR in flat arrays.

:class:`FlatIr` numbers every distinct IR node of a grammar once (a node shared by many
rules or many parents is flattened once, by identity) and stores it in arrays;
:func:`build_nfa` then expands one rule body into its NFA as CSR edge lists. The kernel
replays the recursive construction of ``_build._NfaBuilder`` step for step (same states
allocated in the same order, edges appended in the same order), so both give the same
NFA and therefore the same DFA.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from treegram.ir import Bytes, CharClass, Choice, Expr, Repeat, RuleRef, Seq, grouped_by_key
from treegram.kernels import splitmix as _mix

__all__ = [
    "FlatIr",
    "build_nfa",
    "call_patterns",
    "choice_sequences",
    "node_keys",
    "node_sizes",
    "tail_calls",
]

BYTES, CLASS, SEQ, CHOICE, REPEAT, REF = range(6)


Sequences = tuple[tuple[tuple[int, int], ...], ...]


def choice_sequences(node: Choice, class_sequences) -> Sequences | None:
    """The byte-range sequences of a choice between non-empty literals and character
    classes, read as one class: its single-byte alternatives merged into disjoint ranges
    (ascending), then the longer sequences in order; None for any other choice.

    Building a class's sequences from ``start`` to ``end`` gives the NFA of the choice
    with the parallel one-byte edges to ``end`` merged, so the DFA is the same. Free text
    of a structural tag reads bytes ``0x80``-``0xFF`` one by one as 128 literals; as
    separate edges they made every DFA state of it cost a pass over ~130 edges per byte
    interval. The answer is kept on the node (``class_sequences`` must be
    :func:`._build._class_sequences` or give the same).
    """
    got = node.__dict__.get("_class_sequences")
    if got is not None:  # the same node in another rule or grammar (free text's classes)
        return got or None
    items = node.items
    for item in items:  # most choices hold a sequence: refused before building anything
        t = type(item)
        if t is not CharClass and (t is not Bytes or not item.data):  # type: ignore[union-attr]
            object.__setattr__(node, "_class_sequences", ())
            return None
    singles: list[tuple[int, int]] = []
    longer: list[tuple[tuple[int, int], ...]] = []
    for item in items:
        t = type(item)
        if t is Bytes:
            data = item.data  # type: ignore[union-attr]
            if len(data) == 1:
                singles.append((data[0], data[0]))
            else:
                longer.append(tuple((v, v) for v in data))
        else:
            for seq in class_sequences(item):
                if len(seq) == 1:
                    singles.append(seq[0])
                else:
                    longer.append(seq)
    singles.sort()
    merged: list[tuple[tuple[int, int], ...]] = []
    for lo, hi in singles:
        if merged and lo <= merged[-1][0][1] + 1:
            if hi > merged[-1][0][1]:
                merged[-1] = ((merged[-1][0][0], hi),)
        else:
            merged.append(((lo, hi),))
    out = tuple(merged + longer)
    # kept on the (immutable) node: its fields, equality and hash are unchanged
    object.__setattr__(node, "_class_sequences", out)
    return out


class FlatIr:
    """The IR nodes of a grammar as flat arrays, each distinct node once.

    Per node: ``kind``; ``a``, ``b`` (Bytes: offset and length in ``data``; CharClass:
    first sequence and count; Seq/Choice: first child in ``kids`` and count; Repeat: min
    and max, -1 for none, its item in ``kids`` at ``kid_at``; RuleRef: rule id);
    ``kid_at``. A class's UTF-8 sequences are ``seq_ptr`` offsets into ``lo``/``hi``.
    Equal nodes (leaves by value, inner nodes by kind, bounds and children) are one
    node, so rules with equal bodies have one root. A node is in ``bad`` when building it must
    raise (an undefined rule, ``max < min``): the caller then builds that rule with the
    Python builder, which raises the error.

    Parameters
    ----------
    rule_ids : dict of str to int
        Rule ids by name.
    class_sequences : callable
        ``CharClass`` to its list of UTF-8 byte-range sequences.
    """

    def __init__(self, rule_ids: dict[str, int], class_sequences) -> None:
        self.rule_ids = rule_ids
        self.class_sequences = class_sequences
        self.index: dict[int, int] = {}
        self.keep: list[Expr] = []  # the roots: they keep every indexed node alive
        self.kind: list[int] = []
        self.a: list[int] = []
        self.b: list[int] = []
        self.kid_at: list[int] = []
        self.bad: set[int] = set()
        self.leaves: dict = {}  # leaves by value (a choice read as a class by its sequences)
        self.inner: dict[tuple, int] = {}  # inner nodes by kind and node ids of children
        self.kids: list[int] = []
        self.data = bytearray()
        self.seq_ptr: list[int] = [0]
        self.lo: list[int] = []
        self.hi: list[int] = []
        self._arrays: tuple | None = None
        self._visit = None

    def add(self, root: Expr) -> int:
        """Index ``root`` and every node below it; return the root's node id."""
        got = self.index.get(id(root))
        if got is None:
            if self._visit is None:
                self._visit = self._visitor()
            # the root keeps every node below it alive (IR nodes are immutable), so their
            # ids in ``index`` stay valid
            self.keep.append(root)
            got = self._visit(root)
        self._arrays = None
        return got

    def close(self) -> None:
        """Done adding: drop the indexing function. It calls itself through its closure,
        a cycle that holds the index and key tables and that only the cyclic garbage
        collector would free (a walk of every object it holds, about 5% of a build)."""
        visit, self._visit = self._visit, None
        if visit is not None:
            for cell in visit.__closure__ or ():
                cell.cell_contents = None

    def _visitor(self):
        """The recursive indexing function of :meth:`add` (one frame per level; the
        builder runs deep IR on a large stack, ``ir.run_sized``). Children are numbered
        before their parents, the last child first, as :func:`node_sizes` and the NFA
        kernel need. It runs once per IR node of a grammar (tens of thousands for a large
        JSON Schema, a large part of a build): the leaf table is read inline, and a
        node's fields are read once."""
        index, kids, kind, a, b, kid_at, inner = (
            self.index, self.kids, self.kind, self.a, self.b, self.kid_at, self.inner
        )  # fmt: skip
        bad, leaf, leaves, class_sequences = self.bad, self._leaf, self.leaves, self.class_sequences
        index_get, inner_get, leaves_get = index.get, inner.get, leaves.get

        def visit(node) -> int:
            t = type(node)
            if t is Seq or t is Choice:
                items = node.items
                if t is Choice:
                    seqs = choice_sequences(node, class_sequences)
                    if seqs is not None:  # one class leaf
                        nid = leaves_get(seqs)
                        if nid is None:
                            nid = leaf(node, seqs)
                        index[id(node)] = nid
                        return nid
                kid_ids = []
                for c in reversed(items):
                    k = index_get(id(c))
                    if k is None:
                        k = visit(c)
                    kid_ids.append(k)
                kid_ids.reverse()
                key: tuple = (t, tuple(kid_ids))
                # equal structure, one node: rules with equal bodies share their automaton
                nid = inner_get(key)
                if nid is not None:
                    index[id(node)] = nid
                    return nid
                nid = inner[key] = index[id(node)] = len(kid_at)
                at = len(kids)
                kids.extend(kid_ids)
                kind.append(SEQ if t is Seq else CHOICE)
                a.append(at)
                b.append(len(kid_ids))
                kid_at.append(at)
                if bad and not bad.isdisjoint(kid_ids):
                    bad.add(nid)
                return nid
            if t is Repeat:
                c = node.item
                k = index_get(id(c))
                if k is None:
                    k = visit(c)
                lo, hi = node.min, node.max
                key = (t, lo, hi, k)
                nid = inner_get(key)
                if nid is not None:
                    index[id(node)] = nid
                    return nid
                nid = inner[key] = index[id(node)] = len(kid_at)
                at = len(kids)
                kids.append(k)
                kind.append(REPEAT)
                a.append(lo)
                b.append(-1 if hi is None else hi)
                kid_at.append(at)
                if (hi is not None and hi < lo) or k in bad:
                    bad.add(nid)
                return nid
            # a leaf by its fields (the dataclasses' hash and equality are Python calls)
            if t is Bytes:
                nid = leaves_get((t, node.data))
            elif t is RuleRef:
                nid = leaves_get((t, node.name))
            elif t is CharClass:
                nid = leaves_get((t, node.ranges, node.negated))
            else:
                nid = None
            if nid is None:
                nid = leaf(node)
            index[id(node)] = nid
            return nid

        return visit

    def _leaf(self, node, seqs=None) -> int:
        """The node id of a leaf (``seqs``: a choice read as a class, see
        :func:`choice_sequences`); equal leaves share one."""
        # a choice by its sequences: comparing two choices as IR nodes would walk them;
        # a leaf by its fields (the dataclasses' hash and equality are Python calls)
        t = type(node)
        if seqs is not None:
            key = seqs
        elif t is Bytes:
            key = (t, node.data)
        elif t is CharClass:
            key = (t, node.ranges, node.negated)
        elif t is RuleRef:
            key = (t, node.name)
        else:
            key = node
        got = self.leaves.get(key)
        if got is not None:
            return got
        nid = len(self.kid_at)
        if seqs is not None or t is CharClass:
            n_seqs, los, his, ends = self._class_runs(node, seqs)
            self.kind.append(CLASS)
            self.a.append(len(self.seq_ptr) - 1)
            self.b.append(n_seqs)
            base = len(self.lo)
            self.lo.extend(los)
            self.hi.extend(his)
            self.seq_ptr.extend([base + e for e in ends])
        elif t is Bytes:
            self.kind.append(BYTES)
            self.a.append(len(self.data))
            self.b.append(len(node.data))
            self.data += node.data
        else:
            rid = self.rule_ids.get(node.name) if t is RuleRef else None
            self.kind.append(REF)
            self.a.append(-1 if rid is None else rid)
            self.b.append(0)
            if rid is None:  # an undefined rule (or a node the builder refuses)
                self.bad.add(nid)
        self.kid_at.append(len(self.kids))
        self.leaves[key] = nid
        return nid

    def _class_runs(self, node, seqs) -> tuple:
        """A class leaf's sequences as :meth:`_leaf` appends them: their number, the
        ranges' lows and highs in order and each sequence's end, kept on the node (a
        character class or a choice read as one; the same classes recur in every grammar)
        for this ``class_sequences``."""
        got = node.__dict__.get(_CLASS_RUNS)
        if got is not None and got[0] is self.class_sequences:
            return got[1]
        if seqs is None:
            seqs = self.class_sequences(node)
        los = [lo for seq in seqs for lo, _ in seq]
        his = [hi for seq in seqs for _, hi in seq]
        ends, n = [], 0
        for seq in seqs:
            n += len(seq)
            ends.append(n)
        runs = (len(seqs), los, his, ends)
        object.__setattr__(node, _CLASS_RUNS, (self.class_sequences, runs))
        return runs

    def arrays(self) -> tuple:
        """The node arrays in the order :func:`build_nfa` takes them (the last,
        :func:`node_sizes` of the nodes)."""
        if self._arrays is None:
            i64 = np.int64
            self._arrays = (
                np.array(self.kind, dtype=np.int8),
                np.array(self.a, dtype=i64),
                np.array(self.b, dtype=i64),
                np.array(self.kid_at, dtype=i64),
                np.array(self.kids, dtype=i64),
                np.frombuffer(bytes(self.data), dtype=np.uint8),
                np.array(self.seq_ptr, dtype=i64),
                np.array(self.lo, dtype=np.int32),
                np.array(self.hi, dtype=np.int32),
            )
            self._arrays += (node_sizes(*self._arrays[:5], self._arrays[6]),)
        return self._arrays


_CLASS_RUNS = "_class_runs"  # attribute of a class leaf: (class_sequences, its runs)


@njit(nogil=True, cache=True)
def _csr(src, n_edges, n_states):
    """Offsets [n_states + 1] (int32) and the edge order that groups edges by source state,
    keeping each state's edges in the order they were added."""
    ptr, order = grouped_by_key(src[:n_edges], n_states)
    return ptr.astype(np.int32), order


@njit(nogil=True, cache=True)
def node_keys(kind, a, b, kid_at, kids, data, seq_ptr, lo, hi, key0, key1):
    """Per node, a 128-bit hash of its structure keyed by ``key0, key1`` (two random
    words: colliding bodies cannot be crafted without them), with every rule reference
    read as one token whatever rule it calls; and the rules it calls: -1 none, ``r``
    only rule ``r``, -2 several or an undefined one. Children come before their parents,
    so one pass fills both. A body that calls nothing or only its own rule is then known
    by its hash alone, in any grammar (see ``_build``'s cache of rule automata).

    Returns
    -------
    keys : uint64 [n_nodes, 2]
    calls : int64 [n_nodes]
    """
    n = kind.shape[0]
    keys = np.empty((n, 2), dtype=np.uint64)
    calls = np.full(n, -1, dtype=np.int64)
    for v in range(n):
        k = kind[v]
        h0 = _mix(key0, np.uint64(k))
        h1 = _mix(key1, np.uint64(k))
        if k == BYTES:
            h0 = _mix(h0, np.uint64(b[v]))
            h1 = _mix(h1, np.uint64(b[v]))
            for i in range(a[v], a[v] + b[v]):
                h0 = _mix(h0, np.uint64(data[i]))
                h1 = _mix(h1, np.uint64(data[i]))
        elif k == CLASS:
            h0 = _mix(h0, np.uint64(b[v]))
            h1 = _mix(h1, np.uint64(b[v]))
            for q in range(a[v], a[v] + b[v]):
                m = np.uint64(seq_ptr[q + 1] - seq_ptr[q])
                h0 = _mix(h0, m)
                h1 = _mix(h1, m)
                for e in range(seq_ptr[q], seq_ptr[q + 1]):
                    w = (np.uint64(lo[e]) << np.uint64(32)) | np.uint64(hi[e])
                    h0 = _mix(h0, w)
                    h1 = _mix(h1, w)
        elif k == REF:
            calls[v] = a[v] if a[v] >= 0 else -2
        else:
            if k == REPEAT:  # a = min, b = max (-1: none), one child
                h0 = _mix(_mix(h0, np.uint64(a[v])), np.uint64(b[v] + 1))
                h1 = _mix(_mix(h1, np.uint64(a[v])), np.uint64(b[v] + 1))
                first, count = kid_at[v], 1
            else:  # a sequence or a choice: b children from a
                h0 = _mix(h0, np.uint64(b[v]))
                h1 = _mix(h1, np.uint64(b[v]))
                first, count = a[v], b[v]
            for j in range(first, first + count):
                c = kids[j]
                h0 = _mix(h0, keys[c, 0])
                h1 = _mix(h1, keys[c, 1])
                got = calls[c]
                if got != -1 and calls[v] != got:
                    calls[v] = got if calls[v] == -1 else -2
        keys[v, 0] = h0
        keys[v, 1] = h1
    return keys, calls


@njit(nogil=True, cache=True)
def node_sizes(kind, a, b, kid_at, kids, seq_ptr):
    """Per node, what :func:`build_nfa` makes for it: new states, epsilon, byte and call
    edges, and the depth of its frames, as int64 [n_nodes, 5]. Children come before their
    parents in node order (``FlatIr.add`` numbers them so), so one pass fills it. The NFA
    of a body is allocated at its exact size: arrays that a loop may replace (grown on
    demand) cost numba a reference count update at every use, which made the kernel
    thirty times slower than the work."""
    n = kind.shape[0]
    out = np.zeros((n, 5), dtype=np.int64)
    for v in range(n):
        k = kind[v]
        if k == BYTES:
            if b[v] == 0:
                out[v, 1] = 1
            else:
                out[v, 0] = b[v] - 1
                out[v, 2] = b[v]
            out[v, 4] = 1
        elif k == CLASS:
            for q in range(a[v], a[v] + b[v]):
                n_q = seq_ptr[q + 1] - seq_ptr[q]
                out[v, 0] += n_q - 1
                out[v, 2] += n_q
            out[v, 4] = 1
        elif k == REF:
            out[v, 3] = 1
            out[v, 4] = 1
        elif k in (SEQ, CHOICE):
            if k == SEQ:
                if b[v] == 0:
                    out[v, 1] = 1
                else:
                    out[v, 0] = b[v] - 1
            depth = 0
            for j in range(b[v]):
                c = kids[a[v] + j]
                for f in range(4):
                    out[v, f] += out[c, f]
                depth = max(depth, out[c, 4])
            out[v, 4] = 1 + depth
        else:  # Repeat: a = min, b = max (-1: none)
            c = kids[kid_at[v]]
            if b[v] < 0:
                copies = a[v] + 1
                out[v, 0] = a[v] + 2
                out[v, 1] = 3
            else:
                copies = b[v]
                out[v, 0] = b[v]
                out[v, 1] = b[v] - a[v] + 1
            for f in range(4):
                out[v, f] += copies * out[c, f]
            out[v, 4] = 1 + out[c, 4]
    return out


@njit(nogil=True, cache=True)
def build_nfa(root, kind, a, b, kid_at, kids, data, seq_ptr, lo, hi, sizes):
    """The NFA of one rule body (node ``root``): start state 0, accepting state 1.
    ``sizes`` is :func:`node_sizes` of the nodes.

    Returns
    -------
    n_states : int
    eps_ptr : int32 [n_states + 1]; eps_to : int32 [n_eps]
    byte_ptr : int32 [n_states + 1]; byte_lo, byte_hi, byte_to : int32 [n_byte]
    ref_ptr : int32 [n_states + 1]; ref_rule, ref_to : int32 [n_ref]
    """
    n_e = sizes[root, 1]
    n_y = sizes[root, 2]
    n_r = sizes[root, 3]
    depth = sizes[root, 4]
    e_src = np.empty(n_e, dtype=np.int32)
    e_dst = np.empty(n_e, dtype=np.int32)
    y_src = np.empty(n_y, dtype=np.int32)
    y_lo = np.empty(n_y, dtype=np.int32)
    y_hi = np.empty(n_y, dtype=np.int32)
    y_to = np.empty(n_y, dtype=np.int32)
    r_src = np.empty(n_r, dtype=np.int32)
    r_rule = np.empty(n_r, dtype=np.int32)
    r_to = np.empty(n_r, dtype=np.int32)
    frames = np.empty((depth, 6), dtype=np.int64)
    n_states = _fill_nfa(
        root,
        (kind, a, b, kid_at, kids, data, seq_ptr, lo, hi),
        (e_src, e_dst, y_src, y_lo, y_hi, y_to, r_src, r_rule, r_to),
        frames,
    )
    eps_ptr, order = _csr(e_src, n_e, n_states)
    eps_to = np.empty(n_e, dtype=np.int32)
    for j in range(n_e):
        eps_to[j] = e_dst[order[j]]
    byte_ptr, order = _csr(y_src, n_y, n_states)
    byte_lo = np.empty(n_y, dtype=np.int32)
    byte_hi = np.empty(n_y, dtype=np.int32)
    byte_to = np.empty(n_y, dtype=np.int32)
    for j in range(n_y):
        byte_lo[j], byte_hi[j], byte_to[j] = y_lo[order[j]], y_hi[order[j]], y_to[order[j]]
    ref_ptr, order = _csr(r_src, n_r, n_states)
    ref_rule = np.empty(n_r, dtype=np.int32)
    ref_to = np.empty(n_r, dtype=np.int32)
    for j in range(n_r):
        ref_rule[j], ref_to[j] = r_rule[order[j]], r_to[order[j]]
    return (
        n_states, eps_ptr, eps_to, byte_ptr, byte_lo, byte_hi, byte_to, ref_ptr, ref_rule,
        ref_to,
    )  # fmt: skip


@njit(nogil=True, cache=True)
def _fill_nfa(root, nodes, edges, frames):  # noqa: C901
    """The Thompson construction of node ``root`` into edge arrays of its exact size, in
    the order the Python builder makes states and edges; returns the number of states.
    ``nodes``: :meth:`FlatIr.arrays` up to ``hi``; ``edges``: the epsilon (source,
    target), byte (source, low, high, target) and call (source, rule, return) arrays to
    fill. The recursion of the Python builder is kept as frames: node, start, end, step,
    cur, aux."""
    kind, a, b, kid_at, kids, data, seq_ptr, lo, hi = nodes
    e_src, e_dst, y_src, y_lo, y_hi, y_to, r_src, r_rule, r_to = edges
    n_states = 2
    n_e = 0
    n_y = 0
    n_r = 0
    frames[0, 0], frames[0, 1], frames[0, 2], frames[0, 3], frames[0, 4] = root, 0, 1, 0, 0
    top = 1
    while top > 0:
        fr = top - 1
        node = frames[fr, 0]
        k = kind[node]
        start = frames[fr, 1]
        end = frames[fr, 2]
        # a child to build next: (child, child_start, child_end); -1 when none
        child = np.int64(-1)
        c_start = 0
        c_end = 0
        if k == BYTES:
            n = b[node]
            if n == 0:
                e_src[n_e], e_dst[n_e] = start, end
                n_e += 1
            else:
                cur = start
                for i in range(n):
                    if i == n - 1:
                        nxt = end
                    else:
                        nxt = n_states
                        n_states += 1
                    v = data[a[node] + i]
                    y_src[n_y], y_lo[n_y], y_hi[n_y], y_to[n_y] = cur, v, v, nxt
                    n_y += 1
                    cur = nxt
            top -= 1
        elif k == CLASS:
            for q in range(a[node], a[node] + b[node]):
                cur = start
                last = seq_ptr[q + 1] - 1
                for i in range(seq_ptr[q], seq_ptr[q + 1]):
                    if i == last:
                        nxt = end
                    else:
                        nxt = n_states
                        n_states += 1
                    y_src[n_y], y_lo[n_y], y_hi[n_y], y_to[n_y] = cur, lo[i], hi[i], nxt
                    n_y += 1
                    cur = nxt
            top -= 1
        elif k == REF:
            r_src[n_r], r_rule[n_r], r_to[n_r] = start, a[node], end
            n_r += 1
            top -= 1
        elif k == SEQ:
            n = b[node]
            i = frames[fr, 3]
            if n == 0:
                e_src[n_e], e_dst[n_e] = start, end
                n_e += 1
                top -= 1
            elif i == n:
                top -= 1
            else:
                cur = start if i == 0 else frames[fr, 4]
                if i == n - 1:
                    nxt = end
                else:
                    nxt = n_states
                    n_states += 1
                frames[fr, 3] = i + 1
                frames[fr, 4] = nxt
                child, c_start, c_end = kids[a[node] + i], cur, nxt
        elif k == CHOICE:
            i = frames[fr, 3]
            if i == b[node]:
                top -= 1
            else:
                frames[fr, 3] = i + 1
                child, c_start, c_end = kids[a[node] + i], start, end
        else:  # Repeat: a = min, b = max (-1: none)
            item = kids[kid_at[node]]
            lo_n = a[node]
            hi_n = b[node]
            i = frames[fr, 3]
            cur = start if i == 0 else frames[fr, 4]
            if i < lo_n:  # a required copy
                nxt = n_states
                n_states += 1
                frames[fr, 3] = i + 1
                frames[fr, 4] = nxt
                child, c_start, c_end = item, cur, nxt
            elif hi_n < 0 and i == lo_n:  # the loop: cur -> loop, loop -item-> back
                loop = n_states
                back = n_states + 1
                n_states += 2
                e_src[n_e], e_dst[n_e] = cur, loop
                n_e += 1
                frames[fr, 3] = i + 1
                frames[fr, 4] = loop
                frames[fr, 5] = back
                child, c_start, c_end = item, loop, back
            elif hi_n < 0:  # back -> loop, loop -> end
                e_src[n_e], e_dst[n_e] = frames[fr, 5], cur
                e_src[n_e + 1], e_dst[n_e + 1] = cur, end
                n_e += 2
                top -= 1
            elif i < hi_n:  # an optional copy, skippable to the end
                e_src[n_e], e_dst[n_e] = cur, end
                n_e += 1
                nxt = n_states
                n_states += 1
                frames[fr, 3] = i + 1
                frames[fr, 4] = nxt
                child, c_start, c_end = item, cur, nxt
            else:
                e_src[n_e], e_dst[n_e] = cur, end
                n_e += 1
                top -= 1
        if child >= 0:
            frames[top, 0], frames[top, 1], frames[top, 2] = child, c_start, c_end
            frames[top, 3], frames[top, 4] = 0, c_start
            top += 1
    return n_states


@njit(nogil=True, cache=True)
def tail_calls(roots, n_rules, kind, a, b, kid_at, kids):
    """Per rule body (node ``roots[r]``), the rules it may call as its very last step, as
    CSR: offsets [len(roots) + 1] and rule ids, sorted, each once. The last item of a
    Seq that is not the empty string, every alternative of a Choice and the item of a
    ``{0,1}`` / ``{1,1}`` Repeat are in tail position (an over-approximation is harmless:
    the NFA decides each call site). Each node is visited once per rule (stamps)."""
    n_nodes = kind.shape[0]
    stamp = np.full(n_nodes, -1, dtype=np.int64)
    rule_stamp = np.full(n_rules, -1, dtype=np.int64)
    stack = np.empty(max(n_nodes, 1), dtype=np.int64)
    ptr = np.zeros(roots.shape[0] + 1, dtype=np.int64)
    out = np.empty(16, dtype=np.int64)
    n_out = 0
    found = np.empty(max(n_rules, 1), dtype=np.int64)  # one rule's callees, each once
    for r in range(roots.shape[0]):
        n_found = 0
        stack[0] = roots[r]
        stamp[roots[r]] = r
        top = 1
        while top > 0:
            top -= 1
            v = stack[top]
            k = kind[v]
            nxt = np.int64(-1)
            if k == REF:
                rid = a[v]
                if rid >= 0 and rule_stamp[rid] != r:
                    rule_stamp[rid] = r
                    found[n_found] = rid
                    n_found += 1
            elif k == CHOICE:
                for j in range(b[v]):
                    c = kids[a[v] + j]
                    if stamp[c] != r:
                        stamp[c] = r
                        stack[top] = c
                        top += 1
            elif k == SEQ:
                for j in range(b[v] - 1, -1, -1):
                    c = kids[a[v] + j]
                    if not (kind[c] == BYTES and b[c] == 0):  # empty strings are skipped
                        nxt = c
                        break
            elif k == REPEAT and b[v] == 1:
                nxt = kids[kid_at[v]]
            if nxt >= 0 and stamp[nxt] != r:
                stamp[nxt] = r
                stack[top] = nxt
                top += 1
        if n_out + n_found > out.shape[0]:  # grown here, out of the walk's loop
            bigger = np.empty(max(n_out + n_found, 2 * out.shape[0]), dtype=out.dtype)
            bigger[:n_out] = out[:n_out]
            out = bigger
        out[n_out : n_out + n_found] = np.sort(found[:n_found])
        n_out += n_found
        ptr[r + 1] = n_out
    return ptr, out[:n_out].copy()


@njit(nogil=True, cache=True)
def call_patterns(roots, limit, kind, a, b, kid_at, kids, sizes):
    """Per rule body (node ``roots[r]`` of rule ``r``; -1: none), the rules its calls
    name, as the pattern :func:`node_keys` leaves out: a walk of the body's tree
    (children in order, a repetition's item once, none for ``{0,0}``) meets its rule
    references in an order that two bodies with equal keys share, and each gets the rank
    of its rule among the distinct rules the body calls. Bodies with equal keys and equal
    rank sequences have NFAs equal but for a map of their callees that keeps their order
    (the walk meets every call edge's reference), so equal DFAs but for that map (see
    ``_build``'s ``alike_dfa``).

    Returns
    -------
    status : uint8 [n_roots]
        0: done; 1: the body calls its own rule (``r``); 2: not done (no body, an NFA
        of more than ``limit`` states and edges, see :func:`node_sizes`, or a call of an
        undefined rule).
    ptr : int64 [n_roots + 1]; ranks : int32
        Per body the rank of each call met, in walk order.
    rule_ptr : int64 [n_roots + 1]; rules : int32
        Per body the distinct rules it calls, ascending (rank ``k`` calls ``rules[k]``).
    """
    n_roots = roots.shape[0]
    status = np.zeros(n_roots, dtype=np.uint8)
    cap = 0
    for r in range(n_roots):
        v = roots[r]
        if v < 0 or sizes[v, 0] + sizes[v, 1] + sizes[v, 2] + sizes[v, 3] > limit:
            status[r] = 2
        else:
            cap += sizes[v, 3]  # a walk meets no more calls than the NFA has edges
    ptr = np.zeros(n_roots + 1, dtype=np.int64)
    ranks = np.empty(cap, dtype=np.int32)
    rule_ptr = np.zeros(n_roots + 1, dtype=np.int64)
    rules = np.empty(cap, dtype=np.int32)
    stack = np.empty(kids.shape[0] + 2, dtype=np.int64)  # pending siblings of a path
    n_out = 0
    n_rules = 0
    for r in range(n_roots):
        begin = n_out
        if status[r] == 0:
            stack[0] = roots[r]
            top = 1
            while top > 0:
                top -= 1
                v = stack[top]
                k = kind[v]
                if k == REF:
                    if a[v] < 0:
                        status[r] = 2
                        break
                    if a[v] == r:
                        status[r] = 1
                    ranks[n_out] = a[v]  # the rule for now: ranked below
                    n_out += 1
                elif k in (SEQ, CHOICE):
                    for j in range(b[v] - 1, -1, -1):  # pushed last first: met in order
                        stack[top] = kids[a[v] + j]
                        top += 1
                elif k == REPEAT and b[v] != 0:
                    stack[top] = kids[kid_at[v]]
                    top += 1
        if status[r] != 0:
            n_out = begin
        else:
            found = np.unique(ranks[begin:n_out])
            rules[n_rules : n_rules + found.shape[0]] = found
            for i in range(begin, n_out):
                ranks[i] = np.searchsorted(found, ranks[i])
            n_rules += found.shape[0]
        ptr[r + 1] = n_out
        rule_ptr[r + 1] = n_rules
    return status, ptr, ranks[:n_out].copy(), rule_ptr, rules[:n_rules].copy()
