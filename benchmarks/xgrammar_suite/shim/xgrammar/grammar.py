"""``xgrammar.grammar``: ``Grammar`` and ``StructuralTagItem`` from treegram."""

from treegram import Grammar, StructuralTagItem

__all__ = ["Grammar", "StructuralTagItem"]
