"""Behaviour-level helpers for tests, named as in ``xgrammar.testing`` (0.2.8).

Does a grammar accept a string, which tokens a bitmask rejects, a JSON Schema or regex
as grammar text, boolean masks to and from bitmasks. They are built on treegram's public
API, so a test written against xgrammar's helpers runs here unchanged, except that the
grammar text these helpers print is treegram's EBNF (equal in language, not in spelling,
to xgrammar's normalised text).

Not for production paths: the helpers favour clarity over speed, except that the last
grammars parsed from text and compiled for the one-token vocabulary are kept (xgrammar's
tests print a grammar once and then match many strings against it, one call each).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Collection
from decimal import Decimal
from typing import Any

import numpy as np

from treegram.automaton import Automaton, build_automaton
from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import ArgumentError, ArgumentTypeError, BitmaskError, GrammarError
from treegram.frontends import xml_arguments_to_ir
from treegram.grammar import Grammar
from treegram.ir import Choice, GrammarIR, Repeat, RuleRef, Seq
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
    "_get_allow_empty_rule_ids",
    "_print_grammar_fsms",
    "_is_rule_fsm_accept_string",
    "GrammarFunctor",
    "_generate_range_regex",
    "_generate_float_regex",
    "bool_mask_to_bitmask",
    "bitmask_to_bool_mask",
]

# A vocabulary of one token: matchers made for accept_string only (xgrammar uses an empty
# vocabulary, which treegram's TokenizerInfo refuses).
_STRING_ONLY_VOCAB = ["\x00"]

# The last grammars parsed from text, and compiled for the one-token vocabulary: xgrammar's
# tests print a grammar once and then match many strings against it, one call each (both
# steps are pure, so a repeated text or grammar gets the same result back).
_KEEP = 64
_lock = threading.Lock()
_parsed: OrderedDict[str, Grammar] = OrderedDict()
_compiled: OrderedDict[int, tuple[Grammar, CompiledGrammar]] = OrderedDict()
_string_only: list[GrammarCompiler] = []


def _kept(cache: OrderedDict, key: Any) -> Any:
    with _lock:
        got = cache.get(key)
        if got is not None:
            cache.move_to_end(key)
        return got


def _keep(cache: OrderedDict, key: Any, value: Any) -> None:
    with _lock:
        cache[key] = value
        while len(cache) > _KEEP:
            cache.popitem(last=False)


def _as_grammar(grammar: Grammar | str, name: str = "grammar") -> Grammar:
    if isinstance(grammar, Grammar):
        return grammar
    if isinstance(grammar, str):
        got = _kept(_parsed, grammar)
        if got is None:
            got = Grammar.from_ebnf(grammar)
            _keep(_parsed, grammar, got)
        return got
    raise GrammarError(f"{name} must be a Grammar or EBNF text, got {type(grammar).__name__}")


def _compile_string_only(grammar: Grammar) -> CompiledGrammar:
    """``grammar`` compiled for the one-token vocabulary (kept by identity: the entry holds
    the grammar, so its id is not reused while kept)."""
    got = _kept(_compiled, id(grammar))
    if got is not None:
        return got[1]
    if not _string_only:
        compiler = GrammarCompiler(
            TokenizerInfo(_STRING_ONLY_VOCAB), max_threads=1, cache_enabled=False
        )
        with _lock:
            if not _string_only:
                _string_only.append(compiler)
    compiled = _string_only[0].compile_grammar(grammar)
    _keep(_compiled, id(grammar), (grammar, compiled))
    return compiled


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

    Options are ``Grammar.from_json_schema``'s. ``json_format``: ``"json"``, or an XML
    argument style of ``JSONSchemaFormat`` (``"qwen_xml"``, ``"minimax_xml"``,
    ``"deepseek_xml"``, ``"deepseek_v4_1_xml"``, ``"glm_xml"``, ``"kimi_k3_xml"``), which
    takes only ``max_whitespace_cnt``, ``any_order`` and ``strict_mode``.

    Raises
    ------
    InvalidStructuralTagError
        Another ``json_format``.
    UnsupportedStructuralTagError
        An XML style or schema construct that is not compiled.
    UnsupportedSchemaError
        A keyword that cannot be compiled exactly.
    """
    if json_format != "json":
        ir = xml_arguments_to_ir(
            schema,
            json_format,
            max_whitespace_cnt=max_whitespace_cnt,
            any_order=any_order,
            strict_mode=strict_mode,
        )
        return Grammar(ir).to_ebnf()
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
        any_order=any_order,
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
        return GrammarMatcher(_compile_string_only(_as_grammar(grammar)), **kwargs)
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


def _automaton_of(grammar: Grammar, name: str) -> Automaton:
    if not isinstance(grammar, Grammar):
        raise ArgumentTypeError(f"{name} must be a Grammar, got {type(grammar).__name__}")
    return build_automaton(grammar.ir)


def _get_allow_empty_rule_ids(compiled_grammar: CompiledGrammar) -> list[int]:
    """The ids of the rules that derive the empty string, ascending.

    A rule's id is its position in the grammar's rules (the order they were defined in,
    as in xgrammar).
    """
    if not isinstance(compiled_grammar, CompiledGrammar):
        raise ArgumentTypeError(
            f"compiled_grammar must be a CompiledGrammar, got {type(compiled_grammar).__name__}"
        )
    grammar = compiled_grammar.grammar
    nullable = _automaton_of(grammar, "compiled_grammar.grammar").rule_nullable
    # the automaton numbers the grammar's rules first, helper rules after them
    return [i for i in range(len(grammar.ir.rules)) if nullable[i]]


def _print_grammar_fsms(grammar: Grammar) -> str:
    """treegram's automaton of ``grammar``, one block per rule: its start state, final
    states, byte edges (as byte ranges) and rule-call edges. For reading and debugging; the
    layout is treegram's own, not xgrammar's FSM printout."""
    a = _automaton_of(grammar, "grammar")
    by_class: dict[int, list[int]] = {}
    for byte in range(256):
        by_class.setdefault(int(a.byte_class[byte]), []).append(byte)
    trans = a.trans.reshape(a.n_states, a.n_classes)
    lines = []
    for rid, name in enumerate(a.rule_names):
        states = np.flatnonzero(a.state_rule == rid)
        finals = [int(s) for s in states if a.state_final[s]]
        lines.append(f"{name}: start={int(a.rule_start[rid])} final={finals}")
        for s in states:
            targets: dict[int, list[int]] = {}
            for cls in range(a.n_classes):
                t = int(trans[s, cls])
                if t >= 0:
                    targets.setdefault(t, []).extend(by_class[cls])
            for t, byte_list in sorted(targets.items()):
                lines.append(f"  {int(s)} -[{_byte_ranges(sorted(byte_list))}]-> {t}")
            for e in range(int(a.ref_ptr[s]), int(a.ref_ptr[s + 1])):
                callee = a.rule_names[int(a.ref_rule[e])]
                lines.append(f"  {int(s)} -<{callee}>-> {int(a.ref_target[e])}")
    return "\n".join(lines) + "\n"


def _byte_ranges(byte_list: list[int]) -> str:
    parts = []
    start = prev = byte_list[0]
    for b in [*byte_list[1:], -1]:
        if b == prev + 1:
            prev = b
            continue
        parts.append(f"{start:#04x}" if start == prev else f"{start:#04x}-{prev:#04x}")
        start = prev = b
    return " ".join(parts)


def _is_rule_fsm_accept_string(grammar: Grammar, rule_id: int, input_str: str) -> bool:
    """Whether rule ``rule_id`` (its position in the grammar's rules) derives
    ``input_str`` exactly, with the other rules as they are.

    Raises
    ------
    ArgumentError
        ``rule_id`` is not a rule of ``grammar``.
    """
    if not isinstance(grammar, Grammar):
        raise ArgumentTypeError(f"grammar must be a Grammar, got {type(grammar).__name__}")
    rules = grammar.ir.rules
    if not isinstance(rule_id, int) or not 0 <= rule_id < len(rules):
        raise ArgumentError(f"rule_id must be in [0, {len(rules)}), got {rule_id!r}")
    as_root = Grammar.from_ir(GrammarIR(rules, rules[rule_id].name))
    return _is_grammar_accept_string(as_root, input_str)


def _unchanged(why: str) -> staticmethod[[Grammar], Grammar]:
    """A GrammarFunctor pass that returns its grammar as it is, for the reason ``why``."""

    def unchanged(grammar: Grammar) -> Grammar:
        return GrammarFunctor._same(grammar)

    unchanged.__doc__ = f"The grammar unchanged ({why})."
    return staticmethod(unchanged)


class GrammarFunctor:
    """xgrammar's grammar passes, for tests written against ``xgrammar.testing``.

    xgrammar rewrites a grammar in separate passes (normalising its structure, inlining
    rules, fusing byte strings, adding lookahead assertions, building rule FSMs) and its
    tests call them one by one. treegram's IR needs none of them before building its
    automaton, so each pass returns a grammar of the same language: the grammar itself,
    except :meth:`dead_code_eliminator`, which drops the rules the root cannot reach.
    Printed text differs from xgrammar's after a pass; languages do not.
    """

    @staticmethod
    def _same(grammar: Grammar) -> Grammar:
        if not isinstance(grammar, Grammar):
            raise ArgumentTypeError(f"grammar must be a Grammar, got {type(grammar).__name__}")
        return grammar

    structure_normalizer = _unchanged("treegram's IR has no structure to normalise")
    rule_inliner = _unchanged("treegram inlines nothing before building its automaton")
    byte_string_fuser = _unchanged("treegram's IR keeps strings as single byte strings")
    lookahead_assertion_analyzer = _unchanged("treegram derives follow sets in its automaton")
    grammar_optimizer = _unchanged("treegram optimises its automaton, not the grammar")
    fsm_builder = _unchanged("treegram builds its automaton when compiling")
    repetition_normalizer = _unchanged("treegram expands repetitions in its automaton")

    @staticmethod
    def dead_code_eliminator(grammar: Grammar) -> Grammar:
        """The grammar without the rules that the root rule cannot reach."""
        ir = GrammarFunctor._same(grammar).ir
        reached = {ir.root}
        todo = [ir.root]
        while todo:
            rule = ir.rule(todo.pop())
            for body in (rule.body, rule.lookahead):
                for name in _referenced(body):
                    if name not in reached:
                        reached.add(name)
                        todo.append(name)
        kept = tuple(r for r in ir.rules if r.name in reached)
        if len(kept) == len(ir.rules):
            return grammar
        return Grammar.from_ir(GrammarIR(kept, ir.root))


def _referenced(expr: Any) -> list[str]:
    """Names of the rules ``expr`` refers to (iterative: IR may nest deeply)."""
    out = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if e is None:
            continue
        if isinstance(e, RuleRef):
            out.append(e.name)
        elif isinstance(e, (Seq, Choice)):
            stack.extend(e.items)
        elif isinstance(e, Repeat):
            stack.append(e.item)
    return out


# ----------------------------------------------------------------------------- range regexes
# Regular expressions (anchored, Python/ECMAScript syntax) for integer and decimal ranges,
# built digit by digit: xgrammar's helpers have these names; the expressions are treegram's
# own (equal in what they match for integers, not in spelling).


def _digit(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    return r"\d" if (lo, hi) == (0, 9) else f"[{lo}-{hi}]"


def _any_digits(n: int) -> str:
    return "" if n == 0 else r"\d" if n == 1 else rf"\d{{{n}}}"


def _same_width(lo: str, hi: str) -> list[str]:
    """Alternatives for the digit strings of one width from ``lo`` to ``hi``."""
    if not lo:
        return [""]
    if lo[0] == hi[0]:
        return [lo[0] + rest for rest in _same_width(lo[1:], hi[1:])]
    n = len(lo) - 1
    out = []
    start, stop = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * n:
        out += [lo[0] + rest for rest in _same_width(lo[1:], "9" * n)]
        start += 1
    if hi[1:] != "9" * n:
        stop -= 1
    if start <= stop:
        out.append(_digit(start, stop) + _any_digits(n))
    if hi[1:] != "9" * n:
        out += [hi[0] + rest for rest in _same_width("0" * n, hi[1:])]
    return out


def _natural_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the canonical decimal integers in ``[lo, hi]`` (``lo >= 0``;
    ``hi`` None: unbounded)."""
    out = []
    if lo == 0:
        out.append("0")
        lo = 1
    width = len(str(lo))
    while hi is None or lo <= hi:
        if hi is None and lo == 10 ** (width - 1):
            out.append(r"[1-9]\d*" if width == 1 else rf"[1-9]\d{{{width - 1},}}")
            break
        top = 10**width - 1 if hi is None else min(hi, 10**width - 1)
        out += _same_width(str(lo), str(top))
        lo, width = top + 1, width + 1
    return out


def _check_bound(value: Any, name: str, kind: type | tuple) -> None:
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise ArgumentTypeError(f"{name} must be a number or None, got {type(value).__name__}")


def _generate_range_regex(start: int | None = None, end: int | None = None) -> str:
    """An anchored regex for the integers from ``start`` to ``end`` inclusive (None:
    unbounded on that side), in canonical form (no leading zeros, no ``-0``).

    Raises
    ------
    ArgumentError
        ``start > end``, or a bound that is not an int.
    """
    _check_bound(start, "start", int)
    _check_bound(end, "end", int)
    if start is not None and end is not None and start > end:
        raise ArgumentError(f"start must be <= end, got start={start}, end={end}")
    alts = []
    if start is None or start < 0:  # negatives: -y for y in [max(1, -end), -start]
        low = 1 if end is None or end >= 0 else -end
        alts += ["-(" + "|".join(_natural_range(low, None if start is None else -start)) + ")"]
    if end is None or end >= 0:
        alts += _natural_range(max(start or 0, 0), end)
    return "^(" + "|".join(alts) + ")$"


def _fraction(alts: list[str], empty: bool) -> str:
    """A fraction part from its digit-string alternatives; ``empty``: it may be left out."""
    if not alts:
        return "" if empty else "(?!)"
    body = r"\." + (alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")")
    return f"({body})?" if empty else body


def _at_least(f: str, strict: bool) -> tuple[list[str], bool]:
    """Digit strings d (maybe empty) with 0.d >= 0.f (> when strict); f has no trailing 0."""
    if not f:
        return ([r"0*[1-9]\d*"], False) if strict else ([r"\d+"], True)
    alts = [f[:k] + _digit(int(f[k]) + 1, 9) + r"\d*" for k in range(len(f)) if f[k] != "9"]
    return [*alts, f + (r"0*[1-9]\d*" if strict else r"\d*")], False


def _at_most(f: str, strict: bool) -> tuple[list[str], bool]:
    """Digit strings d (maybe empty) with 0.d <= 0.f (< when strict)."""
    if not f:
        return ([], False) if strict else (["0+"], True)
    alts = [f[:k] + _digit(0, int(f[k]) - 1) + r"\d*" for k in range(len(f)) if f[k] != "0"]
    alts += [f[:k] + "0*" for k in range(1, len(f))]
    if not strict:
        alts.append(f + "0*")
    return alts, True


def _between(lo: str, hi: str, lo_strict: bool, hi_strict: bool) -> tuple[list[str], bool]:
    """Digit strings d with 0.lo <= 0.d <= 0.hi (strict where asked); 0.lo <= 0.hi, and
    the bounds are not both strict when equal."""
    if lo == hi:  # the bound itself, with trailing zeros
        return ([lo + "0*"], False) if lo else (["0+"], True)
    lo = lo.ljust(len(hi), "0")  # 0.lo < 0.hi: hi is not shorter once both are padded
    p = 0
    while lo[p] == hi[p]:
        p += 1
    prefix, a, b = hi[:p], int(lo[p]), int(hi[p])
    lo = lo.rstrip("0")
    alts: list[str] = []
    empty = False
    if p >= len(lo) and not lo_strict:  # lo and zeros, up to the prefix: the bound itself
        for j in range(len(lo), p + 1):
            if j:
                alts.append(prefix[:j])
            else:
                empty = True
    rest, rest_empty = _at_least(lo[p + 1 :], lo_strict)
    alts += [prefix + str(a) + r for r in rest] + ([prefix + str(a)] if rest_empty else [])
    if a + 1 <= b - 1:
        alts.append(prefix + _digit(a + 1, b - 1) + r"\d*")
    rest, rest_empty = _at_most(hi[p + 1 :], hi_strict)
    alts += [prefix + str(b) + r for r in rest] + ([prefix + str(b)] if rest_empty else [])
    return alts, empty


def _split(value: Decimal) -> tuple[int, str]:
    text = format(value, "f")
    whole, _, frac = text.partition(".")
    return int(whole), frac.rstrip("0")


def _nonnegative_decimals(
    lo: Decimal, lo_strict: bool, hi: Decimal | None, hi_strict: bool
) -> list[str]:
    """Alternatives for the decimals ``I(.D)?`` with ``lo <= x <= hi`` (strict where asked),
    ``0 <= lo``; ``hi`` None: unbounded."""
    li, lf = _split(lo)
    any_fraction = r"(\.\d+)?"
    if hi is None:
        return [
            f"{li}{_fraction(*_at_least(lf, lo_strict))}",
            *(n + any_fraction for n in _natural_range(li + 1, None)),
        ]
    hi_int, hf = _split(hi)
    if li == hi_int:
        return [f"{li}{_fraction(*_between(lf, hf, lo_strict, hi_strict))}"]
    out = [f"{li}{_fraction(*_at_least(lf, lo_strict))}"]
    if li + 1 <= hi_int - 1:
        out += [n + any_fraction for n in _natural_range(li + 1, hi_int - 1)]
    return [*out, f"{hi_int}{_fraction(*_at_most(hf, hi_strict))}"]


def _generate_float_regex(
    start: float | None = None,
    end: float | None = None,
    exclusive_start: bool = False,
    exclusive_end: bool = False,
) -> str:
    """An anchored regex for the decimal numbers ``-?I(.D)?`` between ``start`` and
    ``end`` (None: unbounded; ``exclusive_*``: the bound itself left out). A bound is read
    as the shortest decimal that round-trips (``0.1`` is 1/10), and fractions may have any
    number of digits.

    Raises
    ------
    ArgumentError
        The range is empty, or a bound is not a finite number.
    """
    _check_bound(start, "start", (int, float))
    _check_bound(end, "end", (int, float))
    lo = None if start is None else Decimal(repr(start))
    hi = None if end is None else Decimal(repr(end))
    for name, v in (("start", lo), ("end", hi)):
        if v is not None and not v.is_finite():
            raise ArgumentError(f"{name} must be finite, got {v}")
    if (
        lo is not None
        and hi is not None
        and (lo > hi or (lo == hi and (exclusive_start or exclusive_end)))
    ):
        raise ArgumentError(f"the range from start={start} to end={end} is empty")
    alts = []
    if lo is None or lo < 0:  # negatives: -y, 0 < y, y from max(0, -end) to -start
        y_hi = None if lo is None else -lo
        if hi is None or hi >= 0:
            y_lo, y_lo_strict = Decimal(0), True
        else:
            y_lo, y_lo_strict = -hi, exclusive_end
        neg = _nonnegative_decimals(y_lo, y_lo_strict, y_hi, exclusive_start)
        alts.append("-(" + "|".join(neg) + ")")
    if hi is None or hi > 0 or (hi == 0 and not exclusive_end):
        if lo is None or lo < 0:
            p_lo, p_strict = Decimal(0), False
        else:
            p_lo, p_strict = lo, exclusive_start
        alts += _nonnegative_decimals(p_lo, p_strict, hi, exclusive_end)
    return "^(" + "|".join(alts) + ")$"
