"""GrammarMatcher: the per-request parser state and its token-level operations."""

from __future__ import annotations

import numpy as np

from ..compiler._compiled import CompiledGrammar
from ..errors import ArgumentError, InvalidTokenIdError, MatcherStateError
from ..kernels._earley import OVERFLOW, REJECT, accept_bytes, chart_can_end, start_chart
from ..kernels._jump import jump_forward, row_allows_all
from ..kernels._mask import NEED_CLASSIFY, fill_row
from ._bitmask import as_bitmask_array, check_row_index

__all__ = ["GrammarMatcher"]

_JUMP_FORWARD_LIMIT = 4096


def _utf8_prefix(data: bytes) -> str:
    """Decode the longest prefix of ``data`` that is complete UTF-8 (an incomplete
    character at the end is cut; bytes that continue a character begun before ``data``
    make the prefix empty)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        return data[: err.start].decode("utf-8")


def _is_token_id(value) -> bool:
    """An int (or numpy integer) that is not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


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

    Notes
    -----
    ``accept_token`` returns False for a token the grammar rejects, for a special token,
    and after termination; the state is then unchanged. Unlike xgrammar, an id outside
    ``[0, vocab_size)`` raises :class:`~treegram.errors.InvalidTokenIdError`: it is a
    caller bug, not a grammar decision. ``fill_next_token_bitmask`` after a stop token was
    accepted raises :class:`~treegram.errors.MatcherStateError`. The kernels release the
    GIL; one matcher must not be used from two threads at once, but different matchers
    (also of one CompiledGrammar) may.
    """

    def __init__(
        self,
        compiled_grammar: CompiledGrammar,
        *,
        override_stop_tokens: int | list[int] | None = None,
        terminate_without_stop_token: bool = False,
        max_rollback_tokens: int = -1,
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
                        f"override_stop_tokens: {t!r} is not a token id in "
                        f"[0, {self._vocab_size})"
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
        self._stop_ids = np.array(sorted(set(int(t) for t in stops)), dtype=np.int32)
        self._stop_set = frozenset(int(t) for t in self._stop_ids)
        self._terminate_without_stop = bool(terminate_without_stop_token)
        self._max_rollback = int(max_rollback_tokens)
        a = compiled_grammar.automaton
        self._ab = a.packed
        self._tok_offsets = compiled_grammar._tokens.offsets
        self._tok_data = compiled_grammar._tokens.data
        self._sv = info.sorted_vocab
        self._store = compiled_grammar._store
        self._bufs = np.zeros((2, 64), dtype=np.int32)  # distinct classes / missing states
        self._items_s = np.zeros(256, dtype=np.int32)
        self._items_o = np.zeros(256, dtype=np.int32)
        self._set_starts = np.zeros(64, dtype=np.int32)
        self._memo_key = np.zeros((2, 32), dtype=np.int32)  # states / origins of the top set
        self._memo_meta = np.array([-1, 0], dtype=np.int64)
        self._memo_row = np.zeros((self._vocab_size + 31) // 32, dtype=np.int32)
        self._mask_cache: tuple | None = None
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Return to the initial state (nothing accepted)."""
        while start_chart(self._ab, self._items_s, self._items_o,
                          self._set_starts) == OVERFLOW:
            self._grow_items()
        self._top = 0
        self._history: list[int] = []  # top set before each step
        self._stopped = False
        self._memo_meta[0] = -1

    def fork(self) -> GrammarMatcher:
        """An independent copy sharing the compiled grammar."""
        twin = object.__new__(GrammarMatcher)
        twin.__dict__.update(self.__dict__)
        twin._items_s = self._items_s.copy()
        twin._items_o = self._items_o.copy()
        twin._set_starts = self._set_starts.copy()
        twin._bufs = np.zeros_like(self._bufs)
        twin._mask_cache = None
        twin._history = list(self._history)
        twin._memo_key = self._memo_key.copy()
        twin._memo_meta = self._memo_meta.copy()
        twin._memo_row = self._memo_row.copy()
        return twin

    def _grow_items(self) -> None:
        n = self._items_s.shape[0] * 2
        self._items_s = np.resize(self._items_s, n)
        self._items_o = np.resize(self._items_o, n)

    def _grow_sets(self, need: int) -> None:
        n = max(need + 1, self._set_starts.shape[0] * 2)
        grown = np.zeros(n, dtype=np.int32)
        grown[: self._set_starts.shape[0]] = self._set_starts
        self._set_starts = grown

    def _can_end(self) -> bool:
        return bool(chart_can_end(self._ab, self._items_s, self._items_o, self._set_starts,
                                  self._top))

    # ------------------------------------------------------------ accepting
    def _accept_bytes(self, data: np.ndarray, lo: int, hi: int) -> bool:
        while True:
            new_top = accept_bytes(self._ab, self._items_s, self._items_o, self._set_starts,
                                   self._top, data, lo, hi)
            if new_top >= 0:
                self._history.append(self._top)
                self._top = new_top
                return True
            if new_top == REJECT:
                return False
            if self._top + 2 + (hi - lo) >= self._set_starts.shape[0]:
                self._grow_sets(self._top + 2 + (hi - lo))
            else:
                self._grow_items()

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
        if not _is_token_id(token_id) or not 0 <= token_id < self._vocab_size:
            raise InvalidTokenIdError(
                f"token_id must be an int in [0, {self._vocab_size}), got {token_id!r}"
            )
        if self._stopped:
            return False
        token_id = int(token_id)
        if token_id in self._stop_set:
            if self._terminate_without_stop or not self._can_end():
                return False
            self._history.append(self._top)
            self._stopped = True
            return True
        lo = int(self._tok_offsets[token_id])
        hi = int(self._tok_offsets[token_id + 1])
        if lo == hi:
            return False
        return self._accept_bytes(self._tok_data, lo, hi)

    def accept_string(self, input_str: str | bytes) -> bool:
        """Accept a whole string as one step (one unit of rollback).

        Returns
        -------
        bool
            False (state unchanged) if the string is rejected or the matcher terminated.
        """
        if isinstance(input_str, str):
            input_str = input_str.encode("utf-8")
        elif not isinstance(input_str, (bytes, bytearray)):
            raise TypeError(f"input_str must be str or bytes, got {type(input_str).__name__}")
        if self._stopped:
            return False
        data = np.frombuffer(bytes(input_str), dtype=np.uint8)
        return self._accept_bytes(data, 0, data.shape[0])

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens or strings.

        Raises
        ------
        MatcherStateError
            Fewer than ``num_tokens`` steps were accepted.
        """
        if not _is_token_id(num_tokens) or num_tokens < 0:
            raise ArgumentError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        if num_tokens > len(self._history):
            raise MatcherStateError(
                f"cannot roll back {num_tokens} tokens: only {len(self._history)} accepted"
            )
        if num_tokens == 0:
            return
        if self._stopped:
            self._stopped = False
        cut = len(self._history) - num_tokens
        self._top = self._history[cut]
        del self._history[cut:]
        # chart sets above the new top will be rewritten: lower the mask memo's floor
        if self._top < self._memo_meta[1]:
            self._memo_meta[1] = self._top

    # ---------------------------------------------------------------- queries
    def is_terminated(self) -> bool:
        """Whether generation is over: a stop token was accepted, or (with
        ``terminate_without_stop_token``) the grammar is complete."""
        if self._terminate_without_stop:
            return self._can_end()
        return self._stopped

    def is_completed(self) -> bool:
        """Whether the input so far is a complete sentence of the grammar."""
        return self._stopped or self._can_end()

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end generation."""
        return [int(t) for t in self._stop_ids]

    @property
    def max_rollback_tokens(self) -> int:
        """Always -1: rollback is unbounded."""
        return -1

    @property
    def compiled_grammar(self) -> CompiledGrammar:
        """The compiled grammar this matcher runs."""
        return self._compiled

    def num_accepted_steps(self) -> int:
        """Number of accepted tokens/strings that rollback can undo."""
        return len(self._history)

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
        arr = self._bitmask_view(bitmask)
        row = arr[check_row_index(index, arr.shape[0])]
        if self._stopped:
            raise MatcherStateError(
                "the matcher accepted a stop token; roll back or reset before asking for a mask"
            )
        self._fill_row(row)
        return not row_allows_all(row, self._vocab_size)

    def _bitmask_view(self, bitmask) -> np.ndarray:
        """Validated numpy view of ``bitmask``; the last one is reused while the same object
        still has the same memory, shape and strides (engines pass one buffer every step)."""
        cached = self._mask_cache
        if cached is not None and cached[0] is bitmask:
            if isinstance(bitmask, np.ndarray):
                if bitmask.shape == cached[2]:
                    return cached[1]
            elif (bitmask.data_ptr() == cached[3] and bitmask.shape == cached[2]
                  and bitmask.stride() == cached[4]):
                return cached[1]
        arr = as_bitmask_array(bitmask, vocab_size=self._vocab_size)
        if isinstance(bitmask, np.ndarray):
            self._mask_cache = (bitmask, arr, bitmask.shape, None, None)
        elif hasattr(bitmask, "data_ptr") and hasattr(bitmask, "stride"):
            self._mask_cache = (bitmask, arr, bitmask.shape, bitmask.data_ptr(),
                                bitmask.stride())
        return arr

    def _fill_row(self, row: np.ndarray) -> None:
        sv = self._sv
        self._ensure_buffers()
        while True:
            st = fill_row(
                self._ab, *self._store.snapshot(), sv.token_ids, sv.offsets, sv.data,
                self._items_s, self._items_o, self._set_starts, self._top, self._stop_ids, row,
                self._bufs, self._memo_key, self._memo_meta, self._memo_row,
            )
            if st >= 0:
                return
            if st <= NEED_CLASSIFY:
                self._store.classify_states(self._bufs[1, : NEED_CLASSIFY - st].copy())
            elif st == OVERFLOW:
                need = self._top + 3 + int(sv.max_len)
                if need >= self._set_starts.shape[0]:
                    self._grow_sets(need)
                else:
                    self._grow_items()

    def _ensure_buffers(self) -> None:
        # collect_classes writes one entry per item of the top set at most (no bounds checks
        # in nopython mode), so the buffers must be at least that long.
        n = int(self._set_starts[self._top + 1] - self._set_starts[self._top])
        if n > self._bufs.shape[1]:
            self._bufs = np.zeros((2, 2 * n), dtype=np.int32)

    def find_jump_forward_string(self) -> str:
        """The longest string every continuation starts with (stops where the grammar may
        end or branch). Does not change the state."""
        if self._stopped:
            return ""
        out = np.zeros(_JUMP_FORWARD_LIMIT, dtype=np.uint8)
        while True:
            n = jump_forward(self._ab, self._items_s, self._items_o, self._set_starts,
                             self._top, out)
            if n >= 0:
                return _utf8_prefix(out[:n].tobytes())
            if self._top + 3 >= self._set_starts.shape[0] - 1:
                self._grow_sets(self._set_starts.shape[0] * 2)
            else:
                self._grow_items()
