"""Shared helpers of the JSON Schema tests: compile over a byte-level vocabulary (256
single-byte tokens + ``<eos>``) and check that a matcher accepts a whole text."""

from __future__ import annotations

from functools import cache

import treegram
from treegram.frontends.json_schema._convert import json_schema_to_ir


@cache
def byte_compiler() -> treegram.GrammarCompiler:
    """One compiler over the byte-level vocabulary, shared by every test."""
    vocab = [bytes([b]) for b in range(256)] + [b"<eos>"]
    return treegram.GrammarCompiler(treegram.TokenizerInfo(vocab, stop_token_ids=[256]))


def compile_schema(schema, **options) -> treegram.CompiledGrammar:
    """``schema`` compiled with ``json_schema_to_ir`` options over the byte vocabulary."""
    ir = json_schema_to_ir(schema, **options)
    return byte_compiler().compile_grammar(treegram.Grammar.from_ir(ir))


def accepts(cg: treegram.CompiledGrammar, text: str) -> bool:
    """Whether a fresh matcher accepts all of ``text`` and is then complete."""
    m = treegram.GrammarMatcher(cg)
    return m.accept_string(text) and m.is_completed()
