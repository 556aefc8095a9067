"""Behaviour-level helpers for tests, named as in ``xgrammar.testing`` (0.2.8).

Does a grammar accept a string, which tokens a bitmask rejects, a JSON Schema or regex
as grammar text, boolean masks to and from bitmasks. They are built on treegram's public
API, so a test written against xgrammar's helpers runs here unchanged, except that the
grammar text these helpers print is treegram's EBNF (equal in language, not in spelling,
to xgrammar's normalised text).

Not for production paths: the helpers favour clarity over speed.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

import numpy as np

from treegram.compiler import GrammarCompiler
from treegram.errors import ArgumentError, BitmaskError, GrammarError
from treegram.grammar import Grammar
from treegram.matcher import (
    GrammarMatcher,
    as_bitmask_array,
    bitmask_to_bool,
    bool_to_bitmask,
    check_row_index,
)
from treegram.tokenizer import TokenizerInfo

__all__ = [
    "_json_schema_to_ebnf",
    "_regex_to_ebnf",
    "_ebnf_to_grammar_no_normalization",
    "_get_matcher_from_grammar",
    "_get_matcher_from_grammar_and_tokenizer_info",
    "_is_grammar_accept_string",
    "_get_masked_tokens_from_bitmask",
    "_is_single_token_bitmask",
    "_traverse_draft_tree",
    "bool_mask_to_bitmask",
    "bitmask_to_bool_mask",
]

# A vocabulary of one token: matchers made for accept_string only (xgrammar uses an empty
# vocabulary, which treegram's TokenizerInfo refuses).
_STRING_ONLY_VOCAB = ["\x00"]


def _as_grammar(grammar: Grammar | str, name: str = "grammar") -> Grammar:
    if isinstance(grammar, Grammar):
        return grammar
    if isinstance(grammar, str):
        return Grammar.from_ebnf(grammar)
    raise GrammarError(f"{name} must be a Grammar or EBNF text, got {type(grammar).__name__}")


def _json_schema_to_ebnf(
    schema: Any,
    *,
    any_whitespace: bool = True,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    max_whitespace_cnt: int | None = None,
    strict_mode: bool = True,
    json_format: str = "json",
    any_order: bool = False,
    unsupported: str | Collection[str] = "error",
    unknown_format: str = "warn",
    canonical_integers: bool = True,
) -> str:
    """The grammar of a JSON Schema (str, dict or pydantic model class) as EBNF text.

    Options are ``Grammar.from_json_schema``'s. Only ``json_format="json"`` and
    ``any_order=False`` are supported.

    Raises
    ------
    ArgumentError
        Another ``json_format`` or ``any_order=True``.
    UnsupportedSchemaError
        A keyword that cannot be compiled exactly.
    """
    if json_format != "json":
        raise ArgumentError(f"json_format: only 'json' is supported, got {json_format!r}")
    if any_order:
        raise ArgumentError("any_order=True is not supported")
    return Grammar.from_json_schema(
        schema,
        any_whitespace=any_whitespace,
        indent=indent,
        separators=separators,
        strict_mode=strict_mode,
        max_whitespace_cnt=max_whitespace_cnt,
        unsupported=unsupported,
        unknown_format=unknown_format,
        canonical_integers=canonical_integers,
    ).to_ebnf()


def _regex_to_ebnf(regex: str, with_rule_name: bool = True) -> str:
    """The grammar of a regular expression as EBNF text; ``with_rule_name=False`` gives
    the root rule's body alone (``root ::= `` and the newline left out) when the grammar
    has one rule.

    Raises
    ------
    RegexSyntaxError
        A malformed pattern or an unsupported construct.
    """
    text = Grammar.from_regex(regex).to_ebnf()
    if with_rule_name:
        return text
    head = "root ::= "
    if text.count("\n") == 1 and text.startswith(head):
        return text[len(head) : -1]
    return text


def _ebnf_to_grammar_no_normalization(ebnf_string: str, root_rule_name: str = "root") -> Grammar:
    """Parse EBNF text (treegram keeps the parsed grammar as written: there is no separate
    normalisation pass to skip)."""
    return Grammar.from_ebnf(ebnf_string, root_rule_name=root_rule_name)


def _get_matcher_from_grammar_and_tokenizer_info(
    grammar: Grammar | str, tokenizer_info: TokenizerInfo | None = None, **kwargs: Any
) -> GrammarMatcher:
    """A matcher for ``grammar`` (a Grammar or EBNF text) over ``tokenizer_info`` (default:
    a one-token vocabulary, for strings only); ``kwargs`` go to :class:`GrammarMatcher`."""
    if tokenizer_info is None:
        tokenizer_info = TokenizerInfo(_STRING_ONLY_VOCAB)
    compiler = GrammarCompiler(tokenizer_info, max_threads=1, cache_enabled=False)
    return GrammarMatcher(compiler.compile_grammar(_as_grammar(grammar)), **kwargs)


def _get_matcher_from_grammar(grammar: Grammar | str, **kwargs: Any) -> GrammarMatcher:
    """A matcher that accepts strings (not tokens) and terminates without a stop token."""
    kwargs.setdefault("terminate_without_stop_token", True)
    return _get_matcher_from_grammar_and_tokenizer_info(grammar, None, **kwargs)


def _is_grammar_accept_string(
    grammar: Grammar | str,
    input_str: str | bytes,
    *,
    debug_print: bool = False,
    print_time: bool = False,
    require_termination: bool = True,
) -> bool:
    """Whether ``grammar`` accepts ``input_str`` (in full when ``require_termination``,
    otherwise as a prefix). ``debug_print`` is accepted for xgrammar's signature and
    ignored; ``print_time`` prints how long matching took."""
    matcher = _get_matcher_from_grammar(grammar)
    start = time.perf_counter()
    accepted = matcher.accept_string(input_str)
    if print_time:
        elapsed = (time.perf_counter() - start) * 1e6
        print(f"Accepting {input_str!r}, result: {accepted}, time: {elapsed:.1f} us")
    if not accepted:
        return False
    return matcher.is_terminated() if require_termination else True


def _row(bitmask: Any, vocab_size: int, index: int) -> np.ndarray:
    words = as_bitmask_array(
        bitmask, vocab_size=vocab_size, name="bitmask", writable=False, allow_padding=True
    )
    return words[check_row_index(index, words.shape[0])]


def _get_masked_tokens_from_bitmask(bitmask: Any, vocab_size: int, index: int = 0) -> list[int]:
    """The ids of the tokens that row ``index`` of ``bitmask`` rejects, increasing.

    Raises
    ------
    BitmaskError
        A bitmask that is not a CPU int32 array of at least ``ceil(vocab_size / 32)``
        words per row, or a bad ``index``.
    """
    allowed = bitmask_to_bool(_row(bitmask, vocab_size, index), vocab_size)
    return np.flatnonzero(~allowed).tolist()


def _is_single_token_bitmask(bitmask: Any, vocab_size: int, index: int = 0) -> tuple[bool, int]:
    """``(True, token)`` when row ``index`` allows exactly one token, else ``(False, -1)``."""
    allowed = np.flatnonzero(bitmask_to_bool(_row(bitmask, vocab_size, index), vocab_size))
    return (True, int(allowed[0])) if len(allowed) == 1 else (False, -1)


def bool_mask_to_bitmask(bool_mask: Any) -> Any:
    """Pack a ``(rows, n)`` boolean mask (True: allowed) into int32 bitmask words; the bits
    past ``n`` in the last word are set (allowed), as in xgrammar. A torch tensor gives a
    torch tensor, anything else a numpy array.

    Raises
    ------
    BitmaskError
        A mask that is not boolean or not 2-D.
    """
    is_torch = type(bool_mask).__module__.startswith("torch")
    array = bool_mask.cpu().numpy() if is_torch else np.asarray(bool_mask)
    if array.ndim != 2:
        raise BitmaskError(f"bool_mask must be 2-D (rows, vocab), got shape {array.shape}")
    if array.dtype != np.bool_:
        raise BitmaskError(f"bool_mask must have dtype bool, got {array.dtype}")
    n = array.shape[1]
    padded = np.ones((array.shape[0], -(-n // 32) * 32), dtype=np.bool_)
    padded[:, :n] = array
    words = bool_to_bitmask(padded)
    if is_torch:
        import torch

        return torch.from_numpy(words).to(bool_mask.device)
    return words


def bitmask_to_bool_mask(bit_mask: Any, vocab_size: int | None = None) -> Any:
    """Expand int32 bitmask words ``(rows, w)`` into a ``(rows, vocab_size)`` boolean mask
    (default ``vocab_size``: ``32 * w``). A torch tensor gives a torch tensor.

    Raises
    ------
    BitmaskError
        A bitmask that is not a 2-D CPU int32 array, or a ``vocab_size`` above ``32 * w``.
    """
    shape = tuple(getattr(bit_mask, "shape", ()))
    if len(shape) != 2:
        raise BitmaskError(f"bit_mask must be 2-D (rows, words), got shape {shape}")
    if vocab_size is None:
        vocab_size = 32 * shape[1]
    elif not isinstance(vocab_size, int) or not 0 <= vocab_size <= 32 * shape[1]:
        raise BitmaskError(
            f"vocab_size must be an int in [0, {32 * shape[1]}] for {shape[1]} words, "
            f"got {vocab_size!r}"
        )
    result = bitmask_to_bool(bit_mask, vocab_size)
    if type(bit_mask).__module__.startswith("torch"):
        import torch

        return torch.from_numpy(result)
    return result


def _traverse_draft_tree(
    retrieve_next_token: Any,
    retrieve_next_sibling: Any,
    draft_tokens: Any,
    matcher: GrammarMatcher,
    allocate_token_bitmask: Any,
    time_threshold: float = -1.0,
) -> bool:
    """xgrammar's older argument order for :meth:`GrammarMatcher.traverse_draft_tree`."""
    return matcher.traverse_draft_tree(
        retrieve_next_token,
        retrieve_next_sibling,
        draft_tokens,
        allocate_token_bitmask,
        time_threshold,
    )
