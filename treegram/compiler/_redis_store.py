"""A cache store in Redis, so that serving replicas share compiled grammars.

Needs the optional ``redis`` package (redis-py); importing this module does not.
"""

from __future__ import annotations

from .._checks import is_int
from ..errors import ArgumentError, CacheStoreError, MissingDependencyError
from ._store import check_key

__all__ = ["RedisStore"]


def _redis_module():
    try:
        import redis
    except ImportError as exc:
        raise MissingDependencyError(
            "RedisStore needs the redis-py package: pip install redis"
        ) from exc
    return redis


class RedisStore:
    """Entries as Redis string values ``<prefix><key>``.

    Parameters
    ----------
    url_or_client : str or redis.Redis
        A ``redis://`` URL (a client is made with ``redis.Redis.from_url``) or an existing
        client (it must return ``bytes``, i.e. ``decode_responses=False``).
    prefix : str, default "treegram:compiled:"
        Prepended to every key.
    ttl_s : int or None
        Expire entries this many seconds after they are written; None keeps them.
    max_entry_bytes : int, default 512 MiB (Redis's own largest string)
        Larger values are neither written nor read (:class:`CacheStoreError`): ``get``
        asks for the value's length first (``STRLEN``, when the client has it), so an
        oversized entry is never transferred.

    Notes
    -----
    ``SET`` replaces a value atomically, so readers never see a torn entry and concurrent
    writers of one key leave one complete value. Redis errors (connection refused, time
    out) propagate as ``redis.exceptions.RedisError``; :class:`GrammarCompiler` logs them
    and compiles instead. Thread-safe (redis-py clients pool their connections).

    Raises
    ------
    MissingDependencyError
        redis-py is not installed.
    ArgumentError
        An argument has the wrong type or value.
    """

    def __init__(
        self,
        url_or_client="redis://127.0.0.1:6379/0",
        *,
        prefix: str = "treegram:compiled:",
        ttl_s: int | None = None,
        max_entry_bytes: int = 512 << 20,
    ) -> None:
        redis = _redis_module()
        if isinstance(url_or_client, str):
            self.client = redis.Redis.from_url(url_or_client)
        elif all(hasattr(url_or_client, m) for m in ("get", "set", "delete")):
            self.client = url_or_client
        else:
            raise ArgumentError(
                "url_or_client must be a redis:// URL or a redis.Redis client, "
                f"got {type(url_or_client).__name__}"
            )
        if not isinstance(prefix, str):
            raise ArgumentError(f"prefix must be a str, got {type(prefix).__name__}")
        if ttl_s is not None and (not is_int(ttl_s, numpy=False) or ttl_s < 1):
            raise ArgumentError(f"ttl_s must be None or a positive int, got {ttl_s!r}")
        if not is_int(max_entry_bytes, numpy=False) or max_entry_bytes < 1:
            raise ArgumentError(f"max_entry_bytes must be a positive int, got {max_entry_bytes!r}")
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.max_entry_bytes = max_entry_bytes

    def _name(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _too_big(self, name: str, size: int) -> CacheStoreError:
        return CacheStoreError(
            f"Redis entry {name!r} has {size} bytes, more than "
            f"max_entry_bytes={self.max_entry_bytes}"
        )

    def get(self, key: str) -> bytes | None:
        name = self._name(key)
        strlen = getattr(self.client, "strlen", None)
        if callable(strlen):
            size = int(strlen(name))  # 0 when missing
            if size > self.max_entry_bytes:
                raise self._too_big(name, size)
        value = self.client.get(name)
        if value is None:
            return None
        if isinstance(value, str):  # a client with decode_responses=True cannot hold blobs
            raise ArgumentError("RedisStore needs a client with decode_responses=False")
        if len(value) > self.max_entry_bytes:  # replaced by a larger value since STRLEN
            raise self._too_big(name, len(value))
        return bytes(value)

    def put(self, key: str, blob: bytes) -> None:
        name = self._name(key)
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise ArgumentError(f"blob must be bytes-like, got {type(blob).__name__}")
        data = bytes(blob)
        if len(data) > self.max_entry_bytes:
            raise self._too_big(name, len(data))
        self.client.set(name, data, ex=self.ttl_s)

    def delete(self, key: str) -> None:
        self.client.delete(self._name(key))

    def __repr__(self) -> str:
        return f"RedisStore({self.client!r}, prefix={self.prefix!r})"
