"""Verify draft trees against target logits under a grammar (the engine's verify step).

One decoding step of grammar-constrained tree speculation (see docs/engine_integration.md):

1. ``BatchGrammarMatcher.batch_traverse_draft_tree`` fills the mask of every node of every
   request's draft tree (row ``b * N + j`` is node ``j`` of request ``b``);
2. the target model scores every node: ``logits[b * N + j]`` is its distribution of the
   token that follows node ``j``;
3. :func:`verify_tree` masks the logits with those rows, picks one target token per node
   (greedy argmax or a seeded sample), walks each tree from its root along the children
   whose draft token equals the target token, and advances each matcher by exactly the
   tokens it accepted.

The path walk follows SGLang's ``verify_tree_greedy``: at the current node (starting at
the root), the target token is compared with the draft tokens of the node's children in
sibling order; the first child that matches is accepted and becomes the current node;
when none matches, the walk stops and the target token of the last accepted node is the
*bonus* token. Every emitted token is therefore the target token of one node on the path:
``accepted_tokens[b][k]`` is the target token of node ``accepted_nodes[b][k]``, and
``accepted_nodes[b][0]`` is the root (SGLang's ``accept_index`` / ``predict`` pair).

torch is imported when :func:`verify_tree` runs; the path walk is a small numba kernel over
host arrays (one device-to-host copy of ``B * N`` target tokens per call).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from treegram import kernels
from treegram.errors import ArgumentError, BitmaskError, DraftTreeError, MatcherStateError
from treegram.matcher import as_index_array, check_draft_trees, link_arrays
from treegram.serving._apply import _torch, apply_token_bitmask_inplace

__all__ = ["TreeVerifyResult", "verify_tree"]

_MODES = ("greedy", "sample")
_FLOAT_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class TreeVerifyResult:
    """The outcome of :func:`verify_tree` for a batch of ``B`` draft trees of ``N`` nodes.

    Attributes
    ----------
    accepted_tokens : list of list of int, length B
        The tokens each request emits this step, in order: the draft tokens of the
        accepted nodes below the root, then the bonus token. Cut after a stop token (or
        where the matcher terminated); empty when the root's row allowed no token or the
        matcher had already terminated.
    accepted_nodes : list of list of int, length B
        ``accepted_nodes[b][k]`` is the node (0..N-1) whose target token is
        ``accepted_tokens[b][k]``: the root first, then the accepted children. The draft
        token of ``accepted_nodes[b][k + 1]`` is ``accepted_tokens[b][k]``, so these are the
        nodes whose KV-cache entries the engine keeps.
    accept_lengths : torch.Tensor, int64, shape (B,), CPU
        ``len(accepted_tokens[b])``. SGLang's ``accept_length`` (accepted draft tokens,
        bonus excluded) is ``accept_lengths - 1`` where that is >= 0.
    accept_index : torch.Tensor, int64, shape (B, N), CPU
        ``b * N + accepted_nodes[b][k]`` in column ``k``, -1 after the path (flat logits
        rows, as SGLang's ``accept_index``).
    terminated : torch.Tensor, bool, shape (B,), CPU
        Whether the request ended in this step (its last emitted token is a stop token,
        or its matcher is terminated after the advance) or had already ended.
    target_tokens : torch.Tensor, int64, shape (B * N,), on the logits' device
        The target token picked at every node (argmax or sample of the masked logits),
        -1 where the node's row allows no token (e.g. nodes the traversal never reached).
    """

    accepted_tokens: list[list[int]]
    accepted_nodes: list[list[int]]
    accept_lengths: Any
    accept_index: Any
    terminated: Any
    target_tokens: Any


# ------------------------------------------------------------------------- validation


def _check_logits(torch: Any, logits: Any) -> Any:
    if not isinstance(logits, torch.Tensor):
        raise ArgumentError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.ndim != 2:
        raise ArgumentError(f"logits must have shape (B * N, V), got {tuple(logits.shape)}")
    if str(logits.dtype).removeprefix("torch.") not in _FLOAT_DTYPES:
        raise ArgumentError(f"logits must be float32, float16 or bfloat16, got {logits.dtype}")
    return logits


def _tree_arrays(
    draft_tokens: Any,
    next_token: Any,
    next_sibling: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated ``draft [B, N]`` and links ``[T, N]`` (T in {1, B}) as int64 arrays."""
    draft = as_index_array(draft_tokens, "draft_tokens")
    if draft.ndim == 1:
        draft = draft[None]
    if draft.ndim != 2 or draft.shape[1] == 0:
        raise DraftTreeError(f"draft_tokens must have shape (B, N) with N >= 1, got {draft.shape}")
    b, n = draft.shape
    nt, ns = link_arrays(next_token, next_sibling, b, n, ("next_token", "next_sibling"))
    return draft, nt, ns


def _roots(root_positions: Any, b: int) -> np.ndarray:
    if root_positions is None:
        return np.zeros(b, dtype=np.int64)
    roots = as_index_array(root_positions, "root_positions")
    if roots.ndim != 1 or roots.shape[0] != b:
        raise DraftTreeError(f"root_positions must have shape ({b},), got {roots.shape}")
    return roots


def _check_matchers(matchers: Any, b: int) -> list | None:
    if matchers is None:
        return None
    if not isinstance(matchers, Sequence) or isinstance(matchers, (str, bytes)):
        raise ArgumentError(
            f"matchers must be a sequence of GrammarMatcher, got {type(matchers).__name__}"
        )
    matchers = list(matchers)
    if len(matchers) != b:
        raise ArgumentError(
            f"matchers must have one matcher per request ({b}), got {len(matchers)}"
        )
    for i, m in enumerate(matchers):
        for attr in ("accept_token", "rollback", "is_terminated", "stop_token_ids"):
            if not hasattr(m, attr):
                raise ArgumentError(
                    f"matchers[{i}] ({type(m).__name__}) has no {attr}: expected a "
                    "treegram.GrammarMatcher"
                )
    return matchers


def _stop_table(stop_token_ids: Any, matchers: list | None, b: int) -> np.ndarray:
    """int64 [B, S] stop ids per request, -1 padded."""
    if stop_token_ids is not None:
        if isinstance(stop_token_ids, numbers.Integral):
            stop_token_ids = [stop_token_ids]
        ids = as_index_array(list(stop_token_ids), "stop_token_ids")
        if ids.ndim != 1 or (ids.size and ids.min() < 0):
            raise ArgumentError(
                f"stop_token_ids must be a list of token ids >= 0, got {stop_token_ids!r}"
            )
        return np.ascontiguousarray(np.broadcast_to(ids, (b, ids.shape[0])))
    if matchers is None:
        return np.full((b, 0), -1, dtype=np.int64)
    per = [list(m.stop_token_ids) for m in matchers]
    width = max((len(s) for s in per), default=0)
    table = np.full((b, width), -1, dtype=np.int64)
    for i, s in enumerate(per):
        table[i, : len(s)] = s
    return table


def _temperatures(torch: Any, temperature: Any, b: int, n: int, device: Any) -> Any:
    """Per-row temperatures as a float32 tensor (B * N, 1), or a Python float."""
    if isinstance(temperature, torch.Tensor):
        if temperature.ndim != 1 or temperature.shape[0] != b:
            raise ArgumentError(
                f"temperature must be a float or a tensor of shape ({b},), got "
                f"{tuple(temperature.shape)}"
            )
        temps = temperature.detach().to(device=device, dtype=torch.float32)
        if not bool((temps > 0).all()) or not bool(torch.isfinite(temps).all()):
            raise ArgumentError(f"temperature must be finite and > 0, got {temperature}")
        return temps.repeat_interleave(n).unsqueeze(1)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not math.isfinite(temperature)
        or temperature <= 0
    ):
        raise ArgumentError(
            f"temperature must be a finite number > 0 (use mode='greedy' for temperature 0), "
            f"got {temperature!r}"
        )
    return float(temperature)


# ------------------------------------------------------------------------------- API


def verify_tree(
    logits: Any,
    draft_tokens: Any,
    next_token: Any,
    next_sibling: Any,
    bitmask: Any,
    matchers: Sequence | None = None,
    *,
    mode: str = "greedy",
    generator: Any = None,
    temperature: Any = 1.0,
    advance: bool = True,
    root_positions: Any = None,
    stop_token_ids: Any = None,
    inplace: bool = False,
) -> TreeVerifyResult:
    """Pick the accepted path of every draft tree under the grammar; advance the matchers.

    Parameters
    ----------
    logits : torch.Tensor, float32/float16/bfloat16, shape (B * N, V)
        Target-model logits; row ``b * N + j`` scores the token after node ``j`` of request
        ``b``. Any device. Not modified unless ``inplace``.
    draft_tokens : int array, shape (B, N) (or (N,) for one request)
        Token of every node (numpy or CPU torch). The root's token is the last verified
        token, already accepted by the matcher; it is not emitted again.
    next_token, next_sibling : int array, shape (N,) (shared) or (B, N)
        First child / next sibling of every node, -1 for none (SGLang's
        ``retrive_next_token`` / ``retrive_next_sibling``; see
        :func:`treegram.spec.links_from_tree_mask`).
    bitmask : torch.Tensor or numpy.ndarray, int32, shape (B * N, W), or None
        The grammar's allowed-token rows, as ``batch_traverse_draft_tree`` fills them
        (unreached nodes are all zero). Moved to the logits' device if needed. Tokens at or
        past ``32 * W`` count as disallowed. None: no grammar masking.
    matchers : sequence of GrammarMatcher, length B, optional
        Each request's matcher, in the state the traversal saw (root token accepted).
    mode : {"greedy", "sample"}, keyword-only
        ``"greedy"``: the target token of a node is the argmax of its masked logits (the
        lowest index among ties). ``"sample"``: it is drawn from
        ``softmax(masked_logits / temperature)`` with ``torch.multinomial`` (see Notes).
    generator : torch.Generator, optional, keyword-only
        Random source for ``"sample"`` (on the logits' device); a fixed seed gives the same
        result on the same device.
    temperature : float or torch.Tensor of shape (B,), default 1.0, keyword-only
        Sampling temperature (> 0), per request if a tensor. Ignored in greedy mode.
    advance : bool, default True, keyword-only
        Accept every emitted token into its matcher (once each, in order).
    root_positions : int array, shape (B,), optional, keyword-only
        Root node of every tree (default 0).
    stop_token_ids : int or sequence of int, optional, keyword-only
        Stop tokens for every request, instead of each matcher's ``stop_token_ids``
        (without matchers and without this argument no token stops a path).
    inplace : bool, default False, keyword-only
        Mask ``logits`` itself (disallowed tokens become ``-inf``, as the engines do before
        sampling) instead of a copy: saves a ``B * N * V`` copy on large vocabularies.

    Returns
    -------
    TreeVerifyResult
        The emitted tokens, path nodes, lengths, flat ``accept_index`` and termination
        flags of every request (see :class:`TreeVerifyResult`).

    Raises
    ------
    ArgumentError
        ``logits`` is not a 2-D float tensor with ``B * N`` rows; bad ``mode``,
        ``temperature``, ``generator``, ``matchers`` or ``stop_token_ids``.
    DraftTreeError
        ``draft_tokens``, links or roots have the wrong dtype or shape, or the links do not
        form a tree from each root.
    BitmaskError
        ``bitmask`` is not int32 with ``B * N`` rows (or is rejected by
        :func:`~treegram.serving.apply_token_bitmask_inplace`).
    MatcherStateError
        A matcher rejected an emitted token (the bitmask did not come from these matchers'
        current state). Every matcher is rolled back to where it was before raising.

    Notes
    -----
    A path stops after the first stop token it emits: nothing after it is emitted or
    accepted, and there is no bonus token after it. A request whose matcher had already
    terminated emits nothing. During the advance, a matcher that terminates (e.g. with
    ``terminate_without_stop_token``) cuts its path at that token.

    The advance is all-or-nothing: a rejected token rolls every matcher back before
    :class:`~treegram.errors.MatcherStateError` is raised. All validation precedes any
    matcher change.

    Sampling mode draws one token per node from the target distribution, all rows at once
    (one ``torch.multinomial`` call), and accepts the child whose draft token equals it
    ("sample, then match"). Every emitted token is thus an exact sample of the masked
    target distribution given its prefix, so the output is distributed as plain sampling
    from the target; but it is *not* SGLang's tree speculative (rejection) sampling, which
    uses the draft probabilities and accepts more often. The random numbers consumed do
    not depend on the path, so the result is reproducible for a seeded ``generator``.

    Rows whose masked logits are all ``-inf`` (nodes the traversal never reached, or a
    matcher that allows nothing) have no target token (-1): a path ends there without a
    bonus token.

    Not thread-safe for the same matchers; different batches of matchers may be verified
    concurrently.
    """
    torch = _torch()
    logits = _check_logits(torch, logits)
    if mode not in _MODES:
        raise ArgumentError(f"mode must be one of {_MODES}, got {mode!r}")
    for flag, value in (("advance", advance), ("inplace", inplace)):
        if not isinstance(value, (bool, np.bool_)):
            raise ArgumentError(f"{flag} must be a bool, got {type(value).__name__}")
    draft, links_next, links_sibling = _tree_arrays(draft_tokens, next_token, next_sibling)
    b, n = draft.shape
    rows = b * n
    if logits.shape[0] != rows:
        raise ArgumentError(
            f"logits must have B * N = {b} * {n} = {rows} rows, got {logits.shape[0]}"
        )
    roots = _roots(root_positions, b)
    check_draft_trees(links_next, links_sibling, roots, names=("next_token", "next_sibling"))
    matchers = _check_matchers(matchers, b)
    stops = _stop_table(stop_token_ids, matchers, b)
    temps = None
    if mode == "sample":
        temps = _temperatures(torch, temperature, b, n, logits.device)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ArgumentError(
                f"generator must be a torch.Generator, got {type(generator).__name__}"
            )
    if bitmask is not None:
        if isinstance(bitmask, np.ndarray):
            bitmask = torch.from_numpy(bitmask)
        if not isinstance(bitmask, torch.Tensor):
            raise BitmaskError(
                f"bitmask must be a torch.Tensor or numpy.ndarray, got {type(bitmask).__name__}"
            )
        if bitmask.dtype != torch.int32 or bitmask.ndim != 2 or bitmask.shape[0] != rows:
            raise BitmaskError(
                f"bitmask must be int32 of shape (B * N = {rows}, W), got {bitmask.dtype} "
                f"{tuple(bitmask.shape)}"
            )

    # ---- target token of every node (vectorised over all B * N rows)
    n_vocab = logits.shape[1]
    masked = logits.detach() if inplace else logits.detach().clone()
    if bitmask is not None:
        if bitmask.device != logits.device:
            bitmask = bitmask.to(logits.device)
        covered = min(n_vocab, 32 * bitmask.shape[1])
        apply_token_bitmask_inplace(masked, bitmask, vocab_size=covered)
        if covered < n_vocab:
            masked[:, covered:] = -math.inf
    if rows == 0 or n_vocab == 0:
        target = torch.full((rows,), -1, dtype=torch.int64, device=logits.device)
    else:
        best = masked.argmax(dim=1)
        valid = masked.gather(1, best.unsqueeze(1)).squeeze(1) > -math.inf
        if mode == "sample":
            probs = torch.softmax(masked.float() / temps, dim=1)
            probs[~valid] = 1.0  # rows with no allowed token: any draw, discarded below
            best = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        target = torch.where(valid, best, torch.full_like(best, -1))
    target_host = np.ascontiguousarray(target.cpu().numpy(), dtype=np.int64)

    # ---- path walk (host kernel)
    nodes = np.full((b, n), -1, dtype=np.int64)
    tokens = np.full((b, n), -1, dtype=np.int64)
    lengths = np.zeros(b, dtype=np.int64)
    ended = np.zeros(b, dtype=np.bool_)
    kernels.tree.walk_target_paths(
        links_next, links_sibling, draft, target_host, roots, stops, nodes, tokens, lengths, ended
    )
    if matchers is not None:
        for i, m in enumerate(matchers):
            if m.is_terminated():
                lengths[i] = 0
                ended[i] = True
    accepted_tokens = [tokens[i, : lengths[i]].tolist() for i in range(b)]

    # ---- advance (all or nothing)
    if matchers is not None and advance:
        _advance(matchers, accepted_tokens, lengths, ended)
    accepted_nodes = [nodes[i, : lengths[i]].tolist() for i in range(b)]
    accept_index = np.full((b, n), -1, dtype=np.int64)
    for i in range(b):
        accept_index[i, : lengths[i]] = nodes[i, : lengths[i]] + i * n
    return TreeVerifyResult(
        accepted_tokens=accepted_tokens,
        accepted_nodes=accepted_nodes,
        accept_lengths=torch.from_numpy(lengths),
        accept_index=torch.from_numpy(accept_index),
        terminated=torch.from_numpy(ended),
        target_tokens=target,
    )


def _advance(
    matchers: list, accepted_tokens: list[list[int]], lengths: np.ndarray, ended: np.ndarray
) -> None:
    """Accept every request's tokens into its matcher, once each; cut a path where its
    matcher terminates. On a rejected token, roll every matcher back and raise."""
    done: list[tuple[Any, int]] = []
    for i, (m, toks) in enumerate(zip(matchers, accepted_tokens, strict=True)):
        count = 0
        for k, tok in enumerate(toks):
            if not m.accept_token(tok):
                for prev, steps in done + [(m, count)]:
                    if steps:
                        prev.rollback(steps)
                raise MatcherStateError(
                    f"matcher {i} rejected token {tok} at position {k} of its accepted path "
                    f"{toks}: the bitmask does not match the matchers' state (every matcher "
                    "was rolled back)"
                )
            count += 1
            if m.is_terminated():
                break
        if count < len(toks):
            del toks[count:]
            lengths[i] = count
        if m.is_terminated():
            ended[i] = True
        done.append((m, count))
