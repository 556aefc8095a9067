"""Compilation of grammars against a tokenizer vocabulary."""

from ._compiled import (
    CompiledGrammar,
    deserialize_compiled,
    load_compiled,
    save_compiled,
    serialize_compiled,
)
from ._compiler import GrammarCompiler, register_warm_up
from ._redis_store import RedisStore
from ._store import CacheStore, DirectoryStore

__all__ = [
    "CacheStore",
    "CompiledGrammar",
    "DirectoryStore",
    "GrammarCompiler",
    "RedisStore",
    "register_warm_up",
    "serialize_compiled",
    "deserialize_compiled",
    "save_compiled",
    "load_compiled",
]
