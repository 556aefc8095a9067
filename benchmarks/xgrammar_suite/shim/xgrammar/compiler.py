"""``xgrammar.compiler``: ``GrammarCompiler`` and ``CompiledGrammar`` from treegram."""

from treegram import CompiledGrammar, GrammarCompiler

__all__ = ["CompiledGrammar", "GrammarCompiler"]
