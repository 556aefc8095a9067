"""Pausing Python's cyclic garbage collector while a grammar is built.

A compile allocates its IR, flattened copies and tables as hundreds of thousands of small
container objects that all stay alive until the stage ends. Each allocation burst past the
collector's thresholds starts a collection, and the full ones walk every tracked object of
the process (a serving engine's heap included) to free nothing: on the Kubernetes schemas of
MaskBench they took about half of the JSON Schema frontend's time. The structures built are
acyclic (immutable IR trees, flat lists and arrays); what cycles a stage leaves behind
(a converter and its helpers pointing at each other) are collected once the pause ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_active = 0  # stages in flight, over all threads
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for the ``with`` body.

    Nestable and thread-safe: the collector is disabled when the first of concurrent or
    nested bodies enters and set back to its earlier state when the last one leaves (left
    disabled if the caller had disabled it). Reference counting still frees everything
    that is not part of a cycle meanwhile.
    """
    global _active, _was_enabled
    with _lock:
        if _active == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _was_enabled:
                gc.enable()
