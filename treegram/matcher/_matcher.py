"""GrammarMatcher: the per-request parser state and its token-level operations."""

from __future__ import annotations

import functools
import threading
import warnings
import weakref

import numpy as np

from .._checks import is_int
from ..compiler import CompiledGrammar
from ..errors import (
    ArgumentError,
    BitmaskError,
    DraftTreeError,
    InvalidTokenIdError,
    MatcherStateError,
    TemperatureError,
)
from ..kernels import (
    BUFS_FULL,
    CAND_FULL,
    HIST_FULL,
    M_NO_STOP,
    M_STEPS,
    M_STOPPED,
    M_TOP,
    MATCHERS,
    NEED_CLASSIFY,
    OVERFLOW,
    REJECT,
    TIMEOUT,
    accept_bytes,
    accept_token_entry,
    chart_can_end,
    jump_forward,
    start_chart,
)
from ..kernels import batch as _kernels_batch
from ._bitmask import BitmaskViewCache, ContiguousRows, check_row_index
from ._budgets import budget_table
from ._captures import capture_table
from ._temperature import (
    TemperatureTable,
    as_temperature_array,
    check_default_temperature,
    temperature_table,
)
from ._tree_input import (
    IndexViewCache,
    as_index_array,
    check_draft_input,
    check_scratch,
    deadline_ns,
    past_deadline,
    raise_tree_input,
)

__all__ = ["GrammarMatcher"]

# Flags in the high bits of a registered matcher's batch key (below bit 63, so keys stay
# positive), read by the batch calls from the keys they collect anyway instead of from
# each matcher: TRACKS, the matcher keeps its accepted text or counted steps (captures or
# token budgets: bookkeeping after accepts and rollbacks); COUNTED, its grammar has token
# budgets (spent budgets closed before masks, trees walked node by node).
KEY_TRACKS = 1 << 61
KEY_COUNTED = 1 << 62
KEY_SLOTS = KEY_TRACKS - 1  # the (grammar slot << 32) | matcher slot part


def _busy_error(name: str) -> MatcherStateError:
    return MatcherStateError(
        f"GrammarMatcher.{name}: the matcher is in use by another thread "
        "(a matcher serves one thread at a time; fork it for another thread)"
    )


# One thread at a time works on a matcher: two threads on one matcher's arrays at once
# could make a kernel read past them (one grows an array that the other still indexes by
# the old bounds), so the second one gets a MatcherStateError instead. The claim is a
# one-token list, ``_free``: ``pop`` takes the matcher and ``append`` gives it back, each
# one atomic call (half the cost of an uncontended RLock, on calls of a few hundred
# nanoseconds). A method that may call others (``_exclusive`` methods, the scalar
# traversal, batch calls) also records its thread in ``_owner``, so that those nested
# calls go through; the hot scalar calls (accept_token, rollback, fill_next_token_bitmask,
# is_terminated) call no other method and leave it as it is. ``_owner`` is 0 whenever the
# token is in the list, so a thread only ever reads 0 or the holder's id there.
_TOKEN = True
_get_ident = threading.get_ident

# Per thread: the matchers of the batch calls it is running whose claim recorded no owner
# (``_batch._claim``'s fast path takes a whole batch's tokens with one C-level pass and
# writes no ``_owner``): a stack of ``[held tuple, ids]`` entries, consulted only when a
# claim finds a matcher taken, to let this thread's nested calls through. ``ids``, the
# set of the tuple's ``id``s (its matchers are alive while the call holds them), is made
# at the first nested call, so a batch op that nests once per matcher stays linear.
_BATCH_HELD = threading.local()


def _held_here(matcher) -> bool:
    """Whether the calling thread holds ``matcher`` (its claim found it taken): an
    ``_exclusive`` or traversal call recorded this thread as owner, or one of this
    thread's running batch calls claimed it."""
    if matcher._owner == _get_ident():
        return True
    for entry in getattr(_BATCH_HELD, "stack", ()):
        if entry[1] is None:
            entry[1] = frozenset(map(id, entry[0]))
        if id(matcher) in entry[1]:
            return True
    return False


def _exclusive(method):
    """Run ``method`` only while no other thread uses the matcher (MatcherStateError
    otherwise); the same thread may nest calls."""

    @functools.wraps(method)
    def exclusive(self, *args, **kwargs):
        free = self._free
        try:
            free.pop()
        except IndexError:
            if not _held_here(self):
                raise _busy_error(method.__name__) from None
            return method(self, *args, **kwargs)  # nested: the outer call gives it back
        self._owner = _get_ident()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._owner = 0
            free.append(_TOKEN)

    return exclusive


_JUMP_FORWARD_LIMIT = 4096


def _utf8_prefix(data: bytes) -> str:
    """Decode the longest prefix of ``data`` that is complete UTF-8 (an incomplete
    character at the end is cut; bytes that continue a character begun before ``data``
    make the prefix empty)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        return data[: err.start].decode("utf-8")


def _encode_utf8(text: str, name: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (which has no UTF-8 form) is an ArgumentError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ArgumentError(
            f"{name} cannot be encoded as UTF-8: {err.reason} at position {err.start} "
            f"({text[err.start : err.end]!r})"
        ) from None


def _is_token_id(value) -> bool:
    """An int (or numpy integer) that is not a bool."""
    return is_int(value)


def _fingerprint(a, b, c, d) -> tuple | None:
    """What must stay the same for the checked views of four buffers to be reused: of a
    torch tensor its address, shape and strides; of a numpy array its shape, strides,
    dtype and writability (all of them can change in place). Compared whole, as one
    tuple; None when a buffer is neither (a list: nothing to reuse)."""
    kind = type(a)
    if kind is type(b) is type(c) is type(d) and kind is not np.ndarray:
        try:  # four tensors, the engines' case: no loop
            return (
                a.data_ptr(),
                a.shape,
                a.stride(),
                b.data_ptr(),
                b.shape,
                b.stride(),
                c.data_ptr(),
                c.shape,
                c.stride(),
                d.data_ptr(),
                d.shape,
                d.stride(),
            )
        except (AttributeError, TypeError):
            return None
    key: list = []
    for x in (a, b, c, d):
        if type(x) is np.ndarray:
            key += (None, x.shape, x.strides, x.dtype, x.flags.writeable)
        else:
            try:
                key += (x.data_ptr(), x.shape, x.stride())
            except (AttributeError, TypeError):
                return None
    return tuple(key)


def _shares(values, arr: np.ndarray) -> bool:
    """Whether ``arr``, the checked view of a caller's ``values``, is ``values``' own memory
    (not a converted copy): only then do the caller's in-place writes show through it."""
    if type(values) is np.ndarray:
        return arr is values
    return arr.size > 0 and arr.ctypes.data == values.data_ptr()


class GrammarMatcher:
    """Matches a token stream against a compiled grammar and produces next-token masks.

    Parameters
    ----------
    compiled_grammar : CompiledGrammar
        The grammar, compiled for the tokenizer whose ids are fed in.
    override_stop_tokens : int or list of int, optional
        Stop tokens to use instead of the tokenizer's.
    terminate_without_stop_token : bool, default False
        If True the matcher counts as terminated as soon as the grammar is complete, and
        stop tokens are not accepted (xgrammar semantics).
    max_rollback_tokens : int, default -1
        Kept for xgrammar compatibility; rollback depth is always unbounded.
    default_temperature : float or None, default None
        The sampling temperature of tokens outside every rule with a
        ``[temperature=T]`` attribute (see :attr:`temperature`).

    Notes
    -----
    ``accept_token`` returns False for a token the grammar rejects, for a special token,
    and after termination; the state is then unchanged. Unlike xgrammar, an id outside
    ``[0, vocab_size)`` raises :class:`~treegram.errors.InvalidTokenIdError`: it is a
    caller bug, not a grammar decision. ``fill_next_token_bitmask`` after a stop token was
    accepted raises :class:`~treegram.errors.MatcherStateError`.

    Thread safety: the kernels release the GIL. Different matchers (also of one
    CompiledGrammar) may be used from different threads at the same time, scalar and
    batch calls mixed. One matcher holds one request's state and serves one call at a
    time: a call (scalar, or a batch call that lists it) made while another thread's call
    is using it raises MatcherStateError instead of waiting, and a matcher listed twice in
    one batch call is rejected.
    Dropping the last reference to a matcher from any thread is safe even while batch
    calls run: a batch call keeps every matcher it was given alive until it returns.

    ``copy.copy``, ``copy.deepcopy`` and :meth:`fork` give an independent matcher with its
    own copy of the state and its own batch-registry slot, sharing the (immutable)
    compiled grammar.
    """

    def __init__(
        self,
        compiled_grammar: CompiledGrammar,
        *,
        override_stop_tokens: int | list[int] | None = None,
        terminate_without_stop_token: bool = False,
        max_rollback_tokens: int = -1,
        default_temperature: float | None = None,
    ) -> None:
        if not isinstance(compiled_grammar, CompiledGrammar):
            kind = type(compiled_grammar)
            raise TypeError(
                "compiled_grammar must be a treegram.CompiledGrammar (use "
                f"treegram.GrammarCompiler), got {kind.__module__}.{kind.__qualname__}"
            )
        self._compiled = compiled_grammar
        info = compiled_grammar.tokenizer_info
        self._vocab_size = int(info.vocab_size)
        if override_stop_tokens is None:
            stops = list(info.stop_token_ids)
        else:
            if _is_token_id(override_stop_tokens):
                stops = [override_stop_tokens]
            elif isinstance(override_stop_tokens, (list, tuple)):
                stops = list(override_stop_tokens)
            else:
                raise InvalidTokenIdError(
                    f"override_stop_tokens must be a token id in [0, {self._vocab_size}) or a "
                    f"list of them, got {override_stop_tokens!r}"
                )
            for t in stops:
                if not _is_token_id(t) or not 0 <= t < self._vocab_size:
                    raise InvalidTokenIdError(
                        f"override_stop_tokens: {t!r} is not a token id in [0, {self._vocab_size})"
                    )
        if not isinstance(terminate_without_stop_token, (bool, np.bool_)):
            raise TypeError(
                "terminate_without_stop_token must be a bool, got "
                f"{type(terminate_without_stop_token).__name__}"
            )
        if not _is_token_id(max_rollback_tokens):
            raise TypeError(
                f"max_rollback_tokens must be an int, got {type(max_rollback_tokens).__name__}"
            )
        self._default_temp = check_default_temperature(default_temperature)
        self._temp_table: TemperatureTable | None = None  # built on first use
        self._temp_warned = False
        self._stop_ids = np.array(sorted(set(int(t) for t in stops)), dtype=np.int32)
        a = compiled_grammar.automaton
        self._ab = a.packed
        self._tok_offsets = compiled_grammar.token_table.offsets
        self._tok_data = compiled_grammar.token_table.data
        self._sv = info.sorted_vocab
        self._store = compiled_grammar.mask_store
        self._bufs = np.zeros((2, 64), dtype=np.int32)  # distinct classes / missing states
        self._items_s = np.zeros(256, dtype=np.int32)
        self._items_o = np.zeros(256, dtype=np.int32)
        self._set_starts = np.zeros(64, dtype=np.int32)
        self._chart_text = np.zeros(64, dtype=np.int64)  # the byte read after each set, and counts
        # meta: top set, steps taken, stopped, terminate-without-stop-token (kernels/_ops.py)
        self._meta = np.zeros(4, dtype=np.int64)
        self._meta[M_NO_STOP] = int(bool(terminate_without_stop_token))
        self._hist = np.zeros(64, dtype=np.int32)  # top set before each step
        self._memo_key = np.zeros((2, 32), dtype=np.int32)  # states / origins of the top set
        # the memo's size and floor, and the longest token (``kernels._mask.counted_margin``)
        self._memo_meta = np.array([-1, 0, self._sv.max_len], dtype=np.int64)
        self._memo_row = np.zeros((self._vocab_size + 31) // 32, dtype=np.int32)
        self._cand = np.zeros(64, dtype=np.int32)  # uncertain-candidate scratch
        self._views = BitmaskViewCache()  # the engine's bitmask, validated once
        self._tree_views = IndexViewCache(3)  # the engine's tree tensors, viewed once
        # the last traversal's four buffers and their checked views (its fast path)
        self._tree_last: tuple | None = None
        self._tree_check = check_scratch(64)  # scratch of the tree checks
        self._root1 = np.zeros(1, dtype=np.int64)  # the root of a scalar traversal
        self._free = [_TOKEN]  # empty while a thread works on the arrays (see _exclusive)
        self._owner = 0
        self._clock = np.zeros(2, dtype=np.int64)
        self._stack = np.zeros(64, dtype=np.int32)  # traversal scratch
        self._slot = -1  # registry slot, taken on first use (token, traversal or batch)
        self._slot_owner: object | None = None  # the token that proves ownership of the slot
        self._batch_key = -1  # (grammar slot << 32) | matcher slot | KEY_* once registered
        # the accepted text, one byte per chart set, kept only for grammars with captures
        self._captures = capture_table(compiled_grammar)
        self._text: bytearray | None = bytearray() if self._captures.any else None
        # token budgets: per step, whether it was a token (accept_string steps are free),
        # and the completions of captured rules that closing an occurrence removed
        self._budgets = budget_table(compiled_grammar)
        self._counted: bytearray | None = bytearray() if self._budgets.any else None
        self._closed: list[tuple[int, int, int]] = []
        self._budget_checked: tuple[int, int] | None = None  # (steps, top) last checked
        self._tracks = self._text is not None or self._counted is not None  # one check per token
        self._bind_views()
        self.reset()

    # ------------------------------------------------------------------ state
    @_exclusive
    def reset(self) -> None:
        """Return to the initial state (nothing accepted)."""
        chart = (self._items_s, self._items_o, self._set_starts, self._chart_text)
        while start_chart(self._ab, *chart) == OVERFLOW:
            self._grow_items()
            chart = (self._items_s, self._items_o, self._set_starts, self._chart_text)
        self._meta[M_TOP] = 0
        self._meta[M_STEPS] = 0
        self._meta[M_STOPPED] = 0
        self._memo_meta[0] = -1
        if self._text is not None:
            self._text.clear()
        if self._counted is not None:
            self._counted.clear()
            self._closed = []
            self._budget_checked = None

    @_exclusive
    def fork(self) -> GrammarMatcher:
        """An independent copy sharing the compiled grammar (own state, own slot)."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        for name in (
            "_items_s",
            "_items_o",
            "_set_starts",
            "_chart_text",
            "_meta",
            "_hist",
            "_memo_key",
            "_memo_meta",
            "_memo_row",
            "_bufs",
            "_cand",
            "_clock",
            "_stack",
        ):
            setattr(twin, name, getattr(self, name).copy())
        twin._views = BitmaskViewCache()
        twin._tree_views = IndexViewCache(3)
        twin._tree_last = None
        twin._tree_check = check_scratch(64)
        twin._root1 = np.zeros(1, dtype=np.int64)
        if self._text is not None:
            twin._text = bytearray(self._text)
        if self._counted is not None:
            twin._counted = bytearray(self._counted)
            twin._closed = list(self._closed)
        twin._bind_views()
        twin._free = [_TOKEN]
        twin._owner = 0
        twin._slot = -1  # a registry slot belongs to exactly one matcher
        twin._slot_owner = None
        twin._batch_key = -1
        return twin

    def __copy__(self) -> GrammarMatcher:
        return self.fork()

    def __deepcopy__(self, memo: dict) -> GrammarMatcher:
        return self.fork()

    # ------------------------------------------------------- arrays and slots
    def _state_arrays(self) -> tuple:
        """The matcher's arrays in the order of its registry row (``kernels.layout``'s
        ``MATCHER_ROW``): its state, then the vocabulary and the scalar traversal's scratch
        that only the scalar kernels read there."""
        sv = self._sv
        return (
            self._items_s,
            self._items_o,
            self._set_starts,
            self._chart_text,
            self._meta,
            self._hist,
            self._stop_ids,
            self._bufs,
            self._memo_key,
            self._memo_meta,
            self._memo_row,
            self._cand,
            sv.token_ids,
            sv.offsets,
            sv.data,
            sv.by_length,
            self._tok_offsets,
            self._tok_data,
            self._stack,
            self._clock,
            self._root1,
            *self._tree_check,
        )

    def _nested(self, name: str) -> bool:
        """The inline claim of a hot call (see ``_exclusive``) found the matcher taken:
        False (go on, the outer call gives it back) when this thread holds it, else
        MatcherStateError naming ``name``."""
        if not _held_here(self):
            raise _busy_error(name) from None
        return False

    def _register(self) -> int:
        """Take registry slots for this matcher and its grammar (first use) and return
        the batch key ``(grammar slot << 32) | matcher slot``."""
        if self._batch_key < 0:
            gslot = self._compiled.registry_slot()
            owner = object()  # only this matcher and its finalizer hold it
            slot = MATCHERS.add(self._state_arrays(), owner)
            weakref.finalize(self, MATCHERS.release, slot, owner)
            self._slot, self._slot_owner = slot, owner
            flags = (KEY_TRACKS if self._tracks else 0) | (
                KEY_COUNTED if self._counted is not None else 0
            )
            self._batch_key = (gslot << 32) | slot | flags
        return self._batch_key

    def _bind_views(self) -> None:
        """Memoryviews of the small state arrays that scalar calls read and write from
        Python (an element costs a third of a numpy scalar, and less than a kernel call):
        ``_meta``, ``_hist`` (rebound when it grows) and ``_memo_meta``."""
        self._meta_mv = self._meta.data
        self._hist_mv = self._hist.data
        self._memo_mv = self._memo_meta.data
        # The scalar kernels' array arguments, fixed until an array is re-allocated: one
        # prebuilt tuple costs less per call than loading each attribute.
        self._accept_args = (
            self._ab,
            self._tok_offsets,
            self._tok_data,
            self._items_s,
            self._items_o,
            self._set_starts,
            self._chart_text,
            self._meta,
            self._hist,
            self._stop_ids,
        )

    def _arrays_changed(self) -> None:
        self._bind_views()
        if self._slot >= 0:
            MATCHERS.update(self._slot, self._state_arrays(), self._slot_owner)

    def _grow_items(self) -> None:
        n = self._items_s.shape[0] * 2
        self._items_s = np.resize(self._items_s, n)
        self._items_o = np.resize(self._items_o, n)
        self._arrays_changed()

    def _grow_sets(self, need: int) -> None:
        n = max(need + 1, self._set_starts.shape[0] * 2)
        grown = np.zeros(n, dtype=np.int32)
        grown[: self._set_starts.shape[0]] = self._set_starts
        self._set_starts = grown
        text = np.zeros(n, dtype=np.int64)
        text[: self._chart_text.shape[0]] = self._chart_text
        self._chart_text = text
        self._arrays_changed()

    def _grow_hist(self) -> None:
        grown = np.zeros(self._hist.shape[0] * 2, dtype=np.int32)
        grown[: self._hist.shape[0]] = self._hist
        self._hist = grown
        self._arrays_changed()

    def _grow_bufs(self) -> None:
        self._bufs = np.zeros((2, self._bufs.shape[1] * 2), dtype=np.int32)
        self._arrays_changed()

    def _grow_cand(self) -> None:
        self._cand = np.zeros(self._cand.shape[0] * 4, dtype=np.int32)
        self._arrays_changed()

    def _resolve(self, status: int, extra_bytes: int | None = 0, deadline: int = 0) -> None:
        """Make room or classify so that an operation that returned ``status`` can retry.

        ``extra_bytes`` is how far above the top the operation reads; ``None`` when that
        is unknown (a traversal: its depth), in which case the whole chart doubles.
        Classification stops at ``deadline`` (monotonic nanoseconds, 0: none); the caller
        then finds the deadline passed.
        """
        if status <= NEED_CLASSIFY:
            requests = self._bufs[1, : NEED_CLASSIFY - status].copy()
            self._store.classify_states(requests, from_mask=True, deadline=deadline)
        elif status == HIST_FULL:
            self._grow_hist()
        elif status == BUFS_FULL:
            self._grow_bufs()
        elif status == CAND_FULL:
            self._grow_cand()
        elif status == OVERFLOW and extra_bytes is None:
            self._grow_sets(self._set_starts.shape[0] * 2)
            self._grow_items()
        elif status == OVERFLOW and extra_bytes is not None:
            need = int(self._meta[M_TOP]) + 3 + max(extra_bytes, int(self._sv.max_len))
            if need >= self._set_starts.shape[0]:
                self._grow_sets(need)
            else:
                self._grow_items()
        else:  # pragma: no cover - every status is handled above
            raise MatcherStateError(f"unexpected kernel status {status}")

    def _can_end(self) -> bool:
        return bool(
            chart_can_end(
                self._ab,
                self._items_s,
                self._items_o,
                self._set_starts,
                self._chart_text,
                self._meta[M_TOP],
            )
        )

    # ------------------------------------------------------------ accepting
    def accept_token(self, token_id: int) -> bool:
        """Accept one token.

        Returns
        -------
        bool
            False (state unchanged) when the grammar rejects the token, the token is a
            special token, or the matcher has terminated.

        Raises
        ------
        InvalidTokenIdError
            ``token_id`` is not an integer in ``[0, vocab_size)``.
        """
        # The hot scalar calls claim the matcher inline rather than through @_exclusive
        # (one Python frame less per token); they record no owner: nothing nests in them.
        free = self._free
        try:
            free.pop()
            took = True
        except IndexError:
            took = self._nested("accept_token")
        try:
            if type(token_id) is not int:
                if not _is_token_id(token_id):
                    raise InvalidTokenIdError(
                        f"token_id must be an int in [0, {self._vocab_size}), got {token_id!r}"
                    )
                token_id = int(token_id)
            if not 0 <= token_id < self._vocab_size:
                raise InvalidTokenIdError(
                    f"token_id must be an int in [0, {self._vocab_size}), got {token_id!r}"
                )
            if self._counted is None:  # the common case, one kernel call, inline
                slot = self._slot
                if slot < 0:  # the first token: take the registry slot the kernel reads
                    self._register()
                    slot = self._slot
                st = _kernels_batch.accept_token_slot(self._ab, MATCHERS.table, slot, token_id)
                if st >= 0:
                    if st == 1 and self._tracks:
                        self._after_token(token_id)
                    return st == 1
            return self._accept(token_id)  # budgets, or the arrays must grow first
        finally:
            if took:
                free.append(_TOKEN)

    def _accept(self, token_id: int) -> bool:
        """:meth:`accept_token` of a checked id (the caller holds the matcher)."""
        if self._counted is not None:
            self._close_spent()
        while True:
            st = accept_token_entry(*self._accept_args, token_id)
            if st >= 0:
                if st == 1 and self._tracks:
                    self._after_token(token_id)
                return st == 1
            self._resolve(st, int(self._tok_offsets[token_id + 1] - self._tok_offsets[token_id]))

    @_exclusive
    def accept_string(self, input_str: str | bytes) -> bool:
        """Accept a whole string as one step (one unit of rollback).

        Returns
        -------
        bool
            False (state unchanged) if the string is rejected or the matcher terminated.

        Raises
        ------
        ArgumentError
            ``input_str`` is a str with no UTF-8 form (a lone surrogate); TypeError (plain)
            when it is neither str nor bytes.
        """
        if isinstance(input_str, str):
            input_str = _encode_utf8(input_str, "input_str")
        elif not isinstance(input_str, (bytes, bytearray)):
            raise TypeError(f"input_str must be str or bytes, got {type(input_str).__name__}")
        if self._meta[M_STOPPED]:
            return False
        # writable, like the vocabulary's token bytes: one specialization of the byte scan
        data = np.frombuffer(bytearray(input_str), dtype=np.uint8)
        while True:
            if self._meta[M_STEPS] >= self._hist.shape[0]:
                self._grow_hist()
                continue
            top = int(self._meta[M_TOP])
            new_top = accept_bytes(
                self._ab,
                self._items_s,
                self._items_o,
                self._set_starts,
                self._chart_text,
                top,
                data,
                0,
                data.shape[0],
            )
            if new_top >= 0:
                self._hist[self._meta[M_STEPS]] = top
                self._meta[M_STEPS] += 1
                self._meta[M_TOP] = new_top
                if self._text is not None:
                    self._record(input_str)
                if self._counted is not None:
                    self._counted.append(0)  # accept_string does not spend token budgets
                return True
            if new_top == REJECT:
                return False
            self._resolve(new_top, data.shape[0])

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens or strings.

        Raises
        ------
        ArgumentError
            ``num_tokens`` is not an int >= 0.
        MatcherStateError
            Fewer than ``num_tokens`` steps were accepted.
        """
        # the claim, inline (see accept_token)
        free = self._free
        try:
            free.pop()
            took = True
        except IndexError:
            took = self._nested("rollback")
        try:
            # kernels._ops.rollback_op, written on memoryviews: cheaper than a kernel call
            # for these few words (indices M_TOP 0, M_STEPS 1, M_STOPPED 2: literals, as
            # this is the cheapest call of the API and every load shows)
            meta = self._meta_mv
            steps = meta[1]
            if type(num_tokens) is not int or not 0 < num_tokens <= steps:
                num_tokens = self._rollback_count(num_tokens, steps)
                if not num_tokens:
                    if self._tracks:
                        self._after_rollback()
                    return
            steps -= num_tokens
            meta[1] = steps
            top = self._hist_mv[steps]
            meta[0] = top
            meta[2] = 0
            memo = self._memo_mv
            if top < memo[1]:
                memo[1] = top  # sets above the new top will be rewritten
            if self._tracks:
                self._after_rollback()
        finally:
            if took:
                free.append(_TOKEN)

    @staticmethod
    def _rollback_count(num_tokens, steps: int) -> int:
        """``num_tokens`` of :meth:`rollback` outside its fast path, checked against the
        ``steps`` accepted: an int in ``[0, steps]``."""
        if not _is_token_id(num_tokens):
            raise ArgumentError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        num_tokens = int(num_tokens)
        if num_tokens < 0:
            raise ArgumentError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        if num_tokens > steps:
            raise MatcherStateError(f"cannot roll back {num_tokens} tokens: only {steps} accepted")
        return num_tokens

    def _after_rollback(self) -> None:
        """Forget the accepted text, counted steps and closed completions past the state
        the chart was rolled back to."""
        if self._text is not None:
            del self._text[int(self._meta[M_TOP]) :]
        if self._counted is not None:
            del self._counted[int(self._meta[M_STEPS]) :]
            top = int(self._meta[M_TOP])
            self._closed = [e for e in self._closed if e[2] <= top]
            self._budget_checked = None  # the same (steps, top) may hold another chart

    # ---------------------------------------------------------------- budgets
    def _after_token(self, token_id: int) -> None:
        """Bookkeeping of an accepted token: its bytes (captures), and one counted step
        (token budgets) unless it was a stop token."""
        if self._text is not None:
            self._record_token(token_id)
        if self._counted is not None and len(self._counted) < int(self._meta[M_STEPS]):
            self._counted.append(1)

    def _close_spent(self) -> None:
        """Close the occurrences of budgeted rules whose budget is spent and that can end
        at the top set (``_budgets`` explains how); a no-op otherwise."""
        if self._meta[M_STOPPED] or not self._meta[M_STEPS]:
            return
        top, steps = int(self._meta[M_TOP]), int(self._meta[M_STEPS])
        if self._budget_checked == (steps, top):
            return  # nothing changed since the last check (a fill, then an accept)
        self._budget_checked = (steps, top)
        starts = self._hist[:steps]  # non-decreasing: the set each step started from
        counted = self._counted

        def tokens_since(origin: int) -> int:
            # the tokens that start at or after ``origin``
            return counted.count(1, int(np.searchsorted(starts, origin)))  # type: ignore[union-attr]

        table = self._budgets
        spent = table.spent(self._items_s, self._items_o, self._set_starts, top, tokens_since)
        if not spent:
            return
        lo, hi = int(self._set_starts[top]), int(self._set_starts[top + 1])
        drop = np.zeros(hi - lo, dtype=bool)
        root = int(self._compiled.automaton.root_rule)
        for rule, origin in spent:
            inside = table.inside(self._items_s, self._items_o, self._set_starts, top, rule, origin)
            if rule == root:  # the text may end here: keep the root's completions
                inside &= ~np.array([table.state_final[s] for s in self._items_s[lo:hi].tolist()])
            drop |= inside
        if self._captures.any:  # completions of captured rules that leave the chart
            track = self._captures.state_track[self._items_s[lo:hi]]
            for j in np.flatnonzero(drop & (track >= 0)).tolist():
                self._closed.append((int(track[j]), int(self._items_o[lo + j]), top))
        keep = ~drop
        n = int(np.count_nonzero(keep))
        self._items_s[lo : lo + n] = self._items_s[lo:hi][keep]
        self._items_o[lo : lo + n] = self._items_o[lo:hi][keep]
        self._set_starts[top + 1] = lo + n
        self._memo_meta[0] = -1  # the top set changed

    # ---------------------------------------------------------------- captures
    def _record_token(self, token_id: int) -> None:
        lo = int(self._tok_offsets[token_id])
        self._record(self._tok_data[lo : int(self._tok_offsets[token_id + 1])].tobytes())

    def _record(self, data: bytes) -> None:
        """Append the bytes the last step read (its first ``top - len(text)`` bytes: a
        stop token reads none)."""
        n = int(self._meta[M_TOP]) - len(self._text)  # type: ignore[arg-type]
        if n > 0:
            self._text += data[:n]  # type: ignore[operator]

    @_exclusive
    def get_captures(self, deduplicate: bool = True) -> list[tuple[str, bytes]]:
        """The text matched by the rules with a ``[capture="name"]`` attribute.

        Each completion of a captured rule over the accepted text is one ``(name,
        bytes)`` pair, in the order the rules completed (an inner rule before the rules
        around it). The parser follows every parse at once, so one occurrence of a rule
        may complete at several places (``/[0-9]+/`` after every digit): ``deduplicate``
        keeps only the longest completion of each occurrence, which is exact when what
        follows the rule cannot continue it; ``deduplicate=False`` gives every
        completion. Captures come from accepting tokens and strings (also through
        ``BatchGrammarMatcher.batch_accept_token`` / ``batch_accept_string``), never from
        computing masks, and rollback removes them.

        Returns
        -------
        list of (str, bytes)
            Empty for a grammar without captures.

        Raises
        ------
        MatcherStateError
            The matcher was advanced by a kernel that does not keep the accepted text
            (an engine step executor), so the captured bytes are unknown.
        """
        if not isinstance(deduplicate, (bool, np.bool_)):
            raise TypeError(f"deduplicate must be a bool, got {type(deduplicate).__name__}")
        if self._text is None:
            return []
        top = int(self._meta[M_TOP])
        if len(self._text) != top:
            raise MatcherStateError(
                f"get_captures: {top} bytes were accepted but only {len(self._text)} were "
                "recorded; captures are recorded by accept_token, accept_string and "
                "BatchGrammarMatcher.batch_accept_token / batch_accept_string"
            )
        return self._captures.captures(
            self._items_s,
            self._items_o,
            self._set_starts,
            top,
            self._text,
            bool(deduplicate),
            self._closed,
        )

    # ---------------------------------------------------------------- queries
    def is_terminated(self) -> bool:
        """Whether generation is over: a stop token was accepted, or (with
        ``terminate_without_stop_token``) the grammar is complete."""
        # the claim, inline (see accept_token)
        free = self._free
        try:
            free.pop()
            took = True
        except IndexError:
            took = self._nested("is_terminated")
        try:
            meta = self._meta_mv
            if meta[M_NO_STOP]:
                return self._can_end()
            return meta[M_STOPPED] != 0
        finally:
            if took:
                free.append(_TOKEN)

    @property
    def terminates_without_stop_token(self) -> bool:
        """Whether the matcher was made with ``terminate_without_stop_token=True``."""
        return self._meta_mv[M_NO_STOP] != 0

    @_exclusive
    def is_completed(self) -> bool:
        """Whether the input so far is a complete sentence of the grammar."""
        return bool(self._meta[M_STOPPED]) or self._can_end()

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end generation."""
        return [int(t) for t in self._stop_ids]

    @property
    def max_rollback_tokens(self) -> int:
        """Always -1: rollback is unbounded."""
        return -1

    @property
    def temperature(self) -> float | None:
        """The sampling temperature of the next token (xgrammar's per-rule temperature).

        The innermost rule with a ``[temperature=T]`` attribute around the next token's
        position gives it. When several parses are live and name different temperatures,
        the highest wins (with a warning, once per matcher); when none is inside such a
        rule, ``default_temperature`` applies. ``None`` when neither applies.
        """
        value = self._temperature_value()
        return None if value < 0 else value

    @_exclusive
    def _temperature_value(self) -> float:
        """:attr:`temperature` as a float, ``-1`` for none."""
        if self._meta[M_STOPPED]:
            return self._default_temp
        if self._counted is not None:
            self._close_spent()  # a spent budget decides which rules the next token is in
        table = self._temp_table
        if table is None:
            table = self._temp_table = temperature_table(self._compiled)
        value, conflict = table.temperature(
            self._items_s,
            self._items_o,
            self._set_starts,
            int(self._meta[M_TOP]),
            self._default_temp,
        )
        if conflict and not self._temp_warned:
            self._temp_warned = True
            warnings.warn(
                "several live parses name different rule temperatures; the highest is used",
                stacklevel=3,
            )
        return value

    @property
    def compiled_grammar(self) -> CompiledGrammar:
        """The compiled grammar this matcher runs."""
        return self._compiled

    def num_accepted_steps(self) -> int:
        """Number of accepted tokens/strings that rollback can undo."""
        return int(self._meta[M_STEPS])

    # ------------------------------------------------------------------ masks
    def fill_next_token_bitmask(self, bitmask, index: int = 0) -> bool:
        """Write the allowed-token mask of the next token into ``bitmask[index]``.

        Parameters
        ----------
        bitmask : numpy.ndarray or torch.Tensor, int32, shape (rows, ceil(vocab_size / 32))
            CPU bitmask (see :func:`allocate_token_bitmask`); rows may be a strided view.
        index : int, default 0
            Row to fill.

        Returns
        -------
        bool
            ``need_apply``: False only when every token is allowed.

        Raises
        ------
        BitmaskError
            Wrong dtype, shape, device or layout, or ``index`` out of range.
        MatcherStateError
            The matcher accepted a stop token.
        """
        # the claim, inline (see accept_token)
        free = self._free
        try:
            free.pop()
            took = True
        except IndexError:
            took = self._nested("fill_next_token_bitmask")
        try:
            arr = self._views.view(bitmask, self._vocab_size)
            r = check_row_index(index, arr.shape[0])
            if not arr.flags.c_contiguous:  # one row of it is (see ContiguousRows)
                arr, r = arr[r : r + 1], 0
            if self._meta_mv[M_STOPPED]:
                raise MatcherStateError(
                    "the matcher accepted a stop token; roll back or reset before asking for a mask"
                )
            if self._counted is not None:
                self._close_spent()
            # _fill_row's first kernel run, inline (one Python frame less per mask); it
            # tells whether the row leaves a token out
            slot = self._slot
            if slot >= 0:
                st = _kernels_batch.fill_slot(
                    self._ab, *self._store.snapshot(), MATCHERS.table, slot, arr, r
                )
                if st >= 0:
                    return st == 1
                # what the kernel asked for first (a first mask of new states: the requests
                # are in the scratch now), so that _fill_row's first run is not this one again
                self._resolve(st)
            # registers, makes room or classifies, then fills
            return self._fill_status(arr, r) == 1
        finally:
            if took:
                free.append(_TOKEN)

    def _bitmask_view(self, bitmask, name: str = "bitmask") -> np.ndarray:
        """Validated numpy view of ``bitmask``; the last one is reused while the same object
        still has the same memory, shape and strides (engines pass one buffer every step)."""
        return self._views.view(bitmask, self._vocab_size, name)

    def _fill_row(self, out: np.ndarray, r: int, deadline: int = 0) -> bool:
        """Fill row ``r`` of ``out`` with the current mask, classifying what it needs. Past
        ``deadline`` (monotonic nanoseconds, 0: none) no classification starts: the row is
        left zero and False returned."""
        return self._fill_status(out, r, deadline) >= 0

    def _fill_status(self, out: np.ndarray, r: int, deadline: int = 0) -> int:
        """:meth:`_fill_row`, returning the status of the fill that wrote the row: 1 when
        the row leaves some token out (``need_apply``), 0 when it allows every one (no
        second look at the row needed: a first mask's check of it cost a few microseconds),
        -1 past ``deadline`` (the row left zero)."""
        if self._slot < 0:
            self._register()  # the kernel reaches the matcher's state through its slot
        while True:
            st = _kernels_batch.fill_slot(
                self._ab,
                *self._store.snapshot(),
                MATCHERS.table,
                self._slot,
                out,
                r,
            )
            if st >= 0:
                return st
            if st <= NEED_CLASSIFY and past_deadline(deadline):
                out[r] = 0
                return -1
            self._resolve(st, 0, deadline)

    # ------------------------------------------------------------- draft trees
    def traverse_draft_tree(
        self,
        retrieve_next_token,
        retrieve_next_sibling,
        draft_tokens,
        token_bitmask,
        time_threshold: float = -1.0,
        temperatures=None,
        *,
        root_position: int = 0,
    ) -> bool:
        """Fill the bitmask of every node of a draft tree, leaving the matcher unchanged.

        Node ``root_position`` holds the last verified token (already accepted): its row is
        the current mask. A child is visited only if its parent's mask allows its token;
        it is then accepted, its row filled (unless the matcher stopped), its children
        visited, and it is rolled back. Rows of nodes never reached are zero. The root's
        row is filled even when the traversal times out, unless the root's own
        classification is what the deadline stopped.

        Parameters
        ----------
        retrieve_next_token, retrieve_next_sibling : int64 [N] (numpy or CPU torch)
            First child / next sibling of each node, -1 for none.
        draft_tokens : int64 [N]
            Token of each node.
        token_bitmask : int32 [N, ceil(vocab_size / 32)]
            Output rows, one per node.
        time_threshold : float, default -1
            Seconds after which the traversal stops and returns False (<= 0: no limit);
            classification included. The root's row is filled all the same when its
            classes are known.
        temperatures : float32 [N] (numpy or CPU torch), optional
            Filled with the :attr:`temperature` at each visited node (the temperature of
            the token after it); ``-1`` where there is none and at nodes not visited.
        root_position : int, keyword-only, default 0
            Index of the root node.

        Returns
        -------
        bool
            True if the traversal completed, False if it ran out of time.

        Raises
        ------
        DraftTreeError
            Malformed links or root, or link values that do not fit in int64.
        InvalidTokenIdError
            A draft token (the root's excepted) is outside ``[0, vocab_size)``.
        ArgumentError
            ``time_threshold`` is not a number or is NaN (``inf`` means no limit).
        BitmaskError
            ``token_bitmask`` has the wrong dtype, layout or fewer than N rows.
        TemperatureError
            ``temperatures`` is not a float32 1-D CPU array of at least N entries.
        """
        # the claim, inline (see _exclusive); the slow paths call accept_token and rollback
        free = self._free
        try:
            free.pop()
            took = True
        except IndexError:
            took = self._nested("traverse_draft_tree")
        else:
            self._owner = _get_ident()
        try:
            # An engine passes the same four buffers every step: when they are the last
            # call's, unchanged in memory, shape and strides (one fingerprint, compared
            # whole), their checks and views are reused; the links and tokens, which change
            # every step, are still checked by the kernel.
            last = self._tree_last
            if (
                last is not None
                and last[0] is retrieve_next_token
                and last[1] is retrieve_next_sibling
                and last[2] is draft_tokens
                and last[3] is token_bitmask
                and temperatures is None
                and _fingerprint(
                    retrieve_next_token, retrieve_next_sibling, draft_tokens, token_bitmask
                )
                == last[4]
            ):
                tree, out, n = last[5]
                if type(root_position) is not int or not 0 <= root_position < n:
                    root_position = self._check_root(root_position, n)
                deadline = (
                    0
                    if type(time_threshold) is float and time_threshold == -1.0
                    else deadline_ns(time_threshold)
                )
                self._root1[0] = root_position
                st = _kernels_batch.traverse_slot(
                    self._ab,
                    *self._store.snapshot(),
                    MATCHERS.table,
                    self._slot,
                    tree,
                    out,
                    root_position,
                    self._vocab_size,
                    deadline,
                )
                if st == 0:
                    return True
                return self._traverse_kernel(tree, out, root_position, deadline, st)
            return self._traverse_checked(
                retrieve_next_token,
                retrieve_next_sibling,
                draft_tokens,
                token_bitmask,
                time_threshold,
                temperatures,
                root_position,
            )
        finally:
            if took:
                self._owner = 0
                free.append(_TOKEN)

    def _traverse_kept(self, next_token, next_sibling, draft_tokens, token_bitmask) -> bool:
        """:meth:`traverse_draft_tree` from node 0 with no time limit, for treegram's engine
        drop-ins: they pass four numpy buffers of their own every step, change only the
        tokens (which the kernel checks) and never reshape the buffers or change their
        flags, so when these are the buffers of the matcher's last checked traversal their
        fingerprint is not taken again (a third of a one-draft chain's cost). Any other
        buffers go through :meth:`traverse_draft_tree`."""
        free = self._free
        try:
            free.pop()
            took = True
        except IndexError:
            took = self._nested("traverse_draft_tree")
        else:
            self._owner = _get_ident()
        try:
            last = self._tree_last
            if (
                last is None
                or last[0] is not next_token
                or last[1] is not next_sibling
                or last[2] is not draft_tokens
                or last[3] is not token_bitmask
            ):
                return self._traverse_checked(
                    next_token, next_sibling, draft_tokens, token_bitmask, -1.0, None, 0
                )
            tree, out, _ = last[5]
            self._root1[0] = 0
            return self._traverse_kernel(tree, out, 0, 0)
        finally:
            if took:
                self._owner = 0
                free.append(_TOKEN)

    def _traverse_checked(
        self,
        retrieve_next_token,
        retrieve_next_sibling,
        draft_tokens,
        token_bitmask,
        time_threshold,
        temperatures,
        root_position,
    ) -> bool:
        """:meth:`traverse_draft_tree` once the matcher is held."""
        views = self._tree_views
        next_token = views.view(0, retrieve_next_token, "retrieve_next_token")
        next_sibling = views.view(1, retrieve_next_sibling, "retrieve_next_sibling")
        draft = views.view(2, draft_tokens, "draft_tokens")
        n = next_token.shape[0]
        shape = next_token.shape
        if next_token.ndim != 1 or next_sibling.shape != shape or draft.shape != shape:
            for name, arr in (("retrieve_next_sibling", next_sibling), ("draft_tokens", draft)):
                if arr.ndim != 1 or arr.shape[0] != n or next_token.ndim != 1:
                    raise DraftTreeError(
                        f"{name} must have the shape of retrieve_next_token ({n},) and be "
                        f"1-D, got {arr.shape} and {next_token.shape}"
                    )
        root_position = self._check_root(root_position, n)
        # no time limit, the default: skip the clock
        deadline = (
            0
            if type(time_threshold) is float and time_threshold == -1.0
            else deadline_ns(time_threshold)
        )
        self._root1[0] = root_position
        if self._tree_check[0].shape[0] < n:
            self._tree_check = check_scratch(max(n, 2 * self._tree_check[0].shape[0]))
            self._arrays_changed()
        if self._counted is not None:  # walked node by node: checked here (else the kernel)
            check_draft_input(
                next_token,
                next_sibling,
                self._root1,
                draft,
                self._vocab_size,
                one_d=True,
                scratch=self._tree_check,
            )
        out = self._views.view(token_bitmask, self._vocab_size, "token_bitmask")
        if out.shape[0] < next_token.shape[0]:
            raise BitmaskError(
                f"token_bitmask needs one row per node ({next_token.shape[0]}), "
                f"got {out.shape[0]} rows"
            )
        temps = None
        if temperatures is not None:
            temps = as_temperature_array(temperatures)
            if temps.shape[0] < n:
                raise TemperatureError(
                    f"temperatures tensor needs one entry per node ({n}), got {temps.shape[0]}"
                )
        if self._stack.shape[0] <= n:
            self._stack = np.zeros(n + 1, dtype=np.int32)
            self._arrays_changed()  # the kernel finds the stack in the matcher's row
        key = _fingerprint(retrieve_next_token, retrieve_next_sibling, draft_tokens, token_bitmask)
        if (
            key is not None
            and temps is None
            and self._counted is None
            and out.flags.c_contiguous  # else written through a copy (ContiguousRows)
            and _shares(retrieve_next_token, next_token)
            and _shares(retrieve_next_sibling, next_sibling)
            and _shares(draft_tokens, draft)
        ):
            if self._slot < 0:
                self._register()  # the fast path's kernel reaches the state through the slot
            self._tree_last = (
                retrieve_next_token,
                retrieve_next_sibling,
                draft_tokens,
                token_bitmask,
                key,
                ((next_token, next_sibling, draft), out, n),
            )
        with ContiguousRows(out, n) as rows:
            done = self._traverse(next_token, next_sibling, draft, rows, root_position, deadline)
        if temps is not None:
            temps[:n] = -1.0
            if done:
                self._tree_temperatures(next_token, next_sibling, draft, root_position, temps)
        return done

    def _traverse_by_steps(self, next_token, next_sibling, draft, out, node: int, deadline) -> bool:
        """The draft-tree walk of ``traverse_draft_tree`` one node at a time (fill, accept,
        recurse, roll back), for grammars with token budgets: a budget may be spent at any
        node, and closing it is a step of the matcher the tree kernel does not take.
        ``out``'s rows must be zero. The deadline is checked before each child and by each
        row's classification."""
        if not self._meta[M_STOPPED]:
            self._close_spent()
            if not self._fill_row(out, node, deadline):
                return False
        child = int(next_token[node])
        while child >= 0:
            if past_deadline(deadline):
                return False
            t = int(draft[child])
            if (int(out[node, t >> 5]) >> (t & 31)) & 1 and self.accept_token(t):
                done = self._traverse_by_steps(
                    next_token, next_sibling, draft, out, child, deadline
                )
                self.rollback(1)
                if not done:
                    return False
            child = int(next_sibling[child])
        return True

    def _tree_temperatures(self, next_token, next_sibling, draft, node: int, temps) -> None:
        """The temperature at ``node`` and every node below it that the traversal visits:
        the same walk (a child is visited when its token is accepted), accepting and
        rolling back, so the matcher ends as it started."""
        temps[node] = self._temperature_value()
        child = int(next_token[node])
        while child >= 0:
            if not self._meta[M_STOPPED] and self.accept_token(int(draft[child])):
                self._tree_temperatures(next_token, next_sibling, draft, child, temps)
                self.rollback(1)
            child = int(next_sibling[child])

    def _traverse(self, next_token, next_sibling, draft, out, root_position, deadline) -> bool:
        """The walk of :meth:`traverse_draft_tree` once its arguments passed the Python
        checks. Links and tokens are checked by the first kernel call (one call less per
        traversal; ``_root1`` holds the root and ``_tree_check`` is large enough), before
        anything is written; a grammar with token budgets had them checked already."""
        if self._counted is not None:
            out[: next_token.shape[0]] = 0
            return self._traverse_by_steps(
                next_token, next_sibling, draft, out, int(root_position), deadline
            )
        return self._traverse_kernel(
            (next_token, next_sibling, draft), out, root_position, deadline
        )

    @staticmethod
    def _check_root(root_position, n: int) -> int:
        """``root_position`` of a traversal of ``n`` nodes, checked: an int in ``[0, n)``."""
        if type(root_position) is not int and not _is_token_id(root_position):
            raise DraftTreeError(f"root_position must be an int, got {root_position!r}")
        if not 0 <= root_position < n:  # also keeps ints beyond int64 off numpy
            raise DraftTreeError(f"root_position {root_position} is outside [0, {n})")
        return int(root_position)

    def _traverse_kernel(
        self, tree: tuple, out: np.ndarray, root_position: int, deadline, st: int | None = None
    ) -> bool:
        """The kernel walk of :meth:`_traverse` (no token budgets); ``tree`` is the plain
        tuple of a ``kernels.layout.Tree``, ``_root1`` holds the root, ``_tree_check`` and
        ``_stack`` are large enough. ``st``: the status of a first kernel run already made
        (the matcher was registered then)."""
        if self._slot < 0:
            self._register()  # the first call reaches the state through the slot's row
        while True:
            if st is None:
                st = _kernels_batch.traverse_slot(
                    self._ab,
                    *self._store.snapshot(),
                    MATCHERS.table,
                    self._slot,
                    tree,
                    out,
                    int(root_position),
                    self._vocab_size,
                    deadline,
                )
            if st > 0:  # a LINKS_* code: the input is not a valid tree, nothing was written
                raise_tree_input(st, self._tree_check[2], tree[2], self._vocab_size, one_d=True)
            if st == 0:
                return True
            if st == TIMEOUT or past_deadline(deadline):
                # classifying between kernel runs spends the same budget
                self._fill_root_row(out, int(root_position), deadline)
                return False
            self._resolve(st, None, deadline)  # then the walk again (the check is cheap)
            st = None

    def _fill_root_row(self, out: np.ndarray, row: int, deadline: int) -> None:
        """After a traversal timed out: fill the root's row, the current mask, when it
        needs no classification past ``deadline`` (an engine that falls back to one token
        needs this mask; xgrammar fills it whatever the time). The kernel walk fills it
        before it reads the clock, so this is a memo copy unless the root's own
        classification was what the deadline interrupted: then the budget wins and the
        row stays zero, as does a stopped matcher's."""
        if not self._meta[M_STOPPED]:
            self._fill_row(out, row, deadline)

    # ------------------------------------------------------------------ chains
    @_exclusive
    def fill_chain_bitmask(self, draft_tokens, bitmask) -> int:
        """Masks for every position of a linear draft (vLLM-style chains) in one call.

        Row 0 receives the current mask; row ``j`` (1..k) the mask after accepting
        ``draft_tokens[:j]``. The walk stops at the first token the grammar (or its own
        mask) rejects; later rows are zero. The matcher ends where it started.

        Parameters
        ----------
        draft_tokens : int [k]
            The drafted tokens, in order.
        bitmask : int32 [>= k + 1, ceil(vocab_size / 32)]

        Returns
        -------
        int
            How many leading draft tokens were accepted.
        """
        tokens = self._token_vector(draft_tokens, "draft_tokens")
        k = tokens.shape[0]
        next_token = np.arange(1, k + 2, dtype=np.int64)
        next_token[-1] = -1
        draft = np.concatenate([np.zeros(1, dtype=np.int64), tokens])
        self.traverse_draft_tree(next_token, np.full(k + 1, -1, dtype=np.int64), draft, bitmask)
        return self._accepts_prefix(tokens, k)

    @_exclusive
    def count_acceptable_tokens(self, tokens) -> int:
        """How many leading ``tokens`` the grammar accepts in a row (vLLM's
        ``validate_tokens`` asks this). Does not change the state."""
        arr = self._token_vector(tokens, "tokens")
        return self._accepts_prefix(arr, arr.shape[0])

    def _token_vector(self, tokens, name: str) -> np.ndarray:
        arr = as_index_array(tokens, name)
        if arr.ndim != 1:
            raise ArgumentError(f"{name} must be 1-D, got shape {arr.shape}")
        if len(arr) and (arr.min() < 0 or arr.max() >= self._vocab_size):
            raise InvalidTokenIdError(
                f"{name} must be ids in [0, {self._vocab_size}), got {arr.tolist()}"
            )
        return arr

    def _accepts_prefix(self, tokens: np.ndarray, limit: int) -> int:
        """How many of ``tokens[:limit]`` (ids checked to be in range) are accepted in a
        row; the matcher ends where it started (the caller holds it)."""
        n = 0
        for t in tokens[:limit].tolist():
            if not self._accept(t):
                break
            n += 1
        if n:
            self.rollback(n)
        return n

    @_exclusive
    def find_jump_forward_string(self) -> str:
        """The longest string every continuation starts with (stops where the grammar may
        end or branch). Does not change the state."""
        if self._meta[M_STOPPED]:
            return ""
        if self._counted is not None:
            self._close_spent()
        out = np.zeros(_JUMP_FORWARD_LIMIT, dtype=np.uint8)
        while True:
            top = int(self._meta[M_TOP])
            chart = (self._items_s, self._items_o, self._set_starts, self._chart_text)
            n = jump_forward(self._ab, *chart, top, out)
            if n >= 0:
                return _utf8_prefix(out[:n].tobytes())
            # The scan may need a set for every byte up to the limit: grow the sets when they
            # cannot hold that many (growing items alone would never end), else the items.
            if top + 3 + _JUMP_FORWARD_LIMIT >= self._set_starts.shape[0]:
                self._grow_sets(top + 3 + _JUMP_FORWARD_LIMIT)
            else:
                self._grow_items()
