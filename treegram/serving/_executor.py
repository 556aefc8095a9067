"""StepExecutor: the CUDA-graph-capturable grammar step with a deferred matcher advance.

A speculative-decoding engine that captures its decoding step in a CUDA graph cannot call
the grammar from Python in the middle of the graph. The executor splits the grammar work of
a step into two *host functions* that a launcher enqueues on a stream (and that a graph
capture turns into host nodes), plus a host-side queue that feeds them:

1. **enqueue** (host thread, before the step is launched or replayed):
   ``executor.enqueue(StepBatch.tree(...))`` validates a step's inputs and appends them to a
   FIFO queue; it returns the step's :class:`StepCompletion`.
2. **fetch** (host function 1): pops the oldest queued batch and makes it the current one.
3. **build** (host function 2):

   a. the **deferred advance**: every earlier step that was built but not yet advanced
      (normally just the previous one) is advanced, in order, by the tokens the engine
      accepted for it after verification (:meth:`StepExecutor.set_accepted`): only the
      requests whose ``advance_mask`` entry is true (chunked prefill: a request still
      prefilling does not advance), never a token after a stop token (``terminated_at``
      records where a matcher terminated), never a token after one the grammar rejected
      (``rejected_at``);
   b. the **fill**: the masks of this step go into the executor's host buffer (pinned when
      CUDA is used): trees through :meth:`BatchGrammarMatcher.batch_traverse_draft_tree`,
      chains as a chain-shaped tree, single next-token steps through
      :meth:`BatchGrammarMatcher.batch_fill_next_token_bitmask`.

4. **copy** (a stream operation, not a host function, since host functions may not call
   CUDA): the launcher copies the whole host buffer to the device buffer on its side stream;
   the engine's stream waits for it before applying the masks.

Every step has a :class:`StepCompletion` holding a lock. Exactly one of {the next step's
build, a host-side :meth:`StepExecutor.advance_now` call} performs the advance of a step:
whoever takes the lock first advances the matchers while holding it, the other finds the
step advanced and does nothing (it waits for the lock, so when it returns the matchers are
advanced). Steps are always advanced in order: advancing step ``k`` first advances every
earlier pending step. A step is never advanced twice, even when its advance failed half-way
(the error is kept on the completion and re-raised by ``advance_now``).

The launcher is injectable (:mod:`treegram.serving._launcher`): :class:`CudaHostLauncher`
uses ``cudaLaunchHostFunc``; :class:`EagerLauncher` runs the same fetch and build
synchronously in the calling thread, so the state machine runs (and is tested) on CPU, and
:class:`EagerStepExecutor` is the executor for machines without CUDA.

Typical step (see ``docs/step_executor.md``)::

    ex = StepExecutor(vocab_size, max_rows=B * N)
    done = ex.enqueue(StepBatch.tree(matchers, draft_tokens, next_token, next_sibling))
    ex.launch()                       # or replay a graph that captured ex.launch()
    apply_token_bitmask_inplace(logits, ex.device_bitmask[: B * N])
    ...verify...
    ex.set_accepted(done.step_id, accepted_tokens_per_request, advance_mask)
    # the next step's build advances the matchers; at request end call ex.advance_now(done)

When a build runs before the previous step's accepted tokens were set, it waits up to
``accepted_timeout`` seconds for them (CUDA: the host thread sets them while the stream
waits), then asks the previous batch's ``read_accepted`` callable if it has one; otherwise
the build fails: its rows are set to all-allowed, the error is kept on its completion, and
the previous step stays pending (a later build or ``advance_now`` advances it).

Rows of requests whose matcher has terminated (or whose advance stopped at a rejected
token) are set to all-allowed (-1, the value xgrammar's ``allocate_token_bitmask`` starts
with), so applying them is a no-op instead of a row of -inf.

CUDA-graph capture: the engine's warm-up and capture run ``launch()`` with dummy batches;
afterwards call :meth:`StepExecutor.reset` (with the device idle) to drop queued, current
and pending steps without advancing them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from treegram._checks import is_int, nonnegative_int
from treegram.errors import (
    ArgumentError,
    BitmaskError,
    DraftTreeError,
    InvalidTokenIdError,
    MatcherStateError,
)
from treegram.matcher import (
    BatchGrammarMatcher,
    GrammarMatcher,
    as_index_array,
    check_draft_trees,
    link_arrays,
)
from treegram.serving._launcher import EagerLauncher, _torch, default_launcher

__all__ = [
    "StepBatch",
    "StepCompletion",
    "StepExecutor",
    "EagerStepExecutor",
    "AcceptedTokensMissingError",
]

_KINDS = ("tree", "chain", "next")


class AcceptedTokensMissingError(MatcherStateError):
    """A step had to be advanced but the engine never gave its accepted tokens."""


# --------------------------------------------------------------------------- step batches


@dataclass(frozen=True, eq=False)
class StepBatch:
    """The grammar work of one decoding step. Build one with :meth:`tree`, :meth:`chain` or
    :meth:`plain`.

    Attributes
    ----------
    kind : {"tree", "chain", "next"}
    matchers : tuple of GrammarMatcher, length B
    draft_tokens : int64 ndarray [B, N] or None
        Tree form of the drafts (chains are stored as chain-shaped trees).
    next_token, next_sibling : int64 ndarray [N] or [B, N], or None
        Tree links (see :meth:`GrammarMatcher.traverse_draft_tree`).
    root_positions : int64 ndarray [B] or None
    row_offset : int
        First row of the executor's buffers that this step writes.
    read_accepted : callable or None
        Called by a later build if this step's accepted tokens were not set in time; returns
        ``(accepted_tokens, advance_mask)`` as for :meth:`StepExecutor.set_accepted` (e.g.
        read from a pinned buffer the device filled in stream order).
    forced_budget : int
        Grammar-forced nodes the build appends to each request's tree (0: off); see
        :func:`treegram.matcher.extend_draft_trees`. The extended trees are in
        :attr:`StepCompletion.extended` once the step is built.

    Notes
    -----
    Immutable after construction; safe to share across threads. The arrays are copies.
    """

    kind: str
    matchers: tuple
    draft_tokens: np.ndarray | None = None
    next_token: np.ndarray | None = None
    next_sibling: np.ndarray | None = None
    root_positions: np.ndarray | None = None
    row_offset: int = 0
    read_accepted: Callable[[], tuple] | None = None
    forced_budget: int = 0

    @property
    def batch_size(self) -> int:
        """Number of requests B."""
        return len(self.matchers)

    @property
    def rows_per_request(self) -> int:
        """Mask rows per request: N for trees, k + 1 for chains of k drafts, 1 for next; plus
        ``forced_budget``."""
        if self.draft_tokens is None:
            return 1
        return int(self.draft_tokens.shape[1]) + self.forced_budget

    @property
    def num_rows(self) -> int:
        """Rows written: ``batch_size * rows_per_request``, from ``row_offset`` on."""
        return self.batch_size * self.rows_per_request

    # ------------------------------------------------------------ constructors
    @classmethod
    def tree(
        cls,
        matchers: Sequence[GrammarMatcher],
        draft_tokens,
        next_token,
        next_sibling,
        *,
        root_positions=None,
        row_offset: int = 0,
        read_accepted=None,
        forced_budget: int = 0,
    ) -> StepBatch:
        """A step of draft trees: row ``row_offset + i * N + j`` is node ``j`` of request i.

        With ``forced_budget = k > 0`` the build extends each tree with up to k
        grammar-forced nodes (after the deferred advance, from the matchers' real
        positions): rows become ``row_offset + i * (N + k) + j`` for node ``j`` of the
        extended tree (:attr:`StepCompletion.extended`). A tree of only its root
        (``N = 1``) gives pure forced drafting, with no drafter.

        Parameters
        ----------
        matchers : sequence of GrammarMatcher, length B
        draft_tokens : int [B, N]
        next_token, next_sibling : int [N] (shared) or [B, N]
        root_positions : int [B], optional (default 0)
        row_offset : int, default 0
        read_accepted : callable, optional
        forced_budget : int, default 0

        Raises
        ------
        ArgumentError, DraftTreeError
            Malformed matchers, shapes or links.
        """
        ms = _matcher_tuple(matchers)
        b = len(ms)
        draft = as_index_array(draft_tokens, "draft_tokens").copy()
        if draft.ndim != 2 or draft.shape[0] != b or draft.shape[1] < 1:
            raise DraftTreeError(f"draft_tokens must have shape ({b}, N >= 1), got {draft.shape}")
        n = draft.shape[1]
        # copies: the step keeps them until it is built
        links = [
            a.copy()
            for a in link_arrays(next_token, next_sibling, b, n, ("next_token", "next_sibling"))
        ]
        if root_positions is None:
            roots = np.zeros(b, dtype=np.int64)
        else:
            roots = as_index_array(root_positions, "root_positions").copy()
            if roots.shape != (b,):
                raise DraftTreeError(f"root_positions must have shape ({b},), got {roots.shape}")
        if b:
            check_draft_trees(links[0], links[1], roots)
        return cls(
            "tree",
            ms,
            draft,
            links[0],
            links[1],
            roots,
            nonnegative_int(row_offset, "row_offset", BitmaskError),
            _callable(read_accepted),
            _forced_budget(forced_budget),
        )

    @classmethod
    def chain(
        cls,
        matchers: Sequence[GrammarMatcher],
        draft_tokens,
        *,
        row_offset: int = 0,
        read_accepted=None,
        forced_budget: int = 0,
    ) -> StepBatch:
        """A step of linear drafts of k tokens each: k + 1 rows per request (plus
        ``forced_budget`` forced nodes after the chain, as for :meth:`tree`).

        Row ``row_offset + i * (k + 1)`` is request i's current mask, row ``... + j`` the
        mask after its first ``j`` drafted tokens (zero after the first rejected one).

        Parameters
        ----------
        matchers : sequence of GrammarMatcher, length B
        draft_tokens : int [B, k]
        """
        ms = _matcher_tuple(matchers)
        draft = as_index_array(draft_tokens, "draft_tokens")
        if draft.ndim != 2 or draft.shape[0] != len(ms):
            raise DraftTreeError(f"draft_tokens must have shape ({len(ms)}, k), got {draft.shape}")
        k = draft.shape[1]
        tree_tokens = np.zeros((len(ms), k + 1), dtype=np.int64)
        tree_tokens[:, 1:] = draft
        next_token = np.arange(1, k + 2, dtype=np.int64)[None]
        next_token[0, -1] = -1
        next_sibling = np.full((1, k + 1), -1, dtype=np.int64)
        return cls(
            "chain",
            ms,
            tree_tokens,
            next_token,
            next_sibling,
            np.zeros(len(ms), dtype=np.int64),
            nonnegative_int(row_offset, "row_offset", BitmaskError),
            _callable(read_accepted),
            _forced_budget(forced_budget),
        )

    @classmethod
    def plain(
        cls,
        matchers: Sequence[GrammarMatcher],
        *,
        row_offset: int = 0,
        read_accepted=None,
    ) -> StepBatch:
        """A plain decoding step: one row (the next-token mask) per request."""
        return cls(
            "next",
            _matcher_tuple(matchers),
            row_offset=nonnegative_int(row_offset, "row_offset", BitmaskError),
            read_accepted=_callable(read_accepted),
        )


def _matcher_tuple(matchers) -> tuple:
    if not isinstance(matchers, (list, tuple)):
        raise ArgumentError(
            f"matchers must be a list of GrammarMatcher, got {type(matchers).__name__}"
        )
    for i, m in enumerate(matchers):
        if not isinstance(m, GrammarMatcher):
            raise ArgumentError(f"matchers[{i}] must be a GrammarMatcher, got {type(m).__name__}")
    return tuple(matchers)


def _forced_budget(value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"forced_budget must be an int >= 0, got {value!r}")
    if value < 0:
        raise ArgumentError(f"forced_budget must be an int >= 0, got {value}")
    return int(value)


def _callable(fn):
    if fn is not None and not callable(fn):
        raise ArgumentError(f"read_accepted must be callable or None, got {type(fn).__name__}")
    return fn


# --------------------------------------------------------------------------- completions


@dataclass(eq=False)
class StepCompletion:
    """The life of one step: queued → fetched → built → accepted → advanced.

    Attributes
    ----------
    step_id : int
        Position of the step in the executor's FIFO (ids grow monotonically, also across
        :meth:`StepExecutor.reset`).
    batch : StepBatch
    build_error : BaseException or None
        Why the build failed (its rows were then set to all-allowed).
    advance_error : BaseException or None
        Why the advance failed (the step still counts as advanced: never retried).
    advanced_by : {"build", "fallback"} or None
        Who performed the advance.
    tree_complete : list of bool or None
        Completion flags of the tree/chain traversal (per request; False for skipped ones).
    num_accepted : int64 ndarray [B]
        Tokens of this step accepted into each matcher by the advance.
    terminated_at : int64 ndarray [B]
        Index, in the request's accepted tokens, of the token after which its matcher
        terminated (the stop token); -1 if it did not terminate during this step. Nothing
        after it was accepted.
    rejected_at : int64 ndarray [B]
        Index of the first accepted token the grammar rejected (nothing from it on was
        accepted); -1 if none.
    skipped : bool ndarray [B]
        Requests whose matcher had terminated before this step's build (all-allowed rows).
    extended : treegram.matcher.ExtendedTrees or None
        With ``forced_budget``: the trees the build extended (tokens, links, parents of
        ``N + forced_budget`` nodes per request), the ones the rows describe; the engine
        scores and verifies these.

    Notes
    -----
    Thread safety: ``lock`` guards the advance; the executor sets the fields, and readers
    should wait for :meth:`wait_built` / check :attr:`advanced` before reading them. The
    ``*_event`` objects are :class:`threading.Event`.
    """

    step_id: int
    batch: StepBatch
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    built_event: threading.Event = field(default_factory=threading.Event, repr=False)
    accepted_event: threading.Event = field(default_factory=threading.Event, repr=False)
    fetched: bool = False
    advanced: bool = False
    advanced_by: str | None = None
    build_error: BaseException | None = None
    advance_error: BaseException | None = None
    tree_complete: list | None = None
    accepted_tokens: tuple | None = field(default=None, repr=False)
    advance_mask: np.ndarray | None = field(default=None, repr=False)
    num_accepted: np.ndarray = field(init=False, repr=False)  # [B], set by __post_init__
    terminated_at: np.ndarray = field(init=False, repr=False)  # [B], set by __post_init__
    rejected_at: np.ndarray = field(init=False, repr=False)  # [B], set by __post_init__
    skipped: np.ndarray = field(init=False, repr=False)  # [B], set by __post_init__
    extended: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        b = self.batch.batch_size
        self.num_accepted = np.zeros(b, dtype=np.int64)
        self.terminated_at = np.full(b, -1, dtype=np.int64)
        self.rejected_at = np.full(b, -1, dtype=np.int64)
        self.skipped = np.zeros(b, dtype=bool)

    @property
    def built(self) -> bool:
        """Whether the build of this step has finished (successfully or not)."""
        return self.built_event.is_set()

    def wait_built(self, timeout: float | None = None) -> bool:
        """Block until the build finished (e.g. a CUDA launcher's host function ran)."""
        return self.built_event.wait(timeout)

    def raise_for_build(self) -> None:
        """Raise the build's error, if any (the masks of this step are then not valid)."""
        if self.build_error is not None:
            raise self.build_error


# --------------------------------------------------------------------------- executor


class StepExecutor:
    """Fills the grammar masks of every decoding step in host functions, with the matcher
    advance of step k deferred to the build of step k + 1.

    Parameters
    ----------
    vocab_size : int
        Vocabulary size of every matcher (sets the bitmask width ``ceil(vocab_size / 32)``).
    max_rows : int
        Rows of the host and device bitmask buffers (the largest ``row_offset + num_rows``
        of any step).
    launcher : HostLauncher, optional
        Default: :class:`CudaHostLauncher` when torch sees a GPU, else
        :class:`EagerLauncher`.
    batch_matcher : BatchGrammarMatcher, optional
        Runs the batch traversals, fills and accepts (default: a new one with
        ``max_threads``; the executor then closes it in :meth:`close`).
    max_threads : int or "auto", default "auto"
    accepted_timeout : float, optional
        Seconds a build waits for the previous step's accepted tokens. Default 0 with a
        synchronous launcher (the tokens must be set before ``launch()``), 30 otherwise.

    Attributes
    ----------
    host_bitmask : torch.Tensor, int32 [max_rows, ceil(vocab_size / 32)]
        Staging buffer the build writes (pinned with a CUDA launcher).
    device_bitmask : torch.Tensor, int32 [max_rows, ceil(vocab_size / 32)]
        The launcher's copy target; a fixed address, so graphs may capture reads of it.
    stats : dict of str to int
        Counters: ``builds``, ``empty_fetches``, ``advanced_by_build``,
        ``advanced_by_fallback``.

    Notes
    -----
    Thread safety: :meth:`enqueue`, :meth:`set_accepted`, :meth:`advance_now` and the host
    functions may run concurrently from different threads (a queue lock guards the FIFO and
    the pending list; each step's lock guards its advance). Fetch and build of different
    steps must not overlap each other (stream order guarantees it; :meth:`launch` calls are
    made from one thread). :meth:`reset` and :meth:`close` must not overlap anything else.
    Matchers named by a queued or pending step must not be used by the engine until that
    step is advanced (:meth:`advance_now` makes sure). Host functions never raise: errors are
    kept on the step's :class:`StepCompletion`. Matcher work runs in numba kernels that
    release the GIL.
    """

    def __init__(
        self,
        vocab_size: int,
        max_rows: int,
        *,
        launcher: Any = None,
        batch_matcher: BatchGrammarMatcher | None = None,
        max_threads: int | Literal["auto"] = "auto",
        accepted_timeout: float | None = None,
    ) -> None:
        torch = _torch()
        self.vocab_size = nonnegative_int(vocab_size, "vocab_size", BitmaskError)
        if self.vocab_size == 0:
            raise ArgumentError("vocab_size must be >= 1, got 0")
        self.max_rows = nonnegative_int(max_rows, "max_rows", BitmaskError)
        self.launcher = default_launcher() if launcher is None else launcher
        if batch_matcher is None:
            self._batch = BatchGrammarMatcher(max_threads)
            self._owns_batch = True
        elif isinstance(batch_matcher, BatchGrammarMatcher):
            self._batch = batch_matcher
            self._owns_batch = False
        else:
            raise ArgumentError(
                f"batch_matcher must be a BatchGrammarMatcher, got {type(batch_matcher).__name__}"
            )
        if accepted_timeout is None:
            accepted_timeout = 0.0 if self.launcher.synchronous else 30.0
        if not isinstance(accepted_timeout, (int, float)) or accepted_timeout < 0:
            raise ArgumentError(f"accepted_timeout must be a number >= 0, got {accepted_timeout!r}")
        self.accepted_timeout = float(accepted_timeout)
        self.words = (self.vocab_size + 31) // 32
        self.host_bitmask = self.launcher.allocate_host(self.max_rows, self.words)
        self._host = self.host_bitmask.numpy()
        self._host.fill(-1)
        if self.launcher.device.type == "cpu" and isinstance(self.launcher, EagerLauncher):
            self.device_bitmask = torch.full_like(self.host_bitmask, -1)
        else:
            self.device_bitmask = torch.full(
                (self.max_rows, self.words), -1, dtype=torch.int32, device=self.launcher.device
            )
        self._lock = threading.Lock()  # guards _queue, _current, _pending, _next_id
        self._launch_lock = threading.Lock()
        self._reset_state()

    def _reset_state(self) -> None:
        with self._lock:
            self._queue: deque[StepCompletion] = deque()
            self._current: StepCompletion | None = None
            self._pending: list[StepCompletion] = []  # built, not yet advanced, in order
            self._next_id = getattr(self, "_next_id", 0)
            self.stats = {
                "builds": 0,
                "empty_fetches": 0,
                "advanced_by_build": 0,
                "advanced_by_fallback": 0,
            }

    # ------------------------------------------------------------ host side
    def enqueue(self, step: StepBatch) -> StepCompletion:
        """Append a step's batch to the FIFO; the next fetch takes the oldest one.

        Raises
        ------
        ArgumentError
            Not a StepBatch, rows outside the buffers, or a matcher of another vocabulary.
        """
        if not isinstance(step, StepBatch):
            raise ArgumentError(f"step must be a StepBatch, got {type(step).__name__}")
        if step.row_offset + step.num_rows > self.max_rows:
            raise ArgumentError(
                f"step needs rows [{step.row_offset}, {step.row_offset + step.num_rows}) but "
                f"the executor has max_rows={self.max_rows}"
            )
        for i, m in enumerate(step.matchers):
            vocab = m.compiled_grammar.tokenizer_info.vocab_size
            if vocab != self.vocab_size:
                raise ArgumentError(
                    f"matchers[{i}] has vocab_size {vocab}, the executor {self.vocab_size}"
                )
        with self._lock:
            done = StepCompletion(self._next_id, step)
            self._next_id += 1
            self._queue.append(done)
        return done

    def set_accepted(self, step, accepted_tokens, advance_mask=None) -> None:
        """Give the tokens the engine accepted for a step after verifying it.

        Parameters
        ----------
        step : int or StepCompletion
            The step (its id or completion).
        accepted_tokens : sequence of B int sequences, or int [B, L] with ``-1`` padding
            Tokens to accept into each request's matcher, in order (accepted draft tokens
            plus the bonus token). In the 2-D form a row ends at its first negative entry.
        advance_mask : bool [B], optional
            False for requests that do not advance this step (chunked prefill); default all
            True.

        Raises
        ------
        ArgumentError
            Unknown step, wrong lengths, or tokens already set for the step.
        InvalidTokenIdError
            A token outside ``[0, vocab_size)``.
        """
        done = self._find(step, "step")
        tokens, mask = self._validate_accepted(done, accepted_tokens, advance_mask)
        with done.lock:
            if done.advanced or done.accepted_event.is_set():
                raise ArgumentError(f"accepted tokens of step {done.step_id} were already set")
            done.accepted_tokens = tokens
            done.advance_mask = mask
            done.accepted_event.set()

    def advance_now(self, step) -> bool:
        """Host-side fallback: advance a built step (and every earlier pending one) now.

        Use it when the engine needs the matchers advanced before the next build (request
        end, last step, a batch change). Whichever of this call and the next build takes the
        step's lock first performs the advance; the other does nothing. On return the
        matchers are advanced.

        Returns
        -------
        bool
            True if this call performed ``step``'s advance, False if it already happened.

        Raises
        ------
        MatcherStateError
            The step was not built yet.
        AcceptedTokensMissingError
            The step or an earlier pending one has no accepted tokens.
        BaseException
            The advance of ``step`` failed (its ``advance_error``).
        """
        step_id = step.step_id if isinstance(step, StepCompletion) else step
        if not is_int(step_id):
            raise ArgumentError(f"step must be a step id or StepCompletion, got {step!r}")
        with self._lock:
            if step_id >= self._next_id or step_id < 0:
                raise ArgumentError(f"unknown step {step_id}")
            target = next((d for d in self._pending if d.step_id == step_id), None)
            queued = any(d.step_id == step_id for d in self._queue) or (
                self._current is not None and self._current.step_id == step_id
            )
        if queued or (target is not None and not target.built):
            raise MatcherStateError(f"step {step_id} is not built yet; launch it first")
        if target is None:
            return False  # advanced (and retired) already, or dropped by reset
        performed = self._advance_through(step_id, timeout=0.0, by="fallback")
        if target.advance_error is not None:
            raise target.advance_error
        return step_id in performed

    def launch(self) -> None:
        """Run (eager) or enqueue (CUDA; capturable) fetch, build and the device copy."""
        with self._launch_lock:
            self.launcher.launch(self._fetch, self._build, self.host_bitmask, self.device_bitmask)

    def reset(self) -> None:
        """Forget queued, current and pending steps without advancing them, and zero the
        counters; call after CUDA-graph warm-up/capture, with the device idle."""
        self._reset_state()

    def close(self) -> None:
        """Release the worker pool if the executor created it (idempotent)."""
        if self._owns_batch:
            self._batch.close()

    def __enter__(self) -> StepExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def num_queued(self) -> int:
        """Steps enqueued and not yet fetched."""
        with self._lock:
            return len(self._queue)

    @property
    def pending_steps(self) -> list[int]:
        """Ids of built steps not yet advanced, oldest first."""
        with self._lock:
            return [d.step_id for d in self._pending]

    # ------------------------------------------------------------ host functions
    def _fetch(self) -> None:
        """Host function 1: make the oldest queued step the current one."""
        with self._lock:
            if self._current is not None:  # a fetch without its build: keep order, retry
                return
            if not self._queue:
                self.stats["empty_fetches"] += 1
                return
            done = self._queue.popleft()
            done.fetched = True
            self._current = done

    def _build(self) -> None:
        """Host function 2: advance earlier steps, then fill the current step's masks."""
        with self._lock:
            done = self._current
            self._current = None
            if done is None:
                return
            self._pending.append(done)
            self.stats["builds"] += 1
        try:
            self._advance_through(done.step_id - 1, timeout=self.accepted_timeout, by="build")
            self._fill(done)
        except BaseException as exc:  # noqa: BLE001 - host functions must not raise
            done.build_error = exc
            b = done.batch
            self._host[b.row_offset : b.row_offset + b.num_rows] = -1
        finally:
            done.built_event.set()

    # ------------------------------------------------------------ advance
    def _advance_through(self, last_id: int, *, timeout: float, by: str) -> list[int]:
        """Advance every pending built step with id <= ``last_id``, oldest first."""
        performed: list[int] = []
        while True:
            with self._lock:
                done = next(
                    (
                        d
                        for d in self._pending
                        if d.step_id <= last_id and not d.advanced and d.built_event.is_set()
                    ),
                    None,
                )
            if done is None:
                return performed
            if self._advance_once(done, timeout=timeout, by=by):
                performed.append(done.step_id)
                if done.advance_error is not None:
                    raise done.advance_error  # later steps stay pending, advanced later

    def _advance_once(self, done: StepCompletion, *, timeout: float, by: str) -> bool:
        if not done.accepted_event.is_set():
            if timeout > 0:
                done.accepted_event.wait(timeout)
            if not done.accepted_event.is_set() and done.batch.read_accepted is not None:
                tokens, mask = done.batch.read_accepted()
                try:
                    self.set_accepted(done, tokens, mask)
                except ArgumentError:
                    if not done.accepted_event.is_set():
                        raise
            if not done.accepted_event.is_set():
                raise AcceptedTokensMissingError(
                    f"step {done.step_id} has no accepted tokens: call "
                    "set_accepted(step_id, ...) before the next step's build or advance_now"
                )
        with done.lock:
            if done.advanced:
                return False
            try:
                self._advance(done)
            except BaseException as exc:  # noqa: BLE001 - kept, re-raised by advance_now
                done.advance_error = exc
            finally:
                done.advanced = True
                done.advanced_by = by
                with self._lock:
                    if done in self._pending:
                        self._pending.remove(done)
                    self.stats["advanced_by_" + by] += 1
            return True

    def _advance(self, done: StepCompletion) -> None:
        """Accept each request's tokens, position by position, in batch calls."""
        matchers = done.batch.matchers
        tokens, mask = done.accepted_tokens, done.advance_mask
        if tokens is None or mask is None:  # set_accepted sets both before accepted_event
            raise AcceptedTokensMissingError(f"step {done.step_id} has no accepted tokens")
        lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
        live = mask.copy()
        live &= np.fromiter(
            (not m.is_terminated() for m in matchers), dtype=bool, count=len(matchers)
        )
        for p in range(int(lengths.max(initial=0))):
            rows = np.flatnonzero(live & (lengths > p))
            if len(rows) == 0:
                break
            batch = [matchers[i] for i in rows]
            ok = self._batch.batch_accept_token(batch, [int(tokens[i][p]) for i in rows])
            for i, m, accepted in zip(rows, batch, ok, strict=True):
                if not accepted:
                    done.rejected_at[i] = p
                    live[i] = False
                    continue
                done.num_accepted[i] += 1
                if m.is_terminated():
                    done.terminated_at[i] = p
                    live[i] = False

    def _validate_accepted(self, done: StepCompletion, accepted_tokens, advance_mask):
        b = done.batch.batch_size
        if isinstance(accepted_tokens, np.ndarray) or hasattr(accepted_tokens, "dim"):
            arr = as_index_array(accepted_tokens, "accepted_tokens")
            if arr.ndim != 2 or arr.shape[0] != b:
                raise ArgumentError(f"accepted_tokens must have shape ({b}, L), got {arr.shape}")
            tokens = []
            for row in arr:
                neg = np.flatnonzero(row < 0)
                tokens.append(row[: neg[0]] if len(neg) else row)
        else:
            if len(accepted_tokens) != b:
                raise ArgumentError(
                    f"accepted_tokens has {len(accepted_tokens)} entries for "
                    f"{b} requests of step {done.step_id}"
                )
            tokens = [
                as_index_array(t, f"accepted_tokens[{i}]").reshape(-1)
                for i, t in enumerate(accepted_tokens)
            ]
        for i, row in enumerate(tokens):
            if len(row) and (row.min() < 0 or row.max() >= self.vocab_size):
                raise InvalidTokenIdError(
                    f"accepted_tokens[{i}] has a token outside "
                    f"[0, {self.vocab_size}): {row.tolist()}"
                )
        if advance_mask is None:
            mask = np.ones(b, dtype=bool)
        else:
            mask = np.asarray(advance_mask.cpu() if hasattr(advance_mask, "cpu") else advance_mask)
            if mask.dtype != bool or mask.shape != (b,):
                raise ArgumentError(
                    f"advance_mask must be bool of shape ({b},), got {mask.dtype} {mask.shape}"
                )
            mask = mask.copy()
        return tuple(tokens), mask

    def _find(self, step, name: str) -> StepCompletion:
        if isinstance(step, StepCompletion):
            return step
        if not is_int(step):
            raise ArgumentError(f"{name} must be a step id or StepCompletion, got {step!r}")
        with self._lock:
            for d in (
                *self._pending,
                *self._queue,
                *((self._current,) if self._current is not None else ()),
            ):
                if d.step_id == step:
                    return d
        raise ArgumentError(
            f"{name} {step} is not a queued or pending step (already advanced, or dropped by reset)"
        )

    # ------------------------------------------------------------ fill
    def _fill(self, done: StepCompletion) -> None:
        b = done.batch
        rows = self._host[b.row_offset : b.row_offset + b.num_rows]
        rows.fill(-1)
        if b.batch_size == 0:
            return
        done.skipped[:] = [m.is_terminated() for m in b.matchers]
        live = np.flatnonzero(~done.skipped)
        if b.kind == "next":
            if len(live):
                self._batch.batch_fill_next_token_bitmask(
                    [b.matchers[i] for i in live], rows, indices=live
                )
            return
        flags = [False] * b.batch_size
        if b.forced_budget:
            self._fill_forced(done, rows)
            return
        if len(live):
            ok = self._batch.batch_traverse_draft_tree(
                list(b.matchers),
                b.next_token,
                b.next_sibling,
                b.draft_tokens,
                rows,
                indices=live,
                root_positions=None if b.root_positions is None else b.root_positions[live],
            )
            for i, flag in zip(live, ok, strict=True):
                flags[i] = flag
        done.tree_complete = flags

    def _fill_forced(self, done: StepCompletion, rows: np.ndarray) -> None:
        """Extend every tree with forced nodes and fill all rows in one call; requests
        skipped (terminated) keep all-allowed rows."""
        from treegram.matcher import extend_draft_trees

        b = done.batch
        done.extended = extend_draft_trees(
            list(b.matchers),
            b.next_token,
            b.next_sibling,
            b.draft_tokens,
            budget=b.forced_budget,
            token_bitmask=rows,
            root_positions=b.root_positions,
            batch=self._batch,
        )
        per = b.rows_per_request
        for i in np.flatnonzero(done.skipped):
            rows[i * per : (i + 1) * per] = -1
        done.tree_complete = [bool(not s) for s in done.skipped]


class EagerStepExecutor(StepExecutor):
    """A :class:`StepExecutor` with an :class:`EagerLauncher`: for machines without CUDA.

    ``launch()`` runs fetch, build and the copy synchronously; same contract otherwise.

    Parameters
    ----------
    vocab_size, max_rows : int
    device : str or torch.device, default "cpu"
        Device of :attr:`device_bitmask`.
    **kwargs
        As for :class:`StepExecutor` (except ``launcher``).
    """

    def __init__(self, vocab_size: int, max_rows: int, *, device: Any = "cpu", **kwargs) -> None:
        super().__init__(vocab_size, max_rows, launcher=EagerLauncher(device), **kwargs)
