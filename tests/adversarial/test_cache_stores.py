"""Issue 11, the cache and serialization layer: one test per finding (5, 6, 8, 9, 14, 18).

Scenarios that crashed (SIGSEGV), hung or ate gigabytes before the fix run in a child
process with a timeout, so a regression fails the test instead of killing the run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import treegram as tg
from treegram.compiler import (
    DirectoryStore,
    GrammarCompiler,
    deserialize_compiled,
    load_compiled,
    save_compiled,
    serialize_compiled,
)
from treegram.compiler._serialize import (
    _DTYPES,
    _ENTRY,
    _HEADER,
    _SECTION_ID,
    FORMAT_VERSION,
    _pack,
    _section_codes,
)
from treegram.compiler._store import CACHE_DIR_ENV, store_key
from treegram.errors import (
    ArgumentError,
    CacheStoreError,
    DeserializeFormatError,
    TreegramError,
)

# Shared with the children (exec'd in both) so that both build the same tokenizer.
SETUP = r'''
import treegram as tg

VOCAB = [chr(c) for c in range(32, 127)] + ["ab", "abc", '":', '",', "true", "12", "<eos>"]
VOCAB += [f"w{k}" for k in range(400)]  # > 32 words, so some classes are token lists


def small_info():
    return tg.TokenizerInfo(VOCAB, stop_token_ids=[VOCAB.index("<eos>")])


GRAMMAR_A = 'root ::= "{" ("\\"a\\"" ":" [0-9]+) "}"\n'


def warm_up():
    """Compile, serialize, load and match a small grammar once, so that loading numba's
    kernels (or compiling them, on a cold cache) is not counted as growth below."""
    from treegram.compiler import deserialize_compiled, serialize_compiled

    info = small_info()
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_grammar(GRAMMAR_A)
    m = tg.GrammarMatcher(deserialize_compiled(serialize_compiled(compiled), info))
    bm = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    m.fill_next_token_bitmask(bm)
    assert m.accept_string("{")


def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def rss_kib():
    """Current resident set size (KiB), the baseline for :func:`grown_mib`. The peak is
    read from VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across
    fork and exec, so a child of a big pytest process would report the parent's peak."""
    try:  # reset the peak to the current size (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return status_kib("VmRSS")


def grown_mib(base_kib):
    """Peak resident set size since :func:`rss_kib` minus its baseline, in MiB."""
    return (status_kib("VmHWM") - base_kib) / 1024


GRAMMAR_B = 'root ::= "[" ("true" | [a-z]+) ("," [a-z]+)* "]"\n'
'''

_ns: dict = {}
exec(SETUP, _ns)
small_info, GRAMMAR_A, GRAMMAR_B = _ns["small_info"], _ns["GRAMMAR_A"], _ns["GRAMMAR_B"]


def run_child(code: str, *args: str, timeout: float = 120) -> dict:
    """Run ``SETUP + code`` in a fresh interpreter; its last stdout line is JSON."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(tg.__file__)), os.environ.get("PYTHONPATH", "")]
        ),
    )
    proc = subprocess.run(
        [sys.executable, "-c", SETUP + code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def info() -> tg.TokenizerInfo:
    return small_info()


def key_of(info, grammar: str) -> str:
    """The store key :meth:`GrammarCompiler.compile_grammar` uses for EBNF text."""
    return store_key("ebnf", (grammar, "root"), info.fingerprint, FORMAT_VERSION)


def section_span(data: bytes, name: str) -> tuple[int, int]:
    sid = _SECTION_ID[name]
    _, code, off, count = _ENTRY.unpack_from(data, _HEADER.size + sid * _ENTRY.size)
    return off, off + count * _DTYPES[code].itemsize


# ------------------------------------------------------------------ finding 5


LOAD_THEN_OVERWRITE = r"""
import hashlib, json, sys
import numpy as np
from treegram.compiler import load_compiled, save_compiled

path, bad_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
info = small_info()


def masks(compiled):
    m = tg.GrammarMatcher(compiled)
    bm = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    out = []
    for text in ("{", '"a"', ":", "12", "3", "}"):
        m.fill_next_token_bitmask(bm)
        out.append(bm[0].copy())
        assert m.accept_string(text)
    return np.stack(out)


loaded = load_compiled(path, info)
before = masks(loaded)
bad = open(bad_path, "rb").read()
if mode == "in-place":  # same size, written over the old bytes (no truncation)
    with open(path, "r+b") as f:
        f.write(bad)
else:  # as cp does: truncate, then write
    with open(path, "wb") as f:
        f.write(bad)
fresh = tg.GrammarMatcher(loaded)  # the first matcher made after the overwrite
after = masks(loaded)
print(json.dumps({"same": bool(np.array_equal(before, after)), "size": len(bad)}))
"""


@pytest.mark.parametrize("mode", ["in-place", "cp"])
def test_load_is_isolated_from_later_writes_to_the_file(info, tmp_path, mode):
    """Finding 5: a grammar loaded from a file keeps its masks when the file is then
    overwritten (in place, or truncated and rewritten as ``cp`` does) with a same-size,
    correctly checksummed blob full of out-of-range token ids and states."""
    compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(GRAMMAR_A)
    compiled.classify_all_states()
    data = serialize_compiled(compiled)
    bad = bytearray(data)
    for name in ("acc_pool", "unc_pool", "state_class", "trans_target", "ref_target"):
        lo, hi = section_span(data, name)
        bad[lo:hi] = b"\x7f" * (hi - lo)
    assert (
        len(bad) == len(data)
        and section_span(data, "acc_pool")[1] > section_span(data, "acc_pool")[0]
    )
    path, bad_path = tmp_path / "a.tgrm", tmp_path / "bad.bin"
    save_compiled(compiled, path)
    bad_path.write_bytes(bytes(bad))
    got = run_child(LOAD_THEN_OVERWRITE, str(path), str(bad_path), mode)
    assert got == {"same": True, "size": len(data)}
    with pytest.raises(DeserializeFormatError, match="checksum"):
        load_compiled(path, info)  # the file itself is now bad; the live grammar was not


def test_load_rejects_a_fifo_and_bad_arguments(info, tmp_path):
    """``load_compiled`` reads only regular files (a FIFO would block the open forever)."""
    fifo = tmp_path / "pipe.tgrm"
    os.mkfifo(fifo)
    got = run_child(
        r"""
import json, sys
from treegram.errors import ArgumentError
from treegram.compiler import load_compiled
try:
    load_compiled(sys.argv[1], small_info())
except ArgumentError as exc:
    print(json.dumps({"error": str(exc)}))
""",
        str(fifo),
        timeout=60,
    )
    assert "path" in got["error"] and "not a regular file" in got["error"]
    with pytest.raises(ArgumentError, match="mmap"):
        load_compiled(fifo, info, mmap="yes")
    with pytest.raises(ArgumentError, match="path"):
        load_compiled(3.5, info)


# ------------------------------------------------------------------ finding 6


HOSTILE_ENTRY = r"""
import json, sys
from treegram.compiler import GrammarCompiler

cache = sys.argv[1]
warm_up()
base = rss_kib()
compiler = GrammarCompiler(small_info(), cache_dir=cache)
compiled = compiler.compile_grammar(GRAMMAR_A)
print(json.dumps({**compiler.cache_stats, "grown_mb": grown_mib(base)}))
"""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "outside", "directory"])
def test_hostile_directory_entries_never_hang_or_escape(info, tmp_path, kind):
    """Finding 6: an entry that is a FIFO, a symlink to /dev/zero, a symlink out of the
    folder (to a valid entry of the same key) or a directory is not read: the compile
    finishes (counted as a store error), and the entry is replaced by a regular file."""
    cache = tmp_path / "cache"
    cache.mkdir()
    key = key_of(info, GRAMMAR_A)
    entry = cache / (key + DirectoryStore.suffix)
    outside = tmp_path / "outside.tgrm"
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", entry)
    elif kind == "outside":
        good = GrammarCompiler(info, cache_enabled=False).compile_grammar(GRAMMAR_A)
        outside.write_bytes(serialize_compiled(good, cache_key=key))
        os.symlink(outside, entry)
    else:
        entry.mkdir()
    got = run_child(HOSTILE_ENTRY, str(cache), timeout=60)
    assert (got["store_errors"], got["compiles"], got["store_hits"]) == (
        (2, 1, 0) if kind == "directory" else (1, 1, 0)
    ), got  # a directory is not replaced
    assert got["grown_mb"] < 200, got
    if kind == "directory":
        assert entry.is_dir()
        return
    assert entry.is_file() and not entry.is_symlink()  # the next put replaced the entry
    assert deserialize_compiled(entry.read_bytes(), info, cache_key=key) is not None
    if kind == "outside":
        assert outside.read_bytes() == serialize_compiled(
            GrammarCompiler(info, cache_enabled=False).compile_grammar(GRAMMAR_A), cache_key=key
        )  # the file outside the folder was neither read nor written


def test_directory_store_reads_only_bounded_regular_files(info, tmp_path):
    store = DirectoryStore(tmp_path / "c", max_entry_bytes=64)
    key = key_of(info, GRAMMAR_A)
    store.put(key, b"x" * 64)
    assert store.get(key) == b"x" * 64
    with pytest.raises(CacheStoreError, match="max_entry_bytes"):
        store.put(key, b"x" * 65)
    (tmp_path / "c" / (key + ".tgrm")).write_bytes(b"y" * 65)
    with pytest.raises(CacheStoreError, match="65 bytes"):
        store.get(key)
    os.unlink(tmp_path / "c" / (key + ".tgrm"))
    os.symlink(tmp_path / "elsewhere", tmp_path / "c" / (key + ".tgrm"))
    with pytest.raises(CacheStoreError, match="symbolic link"):
        store.get(key)
    assert issubclass(CacheStoreError, TreegramError) and issubclass(CacheStoreError, OSError)
    for bad in (
        {"max_entry_bytes": 0},
        {"max_entry_bytes": 1.5},
        {"stale_tmp_s": -1},
        {"stale_tmp_s": float("inf")},
    ):
        with pytest.raises(ArgumentError, match=next(iter(bad))):
            DirectoryStore(tmp_path / "d", **bad)
    with pytest.raises(ArgumentError, match="store key"):
        store.get("../../etc/passwd")
    with pytest.raises(ArgumentError, match="blob"):
        store.put(key, "not bytes")
    with pytest.raises(ArgumentError, match="cache_dir"):
        GrammarCompiler(info, cache_dir=42)


class FakeRedis:
    """The subset of redis.Redis that RedisStore uses, recording the commands."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.calls: list[str] = []

    def get(self, name):
        self.calls.append("get")
        return self.data.get(name)

    def strlen(self, name):
        self.calls.append("strlen")
        return len(self.data.get(name, b""))

    def set(self, name, value, ex=None):
        self.calls.append("set")
        self.data[name] = value

    def delete(self, name):
        self.data.pop(name, None)


def test_redis_store_bounds_entry_size(info):
    """The Redis analogue: an oversized value is refused before it is transferred."""
    pytest.importorskip("redis")
    from treegram.compiler import RedisStore

    client = FakeRedis()
    store = RedisStore(client, max_entry_bytes=64)
    key = key_of(info, GRAMMAR_A)
    store.put(key, b"x" * 64)
    assert store.get(key) == b"x" * 64
    with pytest.raises(CacheStoreError, match="max_entry_bytes"):
        store.put(key, b"x" * 65)
    client.data[store.prefix + key] = b"y" * 1000  # written by someone else
    client.calls.clear()
    with pytest.raises(CacheStoreError, match="1000 bytes"):
        store.get(key)
    assert client.calls == ["strlen"]  # the value itself was never fetched
    with pytest.raises(ArgumentError, match="max_entry_bytes"):
        RedisStore(client, max_entry_bytes=0)
    with pytest.raises(ArgumentError, match="blob"):
        store.put(key, 12)


# ------------------------------------------------------------------ finding 8


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key):
        return self.data.get(key)

    def put(self, key, blob):
        self.data[key] = bytes(blob)

    def delete(self, key):
        self.data.pop(key, None)


@pytest.mark.parametrize("backend", ["dir", "dict"])
def test_entry_of_another_grammar_under_a_key_is_rejected(info, tmp_path, backend, caplog):
    """Finding 8: a valid, correctly checksummed blob of grammar B stored under A's key is
    rejected (a store reject, logged), and A is compiled fresh; so is an unkeyed blob."""

    def make():
        return DirectoryStore(tmp_path / "cache") if backend == "dir" else shared

    shared = DictStore()
    writer = GrammarCompiler(info, cache_store=make())
    a, b = writer.compile_grammar(GRAMMAR_A), writer.compile_grammar(GRAMMAR_B)
    key_a, key_b = key_of(info, GRAMMAR_A), key_of(info, GRAMMAR_B)
    assert make().get(key_a) == serialize_compiled(a, cache_key=key_a)
    for bad in (make().get(key_b), serialize_compiled(b), serialize_compiled(a)):
        make().put(key_a, bad)
        compiler = GrammarCompiler(info, cache_store=make())
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="treegram.compiler._compiler"):
            got = compiler.compile_grammar(GRAMMAR_A)
        stats = compiler.cache_stats
        assert (stats["store_rejects"], stats["store_hits"], stats["compiles"]) == (1, 0, 1)
        assert any("discarding bad entry" in r.getMessage() for r in caplog.records)
        assert got.serialize() == a.serialize() != b.serialize()
        assert make().get(key_a) == serialize_compiled(a, cache_key=key_a)  # rebuilt
    # the direct API: the key must match; a keyed blob still loads without one
    blob_b = serialize_compiled(b, cache_key=key_b)
    with pytest.raises(DeserializeFormatError, match="cache key"):
        deserialize_compiled(blob_b, info, cache_key=key_a)
    assert deserialize_compiled(blob_b, info, cache_key=key_b).serialize() == b.serialize()
    assert deserialize_compiled(blob_b, info).serialize() == b.serialize()
    with pytest.raises(ArgumentError, match="cache_key"):
        serialize_compiled(a, cache_key="NOT-HEX")
    with pytest.raises(ArgumentError, match="cache_key"):
        deserialize_compiled(blob_b, info, cache_key=12)


# ------------------------------------------------------------------ finding 9


def chain_blob(info, n_states: int, n_cls: int, n_edges: int) -> bytes:
    """A one-rule automaton of ``n_states`` states whose first ``n_edges`` states are
    chained by class-0 transitions; otherwise well formed (checksum included)."""
    edges = np.arange(min(n_edges, n_states - 1), dtype=np.int64)
    trans_ptr = np.zeros(n_states + 1, dtype=np.int64)
    trans_ptr[1 + edges] = 1
    np.cumsum(trans_ptr, out=trans_ptr)
    final = np.zeros(n_states, dtype=np.uint8)
    final[-1] = 1
    parts = {
        "rule_name_ptr": np.array([0, 4]),
        "rule_name_data": np.frombuffer(b"root", np.uint8),
        "rule_start": [0],
        "rule_nullable": [0],
        "rule_lookahead": [-1],
        "rule_follow": np.zeros(256),
        "state_rule": np.zeros(n_states),
        "state_final": final,
        "byte_class": np.minimum(np.arange(256), n_cls - 1),
        "trans_ptr": trans_ptr,
        "trans_class": np.zeros(edges.shape[0]),
        "trans_target": edges + 1,
        "ref_ptr": np.zeros(n_states + 1),
        "ref_rule": [],
        "ref_target": [],
        "grammar_root": np.frombuffer(b"root", np.uint8),
        "grammar_ebnf": np.frombuffer(b'root ::= "a"\n', np.uint8),
        "state_class": np.full(n_states, -1),
        "class_meta": [],
        "class_digest": [],
        "acc_pool": [],
        "unc_pool": [],
        "context_classes": [],
        "tokenizer_fingerprint": np.frombuffer(info.fingerprint.encode("ascii"), np.uint8),
        "cache_key": [],
        "state_chars": [],
    }
    assert _section_codes(n_states)["trans_target"] in _DTYPES
    counts = (1, n_states, n_cls, 0, 0, 0, info.vocab_size, len(info.sorted_vocab))
    return _pack(counts, parts)


HUGE_LOAD = r"""
import json, sys
from treegram.compiler import deserialize_compiled
from treegram.errors import DeserializeFormatError

data = open(sys.argv[1], "rb").read()
info = small_info()
warm_up()
base = rss_kib()
try:
    compiled = deserialize_compiled(data, info)
    m = tg.GrammarMatcher(compiled)
    bm = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    m.fill_next_token_bitmask(bm)
    out = {"loaded": True, "accepts_a": bool(m.accept_string("a"))}
except DeserializeFormatError as exc:
    out = {"loaded": False, "error": str(exc)}
out["grown_mb"] = grown_mib(base)
print(json.dumps(out))
"""


@pytest.mark.parametrize("case", ["no transitions", "unjustified byte classes", "chain"])
def test_counts_must_be_paid_for_by_the_payload(info, tmp_path, case):
    """Finding 9: a 17 MB blob claiming 1 M states with no transitions (and 256 byte
    classes) cost +1 GB at load and +3 GB at the first matcher. Every state must now be
    reached by an edge and every byte class boundary be needed by a transition, so such
    blobs are refused in bounded memory; a chain of 1 M real states with one byte class
    (a legitimately large automaton) loads and serves a matcher in bounded memory."""
    n = 1_000_000
    if case == "no transitions":
        blob, expect = chain_blob(info, n, 256, 0), "reached by no edge"
    elif case == "unjustified byte classes":
        blob, expect = chain_blob(info, n, 256, n), "byte class boundary"
    else:
        blob, expect = chain_blob(info, n, 1, n), None
    assert len(blob) > 16_000_000
    path = tmp_path / "huge.bin"
    path.write_bytes(blob)
    got = run_child(HUGE_LOAD, str(path), timeout=180)
    if expect is None:
        assert got["loaded"] and got["accepts_a"], got
    else:
        assert not got["loaded"] and expect in got["error"], got
    # before the fix: +1 GB (dense 1 M x 256 table) and +3 GB at the first matcher
    assert got["grown_mb"] < 400, got


# ------------------------------------------------------------------ finding 14


def test_stale_temp_files_are_swept(info, tmp_path):
    """Finding 14: temporary files left by writers killed inside ``put`` are removed when
    a store is opened and, later, from ``put``; fresh ones (a live writer) are kept."""
    cache = tmp_path / "cache"
    cache.mkdir()
    old = time.time() - 7200

    def leftover(name: str, age_s: float = 7200) -> os.PathLike:
        p = cache / name
        p.write_bytes(b"partial entry")
        os.utime(p, (time.time() - age_s, time.time() - age_s))
        return p

    stale, fresh = leftover(".tmp-k1ll3d.tgrm"), leftover(".tmp-l1ve.tgrm", age_s=0)
    other = leftover("notes.tmp-x")
    linked = cache / ".tmp-link.tgrm"
    os.symlink(other, linked)
    os.utime(linked, (old, old), follow_symlinks=False)
    GrammarCompiler(info, cache_dir=cache)  # opening the store sweeps
    assert not stale.exists() and fresh.exists() and other.exists() and linked.is_symlink()

    store = DirectoryStore(cache, stale_tmp_s=1.0)
    stale2 = leftover(".tmp-k1ll3d2.tgrm", age_s=5)
    time.sleep(0.3)  # more than stale_tmp_s / 4 since the last sweep
    store.put(key_of(info, GRAMMAR_A), b"entry")
    assert not stale2.exists() and fresh.exists()
    assert sorted(p.name for p in cache.iterdir() if p.name.endswith(".tgrm")) == [
        ".tmp-l1ve.tgrm",
        ".tmp-link.tgrm",
        key_of(info, GRAMMAR_A) + ".tgrm",
    ]
    assert store.sweep_stale_tmp_files(max_age_s=0) == 1 and not fresh.exists()


# ------------------------------------------------------------------ finding 18


@pytest.mark.parametrize("kind", ["regular file", "dangling symlink", "argument"])
def test_unusable_cache_dir_is_logged_not_raised(info, tmp_path, monkeypatch, caplog, kind):
    """Finding 18: TREEGRAM_CACHE_DIR (or cache_dir=) naming a regular file or a dangling
    symlink no longer makes GrammarCompiler() raise: a warning, and no store."""
    path = tmp_path / "cache"
    if kind == "dangling symlink":
        os.symlink(tmp_path / "missing", path)
    else:
        path.write_bytes(b"a file")
    with caplog.at_level(logging.WARNING, logger="treegram.compiler._compiler"):
        if kind == "argument":
            compiler = GrammarCompiler(info, cache_dir=path)
        else:
            monkeypatch.setenv(CACHE_DIR_ENV, str(path))
            compiler = GrammarCompiler(info)
    assert compiler.cache_store is None
    assert any("cannot be used" in r.getMessage() for r in caplog.records)
    assert compiler.compile_grammar(GRAMMAR_A) is not None
    assert compiler.cache_stats["store_errors"] == 1 and compiler.cache_stats["compiles"] == 1
    with pytest.raises(CacheStoreError, match="cache directory path"):
        DirectoryStore(path)  # constructed directly, the store says what is wrong
    assert os.path.islink(path) or path.read_bytes() == b"a file"  # untouched
    if kind == "regular file":  # a directory below a file cannot be created either
        with pytest.raises(CacheStoreError, match="cannot be created"):
            DirectoryStore(path / "sub")
        assert GrammarCompiler(info, cache_dir=path / "sub").cache_store is None


# ------------------------------------------------------------------ found on the way


def test_long_repetitions_round_trip_through_a_store(info):
    """Grammars with repetitions longer than the builder's block (helper rules the EBNF
    source does not name) were refused by every load, so a cache store rejected and
    rebuilt them forever (at least 27 of the 2,778 MaskBench sample schemas). They load now."""
    grammar = 'root ::= "[" [a-z]{3,700} "]"\n'
    store = DictStore()
    first = GrammarCompiler(info, cache_store=store)
    compiled = first.compile_grammar(grammar)
    assert compiled.automaton.n_rules > len(compiled.grammar.ir.rules)  # helper rules
    second = GrammarCompiler(info, cache_store=store)
    loaded = second.compile_grammar(grammar)
    assert (second.cache_stats["store_hits"], second.cache_stats["store_rejects"]) == (1, 0)
    assert loaded.serialize() == compiled.serialize()
    m = tg.GrammarMatcher(loaded)
    assert m.accept_string("[" + "q" * 700) and not m.accept_string("q")
    assert m.accept_string("]") and m.accept_token(info.stop_token_ids[0])
    assert m.is_terminated()
