"""The binary format of a compiled grammar: compact, versioned, checksummed.

This module turns a compiled grammar's parts (grammar, automaton, token classes) into
bytes and back; it knows nothing of :class:`CompiledGrammar`, whose module assembles the
parts (``serialize_compiled``, ``deserialize_compiled``, ``save_compiled`` and
``load_compiled`` live in :mod:`._compiled`).

The format (documented byte by byte in ``docs/serialization.md``) is a fixed 64-byte
header, a directory of one 24-byte entry per section, the sections themselves (flat
little-endian arrays, each starting on an 8-byte boundary, zero padding between them) and
a 16-byte BLAKE2b checksum of everything before it. The complete automaton, the grammar
source (EBNF), the classified part of the de-duplicated token classification, the
tokenizer fingerprint and the cache-store key (if any) are each written exactly once.

Loading is fail-closed: every byte is checked (magic, version, size, checksum, the
directory, every section's dtype and length, every cross-reference between arrays, the
padding, that the payload pays for every count that sizes an allocation) and the
tokenizer and cache key are compared *before* any object is built, so a bad input
raises :class:`DeserializeFormatError`, :class:`DeserializeVersionError` or
:class:`TokenizerMismatchError` and nothing else is returned or left half-built.

Every function here is thread-safe: serialization works on a snapshot of the mask store
(:meth:`MaskStore.export_classes`), and loading touches no shared state.
"""

from __future__ import annotations

import hashlib
import re
import struct

import numpy as np

from ..automaton import LOOKAHEAD_SUFFIX, Automaton, split_long_repeats
from ..errors import (
    ArgumentError,
    DeserializeFormatError,
    DeserializeVersionError,
    TokenizerError,
    TokenizerMismatchError,
    TreegramError,
)
from ..grammar import Grammar
from ..kernels import CONTEXT_MAX_CALLERS, CONTEXT_MAX_CHAIN, layout
from ..tokenizer import TokenizerInfo
from ._mask_store import KIND_BITSET, KIND_LIST, context_entries
from ._store import check_key, open_regular_file, path_argument

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "DeserializeFormatError",
    "DeserializeVersionError",
    "TokenizerMismatchError",
    "encode_compiled",
    "decode_bytes",
    "decode_file",
]


MAGIC = b"TGRM"
FORMAT_VERSION = 6  # 6: state_chars of counted rules; 5: state_final 2 for unique rules

# magic, version, total_size, n_sections, flags, n_rules, n_states, n_byte_classes,
# root_rule, n_ref_edges, n_mask_classes, vocab_size, n_sorted_tokens, reserved
_HEADER = struct.Struct("<4sIQIIIIIIIIIIQ")
_ENTRY = struct.Struct("<IIQQ")  # section id, dtype code, byte offset, element count
_CHECKSUM_SIZE = 16
_ALIGN = 8
_U32_MAX = 0xFFFFFFFF
_KEY_BYTES = re.compile(rb"[0-9a-f]{16,128}\Z")

_U8, _I32, _I64, _U16 = 1, 2, 3, 4
_DTYPES = {
    _U8: np.dtype("<u1"),
    _I32: np.dtype("<i4"),
    _I64: np.dtype("<i8"),
    _U16: np.dtype("<u2"),
}

# Fixed section order of format version 4: (name, dtype code). The id is the position.
# (Version 4 adds the context classes; version 3 the cache key and the checks that bound
# the automaton by its payload;
# version 2 stores the byte transitions sparsely; version 1 wrote the dense table.)
_SECTIONS = (
    ("rule_name_ptr", _I32),  # [n_rules + 1] offsets into rule_name_data
    ("rule_name_data", _U8),  # UTF-8 rule names, concatenated
    ("rule_start", _I32),  # [n_rules]
    ("rule_nullable", _U8),  # [n_rules]
    ("rule_lookahead", _I32),  # [n_rules]
    ("rule_follow", _U8),  # [n_rules * 256]
    ("state_rule", _I32),  # [n_states]
    ("state_final", _U8),  # [n_states]
    ("byte_class", _I32),  # [256]
    ("trans_ptr", _I32),  # [n_states + 1] offsets of each state's byte transitions
    ("trans_class", _U8),  # [n_transitions] byte class, strictly increasing per state
    ("trans_target", _I32),  # [n_transitions] target state (uint16 if n_states <= 65536)
    ("ref_ptr", _I32),  # [n_states + 1]
    ("ref_rule", _I32),  # [n_ref_edges]
    ("ref_target", _I32),  # [n_ref_edges]
    ("grammar_root", _U8),  # UTF-8 root rule name
    ("grammar_ebnf", _U8),  # UTF-8 EBNF source
    ("state_class", _I32),  # [n_states], -1 = not classified
    ("class_meta", _I64),  # [n_mask_classes * 5]
    ("class_digest", _U8),  # [n_mask_classes * 16]
    ("acc_pool", _I32),  # accepted lists / bitsets, back to back
    ("unc_pool", _I32),  # uncertain sorted-vocabulary positions, back to back
    ("context_classes", _I32),  # entries [-(3 + m + k), state, m, chain, callers, class id]
    ("tokenizer_fingerprint", _U8),  # ASCII hex
    ("cache_key", _U8),  # ASCII lowercase hex store key the blob was written under, or empty
    ("state_chars", _I32),  # [n_states] with counted rules, else empty (Automaton.state_chars)
)
_N_SECTIONS = len(_SECTIONS)


def _section_codes(n_states: int) -> dict[str, int]:
    """Dtype code of every section for a grammar of ``n_states`` (one canonical choice)."""
    codes = dict(_SECTIONS)
    if n_states <= 0x10000:
        codes["trans_target"] = _U16
    return codes


_SECTION_ID = {name: i for i, (name, _) in enumerate(_SECTIONS)}
_DATA_START = -(-(_HEADER.size + _N_SECTIONS * _ENTRY.size) // _ALIGN) * _ALIGN


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _checksum(buf) -> bytes:
    return hashlib.blake2b(buf, digest_size=_CHECKSUM_SIZE).digest()


# ---------------------------------------------------------------------------- writing


def encode_compiled(
    grammar, tokenizer_info, automaton: Automaton, classes: tuple, cache_key: str | None
) -> bytes:
    """The binary form of a compiled grammar's parts (see ``docs/serialization.md``).

    ``classes`` is :meth:`MaskStore.export_classes` output. The output is deterministic:
    equal parts give equal bytes.

    Raises
    ------
    ArgumentError
        ``cache_key`` is not a valid key, or a count does not fit the format.
    """
    key = b"" if cache_key is None else check_key(cache_key, "cache_key").encode("ascii")
    a = automaton
    info = tokenizer_info
    state_class, meta, digests, acc, unc, contexts = classes
    names = [n.encode("utf-8") for n in a.rule_names]
    name_ptr = np.zeros(len(names) + 1, dtype=np.int64)
    name_ptr[1:] = np.cumsum([len(n) for n in names])
    dense = a.trans.reshape(a.n_states, a.n_classes)
    has = dense >= 0
    trans_ptr = np.zeros(a.n_states + 1, dtype=np.int32)
    np.cumsum(has.sum(axis=1), out=trans_ptr[1:])
    trans_cls = np.nonzero(has)[1].astype(np.uint8)  # row-major: classes ascend per state
    trans_to = dense[has].astype(np.int32)
    parts = {
        "rule_name_ptr": name_ptr,
        "rule_name_data": np.frombuffer(b"".join(names), dtype=np.uint8),
        "rule_start": a.rule_start,
        "rule_nullable": a.rule_nullable,
        "rule_lookahead": a.rule_lookahead,
        "rule_follow": a.rule_follow.reshape(-1),
        "state_rule": a.state_rule,
        "state_final": a.state_final,
        "byte_class": a.byte_class,
        "trans_ptr": trans_ptr,
        "trans_class": trans_cls,
        "trans_target": trans_to,
        "ref_ptr": a.ref_ptr,
        "ref_rule": a.ref_rule,
        "ref_target": a.ref_target,
        "grammar_root": np.frombuffer(grammar.root_rule_name.encode("utf-8"), np.uint8),
        "grammar_ebnf": np.frombuffer(grammar.to_ebnf().encode("utf-8"), np.uint8),
        "state_class": state_class,
        "class_meta": meta.reshape(-1),
        "class_digest": digests.reshape(-1),
        "acc_pool": acc,
        "unc_pool": unc,
        "context_classes": contexts,
        "tokenizer_fingerprint": np.frombuffer(info.fingerprint.encode("ascii"), np.uint8),
        "cache_key": np.frombuffer(key, np.uint8),
        "state_chars": a.state_chars,
    }
    counts = (
        a.n_rules,
        a.n_states,
        a.n_classes,
        a.root_rule,
        a.ref_rule.shape[0],
        meta.shape[0],
        info.vocab_size,
        len(info.sorted_vocab),
    )
    if max(counts) > _U32_MAX or name_ptr[-1] > np.iinfo(np.int32).max:
        raise ArgumentError(f"compiled grammar too large for format {FORMAT_VERSION}")
    return _pack(counts, parts)


def _pack(counts: tuple, parts: dict) -> bytes:
    """Lay out the header, the directory, the sections (in canonical order) and the checksum.

    ``counts`` are the eight header counts (n_rules .. n_sorted_tokens); ``parts`` maps every
    section name to its array. Nothing is validated here: that is the loader's job.
    """
    entries = []
    pos = _DATA_START
    blobs = []
    codes = _section_codes(counts[1])
    for sid, (name, _) in enumerate(_SECTIONS):
        code = codes[name]
        arr = np.ascontiguousarray(parts[name], dtype=_DTYPES[code])
        entries.append(_ENTRY.pack(sid, code, pos, arr.shape[0]))
        blobs.append((pos, arr))
        pos = _align(pos + arr.nbytes)
    total = pos + _CHECKSUM_SIZE
    buf = bytearray(total)
    buf[: _HEADER.size] = _HEADER.pack(MAGIC, FORMAT_VERSION, total, _N_SECTIONS, 0, *counts, 0)
    buf[_HEADER.size : _HEADER.size + _N_SECTIONS * _ENTRY.size] = b"".join(entries)
    for off, arr in blobs:
        buf[off : off + arr.nbytes] = arr.tobytes()
    buf[-_CHECKSUM_SIZE:] = _checksum(memoryview(buf)[:-_CHECKSUM_SIZE])
    return bytes(buf)


# ---------------------------------------------------------------------------- reading


def _fail(message: str):
    raise DeserializeFormatError(f"corrupt compiled grammar: {message}")


def _check(ok, message: str) -> None:
    if not ok:
        _fail(message)


def _native(arr: np.ndarray) -> np.ndarray:
    """``arr`` in native byte order (a view on little-endian hosts)."""
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def _sections(raw: np.ndarray, counts: dict, codes: dict) -> dict:
    """Validate the directory against the canonical layout; return each section's array."""
    table = raw[_HEADER.size : _HEADER.size + _N_SECTIONS * _ENTRY.size].tobytes()
    end = raw.shape[0] - _CHECKSUM_SIZE
    out = {}
    pos = _DATA_START
    _check(
        not raw[_HEADER.size + _N_SECTIONS * _ENTRY.size : _DATA_START].any(),
        "non-zero padding after the section directory",
    )
    for sid, (name, _) in enumerate(_SECTIONS):
        code = codes[name]
        got_id, got_code, off, count = _ENTRY.unpack_from(table, sid * _ENTRY.size)
        _check(got_id == sid, f"section {sid} ({name}) has id {got_id}")
        _check(got_code == code, f"section {name} has dtype code {got_code}, expected {code}")
        _check(off == pos, f"section {name} at byte {off}, expected {pos}")
        dtype = _DTYPES[code]
        nbytes = count * dtype.itemsize
        _check(off + nbytes <= end, f"section {name} ({count} items) runs past the data")
        want = counts.get(name)
        _check(want is None or count == want, f"section {name} has {count} items, expected {want}")
        out[name] = _native(raw[off : off + nbytes].view(dtype))
        pos = _align(off + nbytes)
        _check(
            pos <= end and not raw[off + nbytes : pos].any(),
            f"non-zero padding after section {name}",
        )
    _check(pos == end, f"{end - pos} unexpected bytes after the last section")
    return out


def _increasing(values: np.ndarray, strict: bool) -> bool:
    d = np.diff(values.astype(np.int64))
    return bool((d > 0).all() if strict else (d >= 0).all())


def _in_range(values: np.ndarray, lo: int, hi: int) -> bool:
    """Every value in ``[lo, hi)`` (vacuously true when empty)."""
    return values.shape[0] == 0 or (int(values.min()) >= lo and int(values.max()) < hi)


def _is_flag(values: np.ndarray) -> bool:
    return values.shape[0] == 0 or int(values.max()) <= 1


def _decode(arr: np.ndarray, what: str) -> str:
    try:
        return arr.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        _fail(f"{what} is not valid UTF-8")


def _validate_automaton(s: dict, h: dict) -> tuple[tuple[str, ...], int]:
    """Check every invariant of the automaton arrays; returns (rule names, n real rules)."""
    n_rules, n_states, n_cls = h["n_rules"], h["n_states"], h["n_byte_classes"]
    ptr = s["rule_name_ptr"]
    _check(
        ptr[0] == 0 and _increasing(ptr, strict=True) and ptr[-1] == s["rule_name_data"].shape[0],
        "rule name offsets",
    )
    blob = s["rule_name_data"].tobytes()
    ptr_l = ptr.tolist()
    try:
        names = tuple(blob[ptr_l[i] : ptr_l[i + 1]].decode("utf-8") for i in range(n_rules))
    except UnicodeDecodeError:
        _fail("a rule name is not valid UTF-8")
    _check(len(set(names)) == n_rules, "duplicate rule names")
    is_la = [n.endswith(LOOKAHEAD_SUFFIX) for n in names]
    n_real = is_la.index(True) if True in is_la else n_rules
    _check(
        n_real >= 1 and not any(is_la[:n_real]) and all(is_la[n_real:]),
        "lookahead pseudo-rules must follow the grammar rules",
    )
    _check(h["root_rule"] < n_real, f"root rule {h['root_rule']} is not a grammar rule")

    rule_start = s["rule_start"]
    _check(
        rule_start[0] == 0
        and _increasing(rule_start, strict=True)
        and int(rule_start[-1]) < n_states,
        "rule start states",
    )
    sizes = np.diff(np.append(rule_start.astype(np.int64), n_states))
    state_rule = s["state_rule"]
    _check(
        np.array_equal(state_rule, np.repeat(np.arange(n_rules, dtype=np.int32), sizes)),
        "state_rule does not match the rules' state blocks",
    )
    _check(
        _is_flag(s["rule_nullable"]) and _is_flag(s["rule_follow"]),
        "a flag array holds a value other than 0/1",
    )
    final = s["state_final"]
    # 2 marks a unique rule's final states (all of them): every rule's finals read alike
    _check(final.shape[0] == 0 or int(final.max()) <= 2, "state_final holds a value above 2")
    unique_rules = state_rule[final == 2]
    _check(
        not np.isin(state_rule[final == 1], unique_rules).any(),
        "a unique rule has a final state not marked 2",
    )

    la = s["rule_lookahead"]
    la_real = la[:n_real]
    has_la = la_real >= 0
    _check(
        _in_range(la_real, -1, n_rules) and (la[n_real:] == -1).all(),
        "rule_lookahead entries out of range",
    )
    targets = np.sort(la_real[has_la])
    _check(
        np.array_equal(targets, np.arange(n_real, n_rules)),
        "rule_lookahead must map onto the lookahead pseudo-rules one to one",
    )
    for r in np.flatnonzero(has_la).tolist():
        _check(
            names[int(la[r])] == names[r] + LOOKAHEAD_SUFFIX,
            f"lookahead rule of {names[r]!r} is misnamed",
        )

    bc = s["byte_class"]
    _check(
        1 <= n_cls <= 256
        and bc[0] == 0
        and int(bc[-1]) == n_cls - 1
        and _in_range(np.diff(bc), 0, 2),
        "byte classes",
    )

    t_ptr, t_cls = s["trans_ptr"], s["trans_class"]
    t_to = s["trans_target"].astype(np.int32)
    n_t = t_to.shape[0]
    _check(
        t_cls.shape[0] == n_t
        and t_ptr[0] == 0
        and _increasing(t_ptr, strict=False)
        and t_ptr[-1] == n_t,
        "byte transition offsets",
    )
    _check(_in_range(t_cls, 0, n_cls), "byte transition class out of range")
    _check(_in_range(t_to, 0, n_states), "transition target out of range")
    src = np.repeat(np.arange(n_states, dtype=np.int64), np.diff(t_ptr))
    # classes strictly increase within a state (one canonical encoding, no duplicates)
    step = np.diff(t_cls.astype(np.int64))
    same_state = np.diff(src) == 0
    _check(bool((step[same_state] > 0).all()), "byte transitions not sorted by class")
    _check(np.array_equal(state_rule[t_to], state_rule[src]), "a transition leaves its rule")

    ref_ptr, ref_rule, ref_target = s["ref_ptr"], s["ref_rule"], s["ref_target"]
    n_ref = ref_rule.shape[0]
    _check(
        ref_ptr[0] == 0 and _increasing(ref_ptr, strict=False) and ref_ptr[-1] == n_ref,
        "rule-call edge offsets",
    )
    _check(_in_range(ref_rule, 0, n_real), "a rule call targets an unknown rule")
    _check(_in_range(ref_target, 0, n_states), "rule-call return state out of range")
    ref_src = np.repeat(np.arange(n_states, dtype=np.int64), np.diff(ref_ptr))
    _check(
        np.array_equal(state_rule[ref_target], state_rule[ref_src]),
        "a rule-call edge leaves its rule",
    )

    # The header counts justify no memory by themselves: the dense transition table below
    # costs n_states * n_byte_classes words, so both counts must be paid for by edges in
    # the payload, exactly as the builder produces them.
    # (1) States are numbered in discovery order, so every state but its rule's start is
    # the target of an edge from a lower-numbered state (of the same rule, checked above):
    # every state is reachable and n_states <= n_rules + n_transitions + n_ref_edges.
    reached = np.zeros(n_states, dtype=bool)
    reached[rule_start] = True
    reached[t_to[src < t_to]] = True
    reached[ref_target[ref_src < ref_target]] = True
    _check(
        bool(reached.all()),
        f"{int(n_states - reached.sum())} of {n_states} states are "
        "reached by no edge from an earlier state of their rule",
    )
    # (2) Byte classes are the coarsest partition the transitions need: some state's
    # transitions differ between classes c - 1 and c, for every c (adjacent transitions of
    # one state with the same target are always merged into one range).
    if n_cls > 1:
        joined = same_state & (step == 1) & (t_to[1:] == t_to[:-1])
        lower = np.ones(n_t, dtype=bool)  # transition k differs from class t_cls[k] - 1
        lower[1:] = ~joined
        upper = np.ones(n_t, dtype=bool)  # transition k differs from class t_cls[k] + 1
        upper[:-1] = ~joined
        split = np.zeros(n_cls + 1, dtype=bool)
        split[t_cls[lower]] = True
        split[t_cls[upper].astype(np.int64) + 1] = True
        _check(bool(split[1:n_cls].all()), "a byte class boundary that no transition needs")
    # (3) The kernels address the packed automaton with int32 offsets.
    words = n_states * (n_cls + 3) + 2 * n_rules + 2 * n_ref + 1024
    _check(
        words <= np.iinfo(np.int32).max,
        f"automaton of {n_states} states x {n_cls} byte classes exceeds the int32 layout",
    )
    trans = np.full(n_states * n_cls, -1, dtype=np.int32)
    trans[src * n_cls + t_cls] = t_to
    s["trans"] = trans
    return names, n_real


def _validate_grammar(s: dict, names: tuple, n_real: int, rule_lookahead, root_rule: int):
    """Parse the EBNF source and check it names the automaton's rules; returns the Grammar."""
    root = _decode(s["grammar_root"], "root rule name")
    text = _decode(s["grammar_ebnf"], "grammar source")
    try:
        grammar = Grammar.from_ebnf(text, root_rule_name=root)
    except (TreegramError, ValueError, RecursionError) as exc:
        _fail(f"grammar source does not parse ({type(exc).__name__}: {exc})")
    _check(names[root_rule] == root, "root rule name differs from the automaton's root")
    # the builder adds helper rules for long repetitions (split_long_repeats): compare
    # against the rules it actually builds, or such a grammar never loads
    la_of = {r.name: r.lookahead is not None for r in split_long_repeats(grammar.ir).rules}
    real = {names[r]: bool(rule_lookahead[r] >= 0) for r in range(n_real)}
    _check(la_of == real, "grammar source and automaton define different rules")
    return grammar


def _validate_counted(s: dict, grammar, names: tuple) -> None:
    """Check ``state_chars`` against the grammar's counted rules: a limit on exactly their
    states (at least -1, below NOT_COUNTED), none elsewhere."""
    chars = s["state_chars"]
    counted = {r.name for r in grammar.ir.rules if r.max_string_chars is not None}
    if not counted:
        _check(chars.shape[0] == 0, "state_chars without a counted rule")
        return
    state_rule = s["state_rule"]
    _check(chars.shape[0] == state_rule.shape[0], "state_chars is not one entry per state")
    ids = np.array([i for i, name in enumerate(names) if name in counted], dtype=np.int32)
    inside = np.isin(state_rule, ids)
    _check(
        bool((chars[~inside] == layout.NOT_COUNTED).all())
        and bool(((chars[inside] >= -1) & (chars[inside] < layout.NOT_COUNTED)).all()),
        "state_chars does not match the counted rules",
    )


def _token_rules(grammar, names: tuple) -> tuple:
    """The token-id rules of ``grammar`` by automaton rule id (``_validate_grammar`` has
    checked that the grammar and the automaton name the same rules)."""
    ids = {name: i for i, name in enumerate(names)}
    return tuple((ids[r.name], r.tokens) for r in grammar.ir.rules if r.tokens is not None)


def _validate_contexts(words: np.ndarray, n_states: int, n_classes: int) -> np.ndarray:
    """Check the context entries (``MaskStore.export_classes``); returns their class ids."""
    cids = []
    keys = set()
    for _, e in context_entries(words.tolist()):
        n = len(e) - 1
        _check(3 <= n <= 3 + CONTEXT_MAX_CHAIN + CONTEXT_MAX_CALLERS, "context entry length")
        _check(e[0] == -n, "context entry past the section")
        state, m = e[1], e[2]
        _check(0 <= m <= min(CONTEXT_MAX_CHAIN, n - 3), "context chain length")
        chain, callers, cid = e[3 : 3 + m], e[3 + m : n], e[n]
        _check(len(callers) <= CONTEXT_MAX_CALLERS, "context caller count")
        _check(
            0 <= state < n_states and all(0 <= c < n_states for c in chain + callers),
            "context state out of range",
        )
        _check(
            all(a < b for a, b in zip(callers, callers[1:], strict=False)),
            "context callers not sorted",
        )
        _check(0 <= cid < n_classes, "context class id out of range")
        key = tuple(e[1:n])
        _check(key not in keys, "duplicate context entry")
        keys.add(key)
        cids.append(cid)
    return np.array(cids, dtype=np.int64)


def _validate_store(s: dict, h: dict) -> None:
    """Check the classified token sets against the counts and the tokenizer sizes."""
    n = h["n_mask_classes"]
    n_words = (h["vocab_size"] + 31) // 32
    sc = s["state_class"]
    _check(_in_range(sc, -1, n), "state class id out of range")
    context_cids = _validate_contexts(s["context_classes"], h["n_states"], n)
    used = np.bincount(sc[sc >= 0], minlength=n) + np.bincount(context_cids, minlength=n)
    _check(n == 0 or bool((used > 0).all()), "a stored class is used by no state or context")
    meta = s["class_meta"].reshape(n, 5)
    kind, acc_off, acc_len, unc_off, unc_len = (meta[:, k] for k in range(5))
    _check(_in_range(kind, KIND_LIST, KIND_BITSET + 1), "class kind is not list/bitset")
    _check(
        _in_range(acc_len, 0, n_words + 1) and _in_range(unc_len, 0, h["n_sorted"] + 1),
        "class set length out of range",
    )
    bitset = kind == KIND_BITSET
    _check(
        (acc_len[bitset] == n_words).all() and (acc_len[~bitset] < n_words).all(),
        "class stored in the wrong form for its size",
    )
    for pool, off, length, what in (
        (s["acc_pool"], acc_off, acc_len, "accepted"),
        (s["unc_pool"], unc_off, unc_len, "uncertain"),
    ):
        start = np.zeros(n, dtype=np.int64)
        np.cumsum(length[:-1], out=start[1:])
        _check(
            np.array_equal(off, start) and int(length.sum()) == pool.shape[0],
            f"{what} pool offsets are not back to back",
        )
    # accepted lists: token ids, strictly increasing within each class
    acc = s["acc_pool"]
    seg = np.repeat(np.arange(n), acc_len)
    is_list = ~bitset[seg]
    vals = acc[is_list]
    _check(_in_range(vals, 0, h["vocab_size"]), "accepted token id out of range")
    _check(_sorted_segments(vals, seg[is_list]), "accepted token ids not sorted")
    rem = h["vocab_size"] % 32
    if rem and bitset.any():
        last = acc[acc_off[bitset] + n_words - 1].view(np.uint32)
        _check(not (last >> np.uint32(rem)).any(), "bitset sets a bit past vocab_size")
    unc = s["unc_pool"]
    _check(_in_range(unc, 0, h["n_sorted"]), "uncertain token index out of range")
    _check(
        _sorted_segments(unc, np.repeat(np.arange(n), unc_len)),
        "uncertain token indices not sorted",
    )
    digests = s["class_digest"].reshape(n, 16)
    _check(np.unique(digests.view("V16").reshape(-1)).shape[0] == n, "duplicate class digests")


def _sorted_segments(values: np.ndarray, seg: np.ndarray) -> bool:
    """Strictly increasing inside every run of equal ``seg``."""
    if values.shape[0] < 2:
        return True
    same = seg[1:] == seg[:-1]
    return bool((np.diff(values.astype(np.int64))[same] > 0).all())


def _check_args(tokenizer_info, cache_key) -> None:
    if not isinstance(tokenizer_info, TokenizerInfo):
        raise TokenizerError(
            f"tokenizer_info must be a treegram.TokenizerInfo, got {type(tokenizer_info).__name__}"
        )
    if cache_key is not None:
        check_key(cache_key, "cache_key")


def _load(raw: np.ndarray, tokenizer_info, cache_key: str | None) -> tuple:
    """Validate ``raw`` (uint8, writable, owned by the result); return
    ``(grammar, automaton, classes)`` for :meth:`CompiledGrammar.from_parts`."""
    size = raw.shape[0]
    _check(size >= 8, f"{size} bytes is too short for the header")
    _check(raw[:4].tobytes() == MAGIC, "bad magic bytes (not a treegram compiled grammar)")
    version = int(raw[4:8].view("<u4")[0])
    if version != FORMAT_VERSION:
        raise DeserializeVersionError(
            f"compiled grammar has format version {version}; this treegram reads only "
            f"version {FORMAT_VERSION} (recompile the grammar)"
        )
    _check(size >= _DATA_START + _CHECKSUM_SIZE, f"truncated: {size} bytes")
    fields = _HEADER.unpack_from(raw[: _HEADER.size].tobytes())
    total = fields[2]
    _check(total == size, f"size is {size} bytes, the header says {total} (truncated?)")
    _check(_checksum(raw[:-_CHECKSUM_SIZE]) == raw[-_CHECKSUM_SIZE:].tobytes(), "checksum mismatch")
    (
        _,
        _,
        _,
        n_sections,
        flags,
        n_rules,
        n_states,
        n_cls,
        root,
        n_ref,
        n_mc,
        vocab_size,
        n_sorted,
        reserved,
    ) = fields
    _check(
        n_sections == _N_SECTIONS and flags == 0 and reserved == 0,
        "unexpected section count, flags or reserved header fields",
    )
    _check(
        n_rules >= 1 and n_states >= n_rules and root < n_rules and vocab_size >= 0, "header counts"
    )
    h = dict(
        n_rules=n_rules,
        n_states=n_states,
        n_byte_classes=n_cls,
        root_rule=root,
        n_mask_classes=n_mc,
        vocab_size=vocab_size,
        n_sorted=n_sorted,
    )
    counts = {
        "rule_name_ptr": n_rules + 1,
        "rule_start": n_rules,
        "rule_nullable": n_rules,
        "rule_lookahead": n_rules,
        "rule_follow": n_rules * 256,
        "state_rule": n_states,
        "state_final": n_states,
        "byte_class": 256,
        "trans_ptr": n_states + 1,
        "ref_ptr": n_states + 1,
        "ref_rule": n_ref,
        "ref_target": n_ref,
        "state_class": n_states,
        "class_meta": n_mc * 5,
        "class_digest": n_mc * 16,
    }
    s = _sections(raw, counts, _section_codes(n_states))

    fp = s["tokenizer_fingerprint"].tobytes()
    if (
        fp != tokenizer_info.fingerprint.encode("ascii")
        or vocab_size != tokenizer_info.vocab_size
        or n_sorted != len(tokenizer_info.sorted_vocab)
    ):
        raise TokenizerMismatchError(
            "compiled grammar was built for another tokenizer (fingerprint "
            f"{fp[:16].decode('ascii', 'replace')}..., vocab_size {vocab_size}); this "
            f"tokenizer has {tokenizer_info.fingerprint[:16]}..., vocab_size "
            f"{tokenizer_info.vocab_size}"
        )
    stored_key = s["cache_key"].tobytes()
    _check(not stored_key or _KEY_BYTES.match(stored_key), "cache key is not lowercase hex")
    if cache_key is not None and stored_key != cache_key.encode("ascii"):
        shown = stored_key.decode("ascii")[:16] + "..." if stored_key else "no key"
        _fail(
            f"the blob was written under {shown}, not under the cache key {cache_key[:16]}... "
            "it is read with (an entry of another grammar)"
        )

    names, n_real = _validate_automaton(s, h)
    grammar = _validate_grammar(s, names, n_real, s["rule_lookahead"], root)
    _validate_counted(s, grammar, names)
    _validate_store(s, h)

    automaton = Automaton(
        rule_names=names,
        root_rule=int(root),
        rule_start=s["rule_start"],
        rule_nullable=s["rule_nullable"],
        rule_lookahead=s["rule_lookahead"],
        state_rule=s["state_rule"],
        state_final=s["state_final"],
        byte_class=s["byte_class"],
        n_classes=int(n_cls),
        trans=s["trans"],
        ref_ptr=s["ref_ptr"],
        ref_rule=s["ref_rule"],
        ref_target=s["ref_target"],
        rule_follow=s["rule_follow"].reshape(n_rules, 256),
        # token-id rules are named in the grammar source (their states have no edges)
        token_rules=_token_rules(grammar, names),
        state_chars=s["state_chars"],
    )
    classes = (
        s["state_class"],
        s["class_meta"].reshape(n_mc, 5),
        s["class_digest"].reshape(n_mc, 16),
        s["acc_pool"],
        s["unc_pool"],
        s["context_classes"],
    )
    return grammar, automaton, classes


def decode_bytes(data, tokenizer_info, cache_key: str | None) -> tuple:
    """Validate serialized bytes; ``(grammar, automaton, classes)`` (see
    :func:`~treegram.compiler._compiled.deserialize_compiled` for the errors)."""
    _check_args(tokenizer_info, cache_key)
    try:
        view = memoryview(data)
    except TypeError:
        raise ArgumentError(
            f"data must be bytes, bytearray or memoryview, got {type(data).__name__}"
        ) from None
    if not view.c_contiguous:
        raise ArgumentError("data must be a contiguous buffer")
    raw = np.frombuffer(view.cast("B"), dtype=np.uint8).copy()
    return _load(raw, tokenizer_info, cache_key)


def decode_file(path, tokenizer_info, mmap: bool) -> tuple:
    """Read and validate a file; ``(grammar, automaton, classes)`` (see
    :func:`~treegram.compiler._compiled.load_compiled` for the errors)."""
    if not isinstance(mmap, bool):
        raise ArgumentError(f"mmap must be a bool, got {type(mmap).__name__}")
    _check_args(tokenizer_info, None)
    path = path_argument(path)
    f, size = open_regular_file(path, "path", ArgumentError)  # a FIFO would block forever
    with f:
        raw = np.empty(size, dtype=np.uint8)
        got = f.readinto(memoryview(raw)) or 0  # no more than fstat said
    return _load(raw[:got], tokenizer_info, None)
