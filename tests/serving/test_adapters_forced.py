"""The forced-draft option of the SGLang and vLLM adapters (``forced_drafts=``)."""

from __future__ import annotations

import pytest

import treegram as tg
from treegram.errors import ArgumentError
from treegram.serving.sglang import SGLangGrammarBackend
from treegram.serving.vllm import VLLMBackend

VOCAB: list[str] = [chr(c) for c in range(32, 127)] + ['{"', '":', "true", "<eos>"]
EOS = VOCAB.index("<eos>")
EBNF = r'root ::= "{\"key\":" ("true" | "false") "}"'


def ids(*texts: str) -> list[int]:
    return [VOCAB.index(t) for t in texts]


@pytest.fixture(scope="module")
def compiler():
    return tg.GrammarCompiler(tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS]))


def test_sglang_forced_draft_tokens(compiler):
    backend = SGLangGrammarBackend(compiler, forced_drafts=4)
    grammar = backend.dispatch_ebnf(EBNF)
    assert grammar.forced_draft_tokens() == ids('{"', "k", "e", "y")
    assert grammar.forced_draft_tokens(10) == ids('{"', "k", "e", "y", '":')
    request = grammar.copy()  # SGLang's per-request object keeps the option
    assert request.forced_draft_tokens() == ids('{"', "k", "e", "y")
    for t in ids('{"', "k", "e", "y", '":', "f"):
        request.accept_token(t)
    assert request.forced_draft_tokens() == ids("a", "l", "s", "e")
    fork = request.fork()
    assert fork.forced_draft_tokens(10) == ids("a", "l", "s", "e", "}", "<eos>")
    assert len(request.accepted_tokens) == 6  # proposing changed nothing
    off = SGLangGrammarBackend(compiler).dispatch_ebnf(EBNF)
    assert off.forced_draft_tokens() == []
    with pytest.raises(ArgumentError, match="forced_drafts"):
        SGLangGrammarBackend(compiler, forced_drafts=-1)


def test_vllm_extend_draft(compiler):
    grammar = VLLMBackend(compiler, forced_drafts=3).compile_grammar("grammar", EBNF)
    assert grammar.extend_draft() == ids('{"', "k", "e")
    # a drafted chain: cut at its first invalid token, then the forced continuation
    assert grammar.extend_draft(ids('{"', "k", "x", "y")) == ids('{"', "k", "e", "y", '":')
    assert grammar.extend_draft(ids('{"'), max_tokens=0) == ids('{"')
    assert grammar.num_processed_tokens == 0
    assert grammar.accept_tokens("r", ids('{"', "k", "e", "y", '":', "t"))
    assert grammar.extend_draft(ids("r")) == ids("r", "u", "e", "}")
    assert grammar.accept_tokens("r", ids("r", "u", "e", "}", "<eos>"))
    assert grammar.extend_draft(ids("x")) == []
    assert VLLMBackend(compiler).compile_grammar("grammar", EBNF).extend_draft() == []
    with pytest.raises(ArgumentError, match="forced_drafts"):
        VLLMBackend(compiler, forced_drafts="2")
