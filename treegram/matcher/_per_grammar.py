"""Tables derived from a compiled grammar, built once and shared by all of its matchers."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["PerGrammar"]

T = TypeVar("T")


class PerGrammar(Generic[T]):
    """``tables(compiled)``: ``build(compiled)``, built on first use for each compiled
    grammar and dropped with it. The tables are immutable, so two threads that race may
    both build one; the first stored is the one every caller gets.

    Parameters
    ----------
    build : callable
        Makes the table of a compiled grammar.
    """

    def __init__(self, build: Callable[[Any], T]) -> None:
        self._build = build
        self._tables: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, compiled: Any) -> T:
        with self._lock:
            table = self._tables.get(compiled)
        if table is None:
            table = self._build(compiled)  # outside the lock: it may take a while
            with self._lock:
                table = self._tables.setdefault(compiled, table)
        return table
