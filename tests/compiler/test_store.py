"""Cache stores shared between processes: the directory store and the Redis store.

Every test runs against both backends. The Redis tests need a server at
``TREEGRAM_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``; ``.ci/run`` starts one):
without it they skip, except under ``CI=true``, where they fail. Each test works under its
own key prefix and deletes its keys afterwards, so it never touches anything else in the
database.

What is shown: a second *process* loads the entry the first one wrote instead of compiling
(counted by the compiler's ``cache_stats``; the timings are printed, never asserted); a bad
entry (corrupt, truncated, foreign, another format version or tokenizer) is discarded with a
warning and rebuilt; several processes writing one key at once, and a reader checking every
read meanwhile, never see a torn entry; a failing store never makes a compile fail.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import uuid

import pytest

import treegram as tg
from treegram.compiler import (
    CacheStore,
    DirectoryStore,
    GrammarCompiler,
    RedisStore,
    deserialize_compiled,
    serialize_compiled,
)
from treegram.compiler._serialize import FORMAT_VERSION
from treegram.compiler._store import CACHE_DIR_ENV, store_key
from treegram.errors import ArgumentError, MissingDependencyError

REDIS_URL = os.environ.get("TREEGRAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

# Shared by this module and the child processes (exec'd in both), so that both build the
# same tokenizer (same fingerprint) and the same grammar.
SETUP = r"""
import treegram as tg

VOCAB = [chr(c) for c in range(32, 127)] + ["\n", '"f', '":', '",', "true", "false", "12",
                                            "<eos>"]
TYPES = ("string", "integer", "boolean")


def small_info():
    return tg.TokenizerInfo(VOCAB, stop_token_ids=[VOCAB.index("<eos>")])


def object_ebnf(n_props=48):
    members = ' "," '.join(f'"\\"f{k}\\"" ":" {TYPES[k % 3]}' for k in range(n_props))
    return (f'root ::= "{{" {members} "}}"\n'
            'string ::= "\\"" [^"\\\\]* "\\""\n'
            'integer ::= "-"? ([1-9] [0-9]* | "0")\n'
            'boolean ::= "true" | "false"\n')


def make_store(spec):
    from treegram.compiler import DirectoryStore, RedisStore

    if spec["kind"] == "dir":
        return DirectoryStore(spec["path"])
    return RedisStore(spec["url"], prefix=spec["prefix"])
"""

CHILD = (
    SETUP
    + r"""
import hashlib, json, sys, time

spec, mode = json.loads(sys.argv[1]), sys.argv[2]
if mode == "compile":
    from treegram.compiler import GrammarCompiler

    compiler = GrammarCompiler(small_info(), max_threads=2, cache_store=make_store(spec))
    start = time.perf_counter()
    compiled = compiler.compile_grammar(object_ebnf(), classify="eager")
    seconds = time.perf_counter() - start
    digest = hashlib.sha256(compiled.serialize()).hexdigest()
    print(json.dumps({**compiler.cache_stats, "seconds": seconds, "digest": digest}))
elif mode == "hammer":
    store = make_store(spec)
    key, rounds, paths = sys.argv[3], int(sys.argv[4]), sys.argv[5:]
    blobs = [open(p, "rb").read() for p in paths]
    for i in range(rounds):
        store.put(key, blobs[i % len(blobs)])
    print(json.dumps({"puts": rounds}))
"""
)

_ns: dict = {}
exec(SETUP, _ns)
small_info, object_ebnf, make_store = _ns["small_info"], _ns["object_ebnf"], _ns["make_store"]


# ------------------------------------------------------------------------- fixtures


def _unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, so the Redis tests must run, but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def redis_client():
    """A client of the test Redis server; skips (fails under CI=true) when unreachable."""
    try:
        import redis
    except ImportError:
        _unavailable("redis-py is not installed (pip install redis)")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=10)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        _unavailable(
            f"no Redis server reachable at {REDIS_URL} ({type(exc).__name__}: {exc}); "
            "start one (.ci/run does) or set TREEGRAM_TEST_REDIS_URL"
        )
    yield client
    client.close()


@pytest.fixture(params=["dir", "redis"])
def spec(request, tmp_path):
    """How to reach a fresh, empty store (a JSON-able dict, also handed to children)."""
    if request.param == "dir":
        yield {"kind": "dir", "path": str(tmp_path / "cache")}
        return
    client = request.getfixturevalue("redis_client")
    prefix = f"treegram-test:{uuid.uuid4().hex}:"
    yield {"kind": "redis", "url": REDIS_URL, "prefix": prefix}
    keys = list(client.scan_iter(match=prefix + "*"))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="module")
def info():
    return small_info()


@pytest.fixture(scope="module")
def key(info):
    return store_key("ebnf", (object_ebnf(), "root"), info.fingerprint, FORMAT_VERSION)


def run_child(spec: dict, mode: str, *args: str, wait: bool = True):
    cmd = [sys.executable, "-c", CHILD, json.dumps(spec), mode, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish(proc) if wait else proc


def finish(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def loads_ok(blob: bytes | None, info) -> bool:
    return blob is not None and deserialize_compiled(blob, info) is not None


def unkeyed_digest(blob: bytes, info) -> str:
    """SHA-256 of a store entry re-serialized without its cache key (as the children hash
    ``compiled.serialize()``)."""
    return hashlib.sha256(deserialize_compiled(blob, info).serialize()).hexdigest()


# ------------------------------------------------------------------------- store basics


def test_store_get_put_delete(spec):
    store = make_store(spec)
    assert isinstance(store, CacheStore)
    k = "ab" * 32
    assert store.get(k) is None
    store.put(k, b"first")
    store.put(k, b"second value")
    assert store.get(k) == b"second value"
    store.delete(k)
    store.delete(k)  # absent: no error
    assert store.get(k) is None
    for bad in ("", "XYZ", "../" + "a" * 20, "A" * 32, 12345):
        with pytest.raises(ArgumentError, match="store key"):
            store.get(bad)
    if spec["kind"] == "dir":
        assert os.listdir(spec["path"]) == []  # no temporary file left behind


def test_store_key_covers_everything(info):
    base = store_key("ebnf", ('root ::= "a"', "root"), info.fingerprint, FORMAT_VERSION)
    assert len(base) == 64 and int(base, 16) >= 0
    others = {
        store_key("regex", ('root ::= "a"', "root"), info.fingerprint, FORMAT_VERSION),
        store_key("ebnf", ('root ::= "b"', "root"), info.fingerprint, FORMAT_VERSION),
        store_key("ebnf", ('root ::= "a"', "main"), info.fingerprint, FORMAT_VERSION),
        store_key("ebnf", ('root ::= "a"', "root"), "0" * 64, FORMAT_VERSION),
        store_key("ebnf", ('root ::= "a"', "root"), info.fingerprint, FORMAT_VERSION + 1),
    }
    assert base not in others and len(others) == 5


# ------------------------------------------------------------------------- one process


def test_compiler_writes_through_and_loads(spec, info, key):
    first = GrammarCompiler(info, cache_store=make_store(spec))
    compiled = first.compile_grammar(object_ebnf(), classify="eager")
    assert first.cache_stats["compiles"] == 1
    stored = make_store(spec).get(key)
    # written after the eager classification, bound to its key
    assert stored == serialize_compiled(compiled, cache_key=key)
    second = GrammarCompiler(info, cache_store=make_store(spec))
    loaded = second.compile_grammar(object_ebnf())
    assert second.cache_stats == {
        "memory_hits": 0,
        "store_hits": 1,
        "compiles": 0,
        "store_rejects": 0,
        "store_errors": 0,
    }
    assert loaded.serialize() == compiled.serialize()
    assert second.compile_grammar(object_ebnf()) is loaded  # memory first


def test_eager_request_upgrades_a_lazy_entry(spec, info, key):
    GrammarCompiler(info, cache_store=make_store(spec)).compile_grammar(object_ebnf())
    lazy_blob = make_store(spec).get(key)
    assert deserialize_compiled(lazy_blob, info)._store.n_classified_states == 0
    compiler = GrammarCompiler(info, cache_store=make_store(spec))
    eager = compiler.compile_grammar(object_ebnf(), classify="eager")
    assert compiler.cache_stats["store_hits"] == 1 and compiler.cache_stats["compiles"] == 0
    assert eager._store.unclassified_states().shape[0] == 0
    assert make_store(spec).get(key) == serialize_compiled(eager, cache_key=key)


def _mutations(blob: bytes) -> dict[str, bytes]:
    other = tg.TokenizerInfo(_ns["VOCAB"] + ["extra"], stop_token_ids=[0])
    foreign = GrammarCompiler(other).compile_grammar(object_ebnf()).serialize()
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0x10
    version = bytearray(blob)
    version[4] += 1
    return {
        "garbage": b"definitely not a compiled grammar",
        "empty": b"",
        "truncated": blob[: len(blob) // 3],
        "bit flip": bytes(flipped),
        "other version": bytes(version),
        "other tokenizer": foreign,
    }


def test_bad_entries_are_discarded_and_rebuilt(spec, info, key, caplog):
    good = GrammarCompiler(info, cache_store=make_store(spec)).compile_grammar(object_ebnf())
    blob = good.serialize()
    for name, bad in _mutations(blob).items():
        make_store(spec).put(key, bad)
        caplog.clear()
        compiler = GrammarCompiler(info, cache_store=make_store(spec))
        with caplog.at_level(logging.WARNING, logger="treegram.compiler._compiler"):
            rebuilt = compiler.compile_grammar(object_ebnf())
        stats = compiler.cache_stats
        assert (stats["store_rejects"], stats["compiles"], stats["store_hits"]) == (1, 1, 0), name
        assert any("discarding bad entry" in r.getMessage() for r in caplog.records), name
        assert rebuilt.serialize() == blob, name
        assert make_store(spec).get(key) == serialize_compiled(rebuilt, cache_key=key), name


def test_failing_store_is_never_fatal(info, caplog):
    class Broken:
        def get(self, key):
            raise OSError("disk on fire")

        def put(self, key, blob):
            raise OSError("disk on fire")

        def delete(self, key):
            raise OSError("disk on fire")

    compiler = GrammarCompiler(info, cache_store=Broken())
    with caplog.at_level(logging.WARNING, logger="treegram.compiler._compiler"):
        compiled = compiler.compile_grammar(object_ebnf())
    assert compiled.automaton.n_states > 0
    assert compiler.cache_stats["store_errors"] == 2  # get, then put
    assert sum("disk on fire" in r.getMessage() for r in caplog.records) == 2

    # an unreachable Redis server behaves the same (needs redis-py, not a server)
    pytest.importorskip("redis")
    store = RedisStore("redis://127.0.0.1:1/0?socket_connect_timeout=0.5")
    compiler = GrammarCompiler(info, cache_store=store)
    assert compiler.compile_regex("[ab]+") is not None
    assert compiler.cache_stats["store_errors"] == 2


def test_directory_store_from_env_and_arguments(tmp_path, monkeypatch, info):
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "from-env"))
    compiler = GrammarCompiler(info)
    assert isinstance(compiler.cache_store, DirectoryStore)
    assert compiler.cache_store.path == str(tmp_path / "from-env")
    compiler.compile_regex("[ab]+")
    assert len(os.listdir(tmp_path / "from-env")) == 1
    explicit = GrammarCompiler(info, cache_dir=tmp_path / "explicit")
    assert explicit.cache_store.path == str(tmp_path / "explicit")
    monkeypatch.setenv(CACHE_DIR_ENV, "")
    assert GrammarCompiler(info).cache_store is None
    with pytest.raises(ArgumentError, match="not both"):
        GrammarCompiler(info, cache_dir=tmp_path, cache_store=DirectoryStore(tmp_path))
    with pytest.raises(ArgumentError, match="cache_store"):
        GrammarCompiler(info, cache_store=object())
    with pytest.raises(ArgumentError, match="path"):
        DirectoryStore(3.5)


def test_redis_store_needs_redis_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingDependencyError, match="pip install redis"):
        RedisStore("redis://127.0.0.1:6379/15")


# ------------------------------------------------------------------------- processes


@pytest.mark.slow
def test_two_processes_share_the_store(spec, info, key):
    first = run_child(spec, "compile")
    assert (first["compiles"], first["store_hits"]) == (1, 0)
    second = run_child(spec, "compile")
    # the second process loads instead of compiling (measured by the counters)
    assert (second["compiles"], second["store_hits"]) == (0, 1)
    assert second["digest"] == first["digest"]
    print(
        f"\n[{spec['kind']}] compile + classify {first['seconds'] * 1e3:.1f} ms, "
        f"load from store {second['seconds'] * 1e3:.1f} ms"
    )

    # a corrupted entry: the next process discards it, compiles and writes a good one
    store = make_store(spec)
    blob = bytearray(store.get(key))
    blob[len(blob) // 2] ^= 0xFF
    store.put(key, bytes(blob))
    third = run_child(spec, "compile")
    assert (third["store_rejects"], third["compiles"], third["store_hits"]) == (1, 1, 0)
    assert third["digest"] == first["digest"]
    assert unkeyed_digest(store.get(key), info) == first["digest"]
    fourth = run_child(spec, "compile")
    assert (fourth["compiles"], fourth["store_hits"]) == (0, 1)


@pytest.mark.slow
def test_concurrent_writers_never_leave_a_torn_entry(spec, info, key, tmp_path):
    compiler = GrammarCompiler(info, cache_enabled=False)
    lazy = compiler.compile_grammar(object_ebnf())
    partial = compiler.compile_grammar(object_ebnf())
    partial._store.classify_states(range(0, lazy.automaton.n_states, 3))
    eager = compiler.compile_grammar(object_ebnf(), classify="eager")
    blobs = {"lazy": lazy.serialize(), "partial": partial.serialize(), "eager": eager.serialize()}
    assert len({len(b) for b in blobs.values()}) == 3  # a torn mix would fail its checksum
    paths = []
    for name, blob in blobs.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(blob)
        paths.append(str(path))
    store = make_store(spec)
    store.put(key, blobs["lazy"])

    # several processes compiling the same missing key at once: all agree
    other_key_spec = dict(spec)
    if spec["kind"] == "dir":
        other_key_spec["path"] = str(tmp_path / "race")
    else:
        other_key_spec["prefix"] = spec["prefix"] + "race:"
    racers = [run_child(other_key_spec, "compile", wait=False) for _ in range(3)]

    # four processes overwrite one key with different valid blobs; a reader checks each read
    writers = [
        run_child(spec, "hammer", key, "150", *paths[w % 3 :], *paths[: w % 3], wait=False)
        for w in range(4)
    ]
    reads, bad = 0, []
    stop = threading.Event()

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            blob = store.get(key)
            reads += 1
            if blob not in blobs.values():
                bad.append(None if blob is None else len(blob))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        results = [finish(p) for p in writers]
    finally:
        stop.set()
        thread.join()
    assert [r["puts"] for r in results] == [150] * 4
    assert reads > 0 and bad == []
    assert loads_ok(store.get(key), info)  # the final entry deserializes

    raced = [finish(p) for p in racers]
    assert len({r["digest"] for r in raced}) == 1
    assert all(r["compiles"] + r["store_hits"] == 1 for r in raced)
    race_store = make_store(other_key_spec)
    assert unkeyed_digest(race_store.get(key), info) == raced[0]["digest"]
    if spec["kind"] == "dir":
        for folder in (spec["path"], other_key_spec["path"]):
            assert [n for n in os.listdir(folder) if n.startswith(".tmp-")] == []
