"""The persistent worker pool: contiguous chunks of batch work, at most one per worker."""

from __future__ import annotations

from treegram.pool._pool import MAX_THREADS_LIMIT, WorkerPool, chunk_bounds

__all__ = ["MAX_THREADS_LIMIT", "WorkerPool", "chunk_bounds"]
