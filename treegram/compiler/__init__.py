"""Compilation of grammars against a tokenizer vocabulary."""

from ._compiled import CompiledGrammar
from ._compiler import GrammarCompiler
from ._redis_store import RedisStore
from ._store import CacheStore, DirectoryStore

__all__ = ["CacheStore", "CompiledGrammar", "DirectoryStore", "GrammarCompiler", "RedisStore"]
