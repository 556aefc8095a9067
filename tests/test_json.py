"""serialize_json / deserialize_json on Grammar, TokenizerInfo and CompiledGrammar, and
get_serialization_version (xgrammar 0.2.8's names; treegram's own versioned format)."""

from __future__ import annotations

import json

import pytest

import treegram as tg
from treegram.errors import DeserializeFormatError, DeserializeVersionError, TokenizerMismatchError

INFO = tg.TokenizerInfo(["a", "b", "\xff", "{", "}", "1", "</s>"], vocab_size=9)
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_version_is_in_every_document():
    version = tg.get_serialization_version()
    assert isinstance(version, str) and version
    docs = [
        tg.Grammar.from_regex("ab+").serialize_json(),
        INFO.serialize_json(),
        tg.GrammarCompiler(INFO).compile_regex("ab+").serialize_json(),
    ]
    for doc in docs:
        assert json.loads(doc)["__VERSION__"] == version


@pytest.mark.parametrize(
    "grammar",
    [
        tg.Grammar.from_json_schema(SCHEMA),
        tg.Grammar.from_ebnf('start ::= "x" start | "y"', root_rule_name="start"),
        tg.Grammar.builtin_json_grammar(),
    ],
)
def test_grammar_round_trip(grammar):
    again = tg.Grammar.deserialize_json(grammar.serialize_json())
    assert again == grammar and again.root_rule_name == grammar.root_rule_name


def test_tokenizer_info_round_trip():
    again = tg.TokenizerInfo.deserialize_json(INFO.serialize_json())
    assert again.fingerprint == INFO.fingerprint
    assert again.vocab_size == 9 and list(again.stop_token_ids) == [6]
    assert again.decoded_vocab[2] == INFO.decoded_vocab[2]  # raw bytes survive
    empty = tg.TokenizerInfo.deserialize_json(tg.TokenizerInfo([]).serialize_json())
    assert empty.vocab_size == 0


def test_compiled_grammar_round_trip():
    compiled = tg.GrammarCompiler(INFO).compile_json_schema(SCHEMA, any_whitespace=False)
    again = tg.CompiledGrammar.deserialize_json(compiled.serialize_json(), INFO)
    m = tg.GrammarMatcher(again)
    assert m.accept_string('{"a": 1}') and m.is_completed()
    other = tg.TokenizerInfo(["a", "b"])
    with pytest.raises(TokenizerMismatchError):
        tg.CompiledGrammar.deserialize_json(compiled.serialize_json(), other)


def _doc(**changes):
    obj = json.loads(INFO.serialize_json())
    obj.update(changes)
    return json.dumps(obj)


@pytest.mark.parametrize(
    "read, text, error, fragment",
    [
        (tg.Grammar.deserialize_json, "{", DeserializeFormatError, "invalid JSON"),
        (tg.Grammar.deserialize_json, "[]", DeserializeFormatError, "a JSON object"),
        (tg.Grammar.deserialize_json, 3, DeserializeFormatError, "must be a str"),
        (tg.Grammar.deserialize_json, '{"__VERSION__":"v16"}', DeserializeVersionError, "v16"),
        (tg.Grammar.deserialize_json, _doc(), DeserializeFormatError, "holds a 'TokenizerInfo'"),
        (tg.TokenizerInfo.deserialize_json, _doc(vocab_size=3), DeserializeFormatError, "3"),
        (tg.TokenizerInfo.deserialize_json, _doc(vocab_size=True), DeserializeFormatError, "int"),
        (
            tg.TokenizerInfo.deserialize_json,
            _doc(stop_token_ids=[99]),
            DeserializeFormatError,
            "out of range",
        ),
        (
            tg.TokenizerInfo.deserialize_json,
            _doc(decoded_vocab_hex=["zz"] * 9),
            DeserializeFormatError,
            "decoded_vocab_hex",
        ),
        (
            tg.TokenizerInfo.deserialize_json,
            json.dumps({k: v for k, v in json.loads(_doc()).items() if k != "vocab_type"}),
            DeserializeFormatError,
            "'vocab_type' is missing",
        ),
    ],
)
def test_bad_documents(read, text, error, fragment):
    with pytest.raises(error, match=fragment) as info:
        read(text)
    assert isinstance(info.value, RuntimeError)  # as xgrammar's errors


def test_bad_compiled_documents():
    ok = json.loads(tg.GrammarCompiler(INFO).compile_regex("a").serialize_json())
    with pytest.raises(DeserializeFormatError, match="not base64"):
        tg.CompiledGrammar.deserialize_json(json.dumps({**ok, "data_base64": "@@"}), INFO)
    with pytest.raises(DeserializeFormatError):
        tg.CompiledGrammar.deserialize_json(json.dumps({**ok, "data_base64": "AAAA"}), INFO)
    bad_grammar = {**json.loads(tg.Grammar.from_regex("a").serialize_json()), "ebnf": "r ::= ("}
    with pytest.raises(DeserializeFormatError, match="Grammar.deserialize_json"):
        tg.Grammar.deserialize_json(json.dumps(bad_grammar))
