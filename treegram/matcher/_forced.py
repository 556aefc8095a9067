"""Grammar-forced draft nodes: tokens the grammar decides become free draft tokens.

In structured output much of the text is decided by the grammar alone (keys, punctuation,
the rest of an enum value after a unique prefix). At such a position every continuation
starts with the same bytes, the *forced string* (:meth:`GrammarMatcher.find_jump_forward_string`).
These functions turn forced strings into draft tokens:

* :func:`forced_chain` / :func:`batch_forced_chains`: the forced continuation of the
  current position as a chain of tokens (for chain drafters, or no drafter at all);
* :func:`extend_draft_trees`: a drafter's trees (the layouts of
  :meth:`BatchGrammarMatcher.batch_traverse_draft_tree`) extended at their leaves with the
  forced continuation of each leaf, plus the mask of every node, in one call.

**Tokenization.** treegram holds decoded token bytes, not the tokenizer's merge rules, so
the forced bytes are cut by *greedy longest match* over the token trie: at each point the
longest (non-special) token whose bytes are a prefix of the rest of the forced string.
Every such token is accepted by the grammar (its bytes are forced). For byte-level BPE
vocabularies on JSON punctuation and keys this is almost always the tokenizer's own split;
where it is not, the node is a draft the model rejects, which costs that node only
(forced nodes are verified like any other draft).

**Single choices.** Where no byte is forced but the mask holds exactly one token (the stop
token at the end of a document, typically), that token is appended and the walk goes on.

**Which nodes are extended.** Every *effective leaf*: a node the grammar reaches (the root,
or a node whose token every ancestor's mask allows) none of whose drafted children the
grammar accepts, i.e. a real leaf, a node whose drafted children are all invalid, or the
root of a tree with nothing drafted. An inner node with a valid child is not extended: its
forced continuation starts with (a prefix-token of) that child's token anyway. Leaves are
served in depth-first order (children in sibling order) until the request's budget is spent;
``max_per_leaf`` keeps the first leaves from taking all of it.

All functions leave every matcher exactly where it found it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError, BitmaskError, DraftTreeError
from ..kernels import GRAMMARS, MATCHERS, REGISTRY_LOCK, layout
from ..kernels import forced as _forced
from ._batch import BatchGrammarMatcher, _check_distinct, _claiming, _hold, _slot_arrays
from ._bitmask import ContiguousRows, as_bitmask_array
from ._matcher import KEY_COUNTED, GrammarMatcher, _is_token_id
from ._tree_input import as_index_array, check_draft_input, link_arrays

__all__ = [
    "ExtendedTrees",
    "MAX_FORCED_NODES",
    "batch_forced_chains",
    "extend_draft_trees",
    "forced_chain",
]

MAX_FORCED_NODES = 1 << 16
"""Most forced nodes per request one :func:`extend_draft_trees` or
:func:`batch_forced_chains` call may ask for: the outputs are sized by the budget, so a
budget is checked before anything is allocated. :func:`forced_chain` takes any
``max_tokens`` (it works in chunks)."""
# Output bytes one call may allocate for the extended trees (4 int64 arrays [B, N + budget]).
_MAX_TREE_BYTES = 1 << 30
# forced_chain asks for this many tokens at a time
_CHAIN_CHUNK = 256

# Forced bytes examined per round at most (a longer forced string takes further rounds, so
# a long constant costs only the bytes the budget can use).
_FORCED_BYTES = 512

_NO_ROWS = np.zeros((1, 1), dtype=np.int32)

_TRIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# Each thread's kernel scratch, kept between calls (allocating it cost more than the walk of
# a small tree); a kernel call uses its thread's scratch only while it runs.
_SCRATCH = threading.local()


def _scratch(nodes: int, fb_len: int, words: int) -> tuple:
    """This thread's scratch for ``batch_extend``: the walk's stack and had-child flags
    (int32 [2, >= nodes]), forced bytes (uint8 [fb_len]), byte classes seen (bool [256]),
    and a single-choice mask row (int32 [1, words]); grown when too small."""
    s = getattr(_SCRATCH, "arrays", None)
    if s is None or s[0].shape[1] < nodes or s[1].shape[0] < fb_len or s[3].shape[1] != words:
        walk = np.empty((2, max(nodes, 64 if s is None else s[0].shape[1])), dtype=np.int32)
        fb = np.empty(max(fb_len, 0 if s is None else s[1].shape[0]), dtype=np.uint8)
        s = (walk, fb, np.empty(256, dtype=np.bool_), np.empty((1, words), dtype=np.int32))
        _SCRATCH.arrays = s
    return s[0], s[1][:fb_len], s[2], s[3]


def _trie_arrays(sorted_vocab) -> tuple:
    """The trie arrays the kernel walks, and which bytes are single-byte tokens: the plain
    tuple of a ``kernels.layout.TokenTrie``, computed once per vocabulary."""
    cached = _TRIES.get(sorted_vocab)
    if cached is None:
        node_byte, _depth, node_end, _first, tok_lo, tok_hi = sorted_vocab.trie
        single = np.zeros(256, dtype=np.bool_)
        c, n = 0, node_byte.shape[0]
        while c < n:  # the root's children: at most 256 of them
            if tok_lo[c] < tok_hi[c]:
                single[node_byte[c]] = True
            c = int(node_end[c])
        cached = tuple(
            layout.TokenTrie(
                node_byte=node_byte,
                node_end=node_end,
                node_tok_lo=tok_lo,
                node_tok_hi=tok_hi,
                single=single,
                max_len=int(sorted_vocab.max_len),
            )
        )
        _TRIES[sorted_vocab] = cached
    return cached


@dataclass(frozen=True, eq=False)
class ExtendedTrees:
    """Draft trees extended with grammar-forced nodes (the result of
    :func:`extend_draft_trees`).

    Attributes
    ----------
    draft_tokens : int64 ndarray [B, M]
        Node tokens; nodes ``N .. N + num_forced[i] - 1`` of request ``i`` are forced ones
        (``M = N + max budget``); unused slots hold token 0 and are isolated.
    next_token, next_sibling : int64 ndarray [B, M]
        First-child / next-sibling links of the extended trees (siblings in increasing
        index order); exactly ``treegram.spec.links_from_parents(parents)``.
    parents : int64 ndarray [B, M]
        Parent of each node (-1 for roots and for nodes outside the root's tree); every
        forced node's parent has a smaller index. Feed it to
        :func:`treegram.spec.tree_mask_from_parents` / ``positions_from_parents``.
    num_forced : int64 ndarray [B]
        Forced nodes appended per request.
    num_input_nodes : int
        N, the nodes per request of the input trees.
    """

    draft_tokens: np.ndarray
    next_token: np.ndarray
    next_sibling: np.ndarray
    parents: np.ndarray
    num_forced: np.ndarray
    num_input_nodes: int

    @property
    def num_nodes(self) -> int:
        """M: nodes per request of the extended arrays (rows per request of the masks)."""
        return int(self.draft_tokens.shape[1])


def _budgets(budget, b: int) -> tuple[np.ndarray, int]:
    """The budget per request as int64 [B], and the largest."""
    if _is_token_id(budget):
        if not 0 <= budget <= MAX_FORCED_NODES:
            raise ArgumentError(
                f"budget must be in [0, {MAX_FORCED_NODES}] (MAX_FORCED_NODES), got {budget}"
            )
        most = int(budget)
        arr = np.empty(b, dtype=np.int64)
        arr.fill(most)
        return arr, most
    arr = as_index_array(budget, "budget")
    if arr.shape != (b,):
        raise ArgumentError(f"budget must be an int or have shape ({b},), got {arr.shape}")
    if b and (arr.min() < 0 or arr.max() > MAX_FORCED_NODES):
        bad = int(arr[(arr < 0) | (arr > MAX_FORCED_NODES)][0])
        raise ArgumentError(
            f"budget must be in [0, {MAX_FORCED_NODES}] (MAX_FORCED_NODES), got {bad}"
        )
    return arr, int(arr.max(initial=0))


def _per_leaf(max_per_leaf, most: int) -> int:
    if max_per_leaf is None:
        return most
    if not _is_token_id(max_per_leaf) or max_per_leaf < 1:
        raise ArgumentError(f"max_per_leaf must be an int >= 1 or None, got {max_per_leaf!r}")
    return int(max_per_leaf)


def _check_one_vocabulary(matchers: tuple) -> None:
    """Forced tokens are looked up in one vocabulary's trie: every matcher must use the same
    token bytes (a batch only checks that vocabulary sizes agree)."""
    info0 = matchers[0]._compiled.tokenizer_info
    if all(m._compiled.tokenizer_info is info0 for m in matchers):
        return  # the common case: one TokenizerInfo object
    for i, m in enumerate(matchers):
        info = m._compiled.tokenizer_info
        if info is not info0 and info.fingerprint != info0.fingerprint:
            raise ArgumentError(
                f"matchers[{i}] uses another tokenizer than matchers[0] (fingerprints "
                f"{info.fingerprint[:12]} and {info0.fingerprint[:12]}): forced tokens need "
                "one vocabulary"
            )


@_claiming(0)
def extend_draft_trees(
    matchers: Sequence[GrammarMatcher],
    retrieve_next_token,
    retrieve_next_sibling,
    draft_tokens,
    *,
    budget=8,
    token_bitmask=None,
    root_positions=None,
    max_per_leaf: int | None = None,
    batch: BatchGrammarMatcher | None = None,
) -> ExtendedTrees:
    """Extend every request's draft tree with its grammar-forced continuation.

    One kernel call for the batch (split across ``batch``'s worker pool when it is large):
    each tree is walked like :meth:`BatchGrammarMatcher.batch_traverse_draft_tree`, and each
    effective leaf (see the module notes) gets the forced continuation of its position as
    a chain of new nodes, appended after the input nodes.

    Parameters
    ----------
    matchers : list of GrammarMatcher, length B
        One per request, at the position of the root (the last verified token); one
        vocabulary for all. A stopped matcher gets no forced node and zero rows.
    retrieve_next_token, retrieve_next_sibling : int [N] (shared) or [B, N]
        First child / next sibling of each input node, -1 for none.
    draft_tokens : int [B, N]
        Token of each input node (the root's is not read).
    budget : int or int [B], default 8
        Most forced nodes per request. The outputs have ``M = N + max(budget)`` nodes per
        request.
    token_bitmask : int32 [>= B * M, ceil(vocab_size / 32)], optional
        If given, row ``i * M + j`` receives the mask of node ``j`` of request ``i`` of the
        *extended* tree (all zeros for nodes the grammar does not reach), exactly what
        ``batch_traverse_draft_tree`` on the extended trees would write.
    root_positions : int [B], optional
        Root node of each request (default 0).
    max_per_leaf : int, optional
        Most forced nodes below one leaf (default: the budget).
    batch : BatchGrammarMatcher, optional
        Whose worker pool runs large batches (default: inline, in the calling thread).

    Returns
    -------
    ExtendedTrees

    Raises
    ------
    ArgumentError, DraftTreeError, InvalidTokenIdError, BitmaskError
        Malformed input (as for ``batch_traverse_draft_tree``), a negative budget, a bad
        ``max_per_leaf``, matchers of different tokenizers, a matcher whose grammar has
        token budgets (``[max_tokens=N]``, not applied here), or a ``batch`` that is not a
        BatchGrammarMatcher. Everything is checked before any work starts; nothing is
        changed then.
    MatcherStateError
        A matcher is in use by another thread.

    Notes
    -----
    The kernel releases the GIL. Each matcher is claimed for the call (as by the batch
    calls), so concurrent calls on *different* matchers are safe; the matchers end exactly
    where they started, also when the call raises.
    """
    matchers = _hold(matchers)
    if batch is not None and not isinstance(batch, BatchGrammarMatcher):
        raise ArgumentError(
            f"batch must be a BatchGrammarMatcher or None, got {type(batch).__name__}"
        )
    gslots, mslots, vocab, flags = _slot_arrays(matchers)
    b = len(mslots)
    draft = as_index_array(draft_tokens, "draft_tokens")
    if draft.ndim != 2 or draft.shape[0] != b or draft.shape[1] < 1:
        raise DraftTreeError(f"draft_tokens must have shape ({b}, N >= 1), got {draft.shape}")
    n = draft.shape[1]
    next_token, next_sibling = link_arrays(retrieve_next_token, retrieve_next_sibling, b, n)
    _check_distinct(mslots)
    if root_positions is None:
        roots = np.zeros(b, dtype=np.int64)
    else:
        roots = as_index_array(root_positions, "root_positions")
        if roots.shape != (b,):
            raise ArgumentError(f"root_positions must have shape ({b},), got {roots.shape}")
    budgets, most = _budgets(budget, b)
    per_leaf = _per_leaf(max_per_leaf, most)
    if b:
        check_draft_input(
            next_token,
            next_sibling,
            roots,
            draft,
            vocab,
            scratch=None if batch is None else batch._check_scratch(n),
        )
        _check_one_vocabulary(matchers)
        budgeted = [] if flags is None else np.flatnonzero(flags & (KEY_COUNTED >> 61)).tolist()
        if budgeted:
            # the forced-node kernels read the chart without closing spent budgets
            raise ArgumentError(
                f"matchers[{budgeted[0]}]'s grammar has token budgets ([max_tokens=N]), which "
                "grammar-forced draft nodes do not apply; use traverse_draft_tree"
            )
    m = n + most
    if 32 * b * m > _MAX_TREE_BYTES:
        raise ArgumentError(
            f"the extended trees would need {32 * b * m} bytes ({b} requests of N + budget = "
            f"{m} nodes), more than {_MAX_TREE_BYTES}: lower the budget or split the batch"
        )
    words = (vocab + 31) // 32
    with_masks = token_bitmask is not None
    if with_masks:
        out = (
            as_bitmask_array(token_bitmask, vocab_size=vocab, name="token_bitmask")
            if batch is None
            else batch._views.view(token_bitmask, vocab, "token_bitmask")
        )
        if out.shape[0] < b * m:
            raise BitmaskError(
                f"token_bitmask needs B * M = {b} * {m} = {b * m} rows (M = N + max budget), "
                f"got {out.shape[0]}"
            )
    else:
        out = _NO_ROWS  # not touched without masks
    # One buffer for the four outputs (draft tokens, next token, next sibling, parents):
    # one allocation and one kernel argument instead of four.
    trees = np.empty((4, b, m), dtype=np.int64)
    result = np.zeros(b, dtype=np.int64)
    if b == 0:
        return ExtendedTrees(trees[0], trees[1], trees[2], trees[3], result, n)
    trie = _trie_arrays(matchers[0]._compiled.tokenizer_info.sorted_vocab)
    max_len = trie[-1]  # TokenTrie.max_len
    # Forced bytes looked at per round: enough for the budget, and at least two tokens' worth
    # (a round leaves its last max_len bytes to the next one when the scratch cuts it).
    fb_len = max(2 * max_len + 1, min(_FORCED_BYTES, most * max_len + 1))
    words_per_item = m * (words if with_masks else 1)
    # rows apart in memory are written through a contiguous copy (see ContiguousRows)
    with ContiguousRows(out, b * m if with_masks else 0) as out:
        tree = (next_token, next_sibling, draft)
        outputs = (trees, out, with_masks)
        jobs = (roots, budgets, per_leaf, result)

        def run(start: int, stop: int) -> int:  # under the registry read lock
            # the scratch's last array is the single-choice mask row (used without masks, rarely)
            scratch = _scratch(m + 1, fb_len, max(words, 1))
            return _forced.batch_extend(
                GRAMMARS.table,
                MATCHERS.table,
                gslots,
                mslots,
                trie,
                tree,
                outputs,
                jobs,
                vocab,
                scratch,
                start,
                stop,
            )

        if batch is None or batch._inline(b, words_per_item):
            REGISTRY_LOCK.acquire_read()
            try:
                pending = run(0, b)
            finally:
                REGISTRY_LOCK.release_read()
        else:
            batch._run(run, b, words_per_item)
            pending = int((result < 0).any())
        if pending:
            # Requests that asked for room or classification: resolve, rerun one by one.
            for k in np.flatnonzero(result < 0):
                k = int(k)
                while result[k] < 0:
                    matchers[k]._resolve(int(result[k]), None)
                    REGISTRY_LOCK.acquire_read()
                    try:
                        run(k, k + 1)
                    finally:
                        REGISTRY_LOCK.release_read()
    return ExtendedTrees(trees[0], trees[1], trees[2], trees[3], result, n)


def batch_forced_chains(
    matchers: Sequence[GrammarMatcher],
    max_tokens,
    *,
    batch: BatchGrammarMatcher | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The forced continuation of every matcher's position, as token chains.

    Parameters
    ----------
    matchers : list of GrammarMatcher, length B
    max_tokens : int or int [B]
        Most tokens per chain.
    batch : BatchGrammarMatcher, optional
        Whose worker pool runs large batches.

    Returns
    -------
    tokens : int64 ndarray [B, max(max_tokens)]
        Chain ``i`` in ``tokens[i, :counts[i]]``; -1 after it.
    counts : int64 ndarray [B]

    Raises
    ------
    ArgumentError
        Bad matchers (one listed twice included) or a negative ``max_tokens``.
    """
    held = _hold(matchers)
    ext = extend_draft_trees(
        held,
        np.full(1, -1, dtype=np.int64),
        np.full(1, -1, dtype=np.int64),
        np.zeros((len(held), 1), dtype=np.int64),
        budget=_budgets_arg(max_tokens),
        batch=batch,
    )
    tokens = ext.draft_tokens[:, 1:].copy()
    counts = ext.num_forced.copy()
    tokens[np.arange(tokens.shape[1])[None, :] >= counts[:, None]] = -1
    return tokens, counts


def _budgets_arg(max_tokens):
    if _is_token_id(max_tokens) and not 0 <= max_tokens <= MAX_FORCED_NODES:
        raise ArgumentError(
            f"max_tokens must be in [0, {MAX_FORCED_NODES}] (MAX_FORCED_NODES), got {max_tokens}"
        )
    return max_tokens


def forced_chain(matcher: GrammarMatcher, max_tokens: int = 16) -> list[int]:
    """The grammar-forced continuation of ``matcher``'s position, as at most ``max_tokens``
    tokens (greedy longest match over the forced string, then single-choice tokens; see the
    module notes). The matcher is left where it was.

    Accepting the returned tokens one by one always succeeds; their bytes are a prefix of
    :meth:`GrammarMatcher.find_jump_forward_string` followed (after it is used up) by the
    forced strings of the positions reached.

    Raises
    ------
    ArgumentError
        ``matcher`` is not a GrammarMatcher or ``max_tokens`` is not an int >= 0.
    """
    if not isinstance(matcher, GrammarMatcher):
        raise ArgumentError(f"matcher must be a GrammarMatcher, got {type(matcher).__name__}")
    if not _is_token_id(max_tokens) or max_tokens < 0:
        raise ArgumentError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
    # In chunks, so that a large max_tokens allocates for the chain there is, not for the
    # bound: a chunk that comes back full goes on from where it ended, on a fork.
    chain: list[int] = []
    at = matcher
    while len(chain) < max_tokens:
        want = min(int(max_tokens) - len(chain), _CHAIN_CHUNK)
        tokens, counts = batch_forced_chains([at], want)
        chunk = [int(t) for t in tokens[0, : int(counts[0])]]
        chain.extend(chunk)
        if len(chunk) < want:
            break
        if at is matcher:
            at = matcher.fork()
        for t in chunk:
            at.accept_token(t)
    return chain
