"""Compilation of grammars against a tokenizer vocabulary."""

from ._compiled import CompiledGrammar
from ._compiler import GrammarCompiler

__all__ = ["CompiledGrammar", "GrammarCompiler"]
