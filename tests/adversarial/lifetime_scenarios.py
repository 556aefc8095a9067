"""Shared setup of the adversarial matcher tests, and a runner for crash-prone scenarios.

A crash-prone scenario (one that used to segfault, hang or corrupt memory) runs in a fresh
interpreter: :func:`run_scenario` prepends :data:`PRELUDE` to its code, runs it with
``sys.executable -c`` under a timeout, and fails on a signal, a non-zero exit, a timeout
or a missing ``OK`` line, so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

from matcher_rows import EXPR_GRAMMAR, OBJECT_GRAMMAR

import treegram

# A small synthetic vocabulary: printable ASCII, a few multi-byte tokens, a stop token.
VOCAB: list[str] = [chr(c) for c in range(32, 127)] + ["ab", "true", "null", '",', "<eos>"]
V = len(VOCAB)
W = (V + 31) // 32
EOS = VOCAB.index("<eos>")


@contextmanager
def holding(matcher) -> Iterator[None]:
    """Hold ``matcher`` for the calling thread while the block runs, as a call in progress
    does (a batch call's claim)."""
    from treegram.matcher._batch import _claim, _release

    taken, _ = _claim((matcher,))
    try:
        yield
    finally:
        _release(taken)


GRAMMAR_TEXTS: dict[str, str] = {
    "letters": 'root ::= [a-z]* "1"',
    "expr": EXPR_GRAMMAR,
    "object": OBJECT_GRAMMAR,
}

PRELUDE = '''
import copy, gc, os, sys, threading, time
import numpy as np
import treegram as tg
from treegram import BatchGrammarMatcher, GrammarMatcher
VOCAB = @VOCAB@
V = len(VOCAB)
W = (V + 31) // 32
EOS = VOCAB.index("<eos>")
TEXTS = @TEXTS@
info = tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS])

def fresh(name):
    """A newly compiled grammar whose token classification is still empty."""
    return tg.GrammarCompiler(info, cache_enabled=False, max_threads=1).compile_grammar(
        TEXTS[name])

def mask(m):
    row = np.zeros((1, W), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return row[0].copy()

def replay(g, tokens):
    """A fresh single-threaded reference matcher that accepted ``tokens``."""
    r = GrammarMatcher(g)
    for t in tokens:
        assert r.accept_token(t), t
    return r

def tok(text):
    return VOCAB.index(text)
'''.replace("@VOCAB@", repr(VOCAB)).replace("@TEXTS@", repr(GRAMMAR_TEXTS))


def run_scenario(code: str, timeout: float = 60.0) -> str:
    """Run ``PRELUDE + code`` in a fresh interpreter; return its stdout.

    Fails (AssertionError) on a timeout, a signal, a non-zero exit status or when the
    script does not print ``OK`` as its last line.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(treegram.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TREEGRAM_CACHE_DIR", None)
    script = PRELUDE + "\n" + textwrap.dedent(code)
    try:
        # cwd: a neutral folder, since ``-c`` puts the cwd first on sys.path and could
        # shadow the treegram under test.
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=tempfile.gettempdir(),
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"scenario hung (no exit within {timeout} s); stdout: {exc.stdout!r}"
        ) from None
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, detail
    assert proc.stdout.strip().splitlines()[-1:] == ["OK"], detail
    return proc.stdout
