#!/usr/bin/env python
"""JSON-Schema-Test-Suite conformance: treegram vs xgrammar, one harness, one process.

For every test group (``{description, schema, tests}``) of the official suite's required
tests (``tests/<draft>/*.json``; with ``--optional`` also ``optional/``) each engine compiles
the group's schema into a grammar over a byte-level vocabulary (256 single-byte tokens +
``<eos>``); for every test the instance is serialized with ``json.dumps`` and the matcher
must accept the whole text and be complete exactly when the test is ``valid``.

Outcomes per test and engine:

- ``pass``: valid and accepted, or invalid and rejected;
- ``false_positive``: an invalid instance accepted;
- ``false_negative``: a valid instance rejected;
- ``compile_error``: a valid test of a group whose schema the engine refused (or crashed on);
- ``refused_invalid``: an invalid test of a refused group (neither a pass nor an error: the
  engine cannot be measured there, and refusing a schema is not evidence that it rejects
  these instances for the right reason).

A schema the engine proves empty is not a refusal: treegram raises ``GrammarError("the
schema admits no JSON value")`` for a schema no value satisfies (``not: {}``, ``false``,
``enum: []``), which is the exact answer, so each test of such a group counts as rejected
(a pass when invalid, a false negative when valid: a wrong proof would show there). The
group record says ``"empty": true``.

Schemas are compiled with ``any_whitespace=True`` and, by default, ``strict_mode=False``:
JSON Schema semantics, where an absent ``additionalProperties`` allows any further property
(both engines' default ``strict_mode=True`` forbids them, which would turn every such valid
test into a false negative by design; ``--strict-mode`` measures that instead). For the
same reason treegram gets ``canonical_integers=False`` without ``--strict-mode`` (the suite
counts ``1.0`` as an integer; treegram's default writes integers only as ``1``).
``format`` is an assertion in the groups of ``optional/`` (the suite's tests of the
format-assertion vocabulary: ``optional/format/``, ``format-assertion.json``); the required
tests (``format.json``) expect JSON Schema's default, an annotation, and treegram gets
``format_assertion=False`` there (xgrammar has no such option and keeps its own behaviour).
The draft-7 groups' schemas are written for that draft: a dict schema without ``$schema``
gets ``"$schema": "http://json-schema.org/draft-07/schema#"`` (for both engines), so that a
``$ref`` overrides its sibling keywords there. Remote ``$ref``s (``http://localhost:1234/...``)
name the documents of the suite's ``remotes/`` folder: treegram receives them as
``remote_schemas`` (URI ``http://localhost:1234/`` + path under ``remotes/``); xgrammar has no
way to take them, so its groups with remote references count as compile errors unless it
compiles them anyway.

Run from the repository root: ``python benchmarks/conformance_json_schema.py --help``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import arg_parser, load_average, run_meta, write_json  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "json-schema-test-suite"
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "json_schema_suite.json"
DEFAULT_DOC = REPO / "docs" / "conformance_json_schema.md"
DRAFTS = ("draft2020-12", "draft7")
ENGINES = ("treegram", "xgrammar")
OUTCOMES = ("pass", "false_positive", "false_negative", "compile_error", "refused_invalid")
REMOTE_PREFIX = "http://localhost:1234/"
DRAFT_URIS = {"draft7": "http://json-schema.org/draft-07/schema#"}
MAX_EXAMPLES = 20


# ---------------------------------------------------------------------------- data


def find_draft_dir(data: Path, draft: str) -> Path | None:
    """``data/tests/<draft>`` (suite checkout) or ``data/<draft>`` (a copied subset)."""
    for candidate in (data / "tests" / draft, data / draft):
        if candidate.is_dir():
            return candidate
    return None


def load_suite(
    data: Path, drafts: tuple[str, ...], optional: bool = False
) -> dict[str, dict[str, list[dict]]]:
    """``{draft: {file name: [group, ...]}}`` for the required tests, and with ``optional``
    also those under ``optional/`` (named by their path there, ``optional/format/date.json``)."""
    suite: dict[str, dict[str, list[dict]]] = {}
    for draft in drafts:
        folder = find_draft_dir(data, draft)
        if folder is None:
            continue
        files = {}
        paths = sorted(folder.glob("*.json"))
        if optional:
            paths += sorted((folder / "optional").rglob("*.json"))
        for file in paths:
            with open(file, encoding="utf-8") as fh:
                files[file.relative_to(folder).as_posix()] = json.load(fh)
        suite[draft] = files
    if not suite:
        raise SystemExit(f"--data {data}: no tests/<draft>/*.json for drafts {drafts}")
    return suite


def load_remotes(data: Path) -> dict[str, Any]:
    """The suite's ``remotes/`` documents keyed by ``http://localhost:1234/<path>``."""
    folder = data / "remotes"
    out = {}
    for file in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
        with open(file, encoding="utf-8") as fh:
            out[REMOTE_PREFIX + file.relative_to(folder).as_posix()] = json.load(fh)
    return out


def for_draft(schema: Any, draft: str) -> Any:
    """The group's schema with the draft's ``$schema`` when it names none."""
    if draft in DRAFT_URIS and isinstance(schema, dict) and "$schema" not in schema:
        return {"$schema": DRAFT_URIS[draft], **schema}
    return schema


def uses_remote_ref(schema: Any) -> bool:
    """Whether the schema (or any subschema) refers to a remote document."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if (
                key in ("$ref", "$dynamicRef")
                and isinstance(value, str)
                and (value.startswith(("http://", "https://", "urn:")))
            ):
                return True
            if uses_remote_ref(value):
                return True
    elif isinstance(schema, list):
        return any(uses_remote_ref(v) for v in schema)
    return False


def serialize(data: Any) -> str | None:
    """``json.dumps(data)``; None when it is not JSON text (NaN/Infinity)."""
    try:
        return json.dumps(data, allow_nan=False)
    except ValueError:
        return None


# ---------------------------------------------------------------------------- engines


def byte_vocab() -> list[bytes]:
    return [bytes([b]) for b in range(256)] + [b"<eos>"]


class _ByteEngine:
    """An engine (the package ``name``) over 256 single-byte tokens and <eos> (stop id 256)."""

    name: str

    def __init__(self, strict_mode: bool, remotes: dict | None = None) -> None:
        self.lib = importlib.import_module(self.name)
        self.strict_mode = strict_mode
        info = self.lib.TokenizerInfo(byte_vocab(), stop_token_ids=[256])
        self.compiler = self.lib.GrammarCompiler(info)
        self.version = importlib.metadata.version(self.name)
        self.remotes = remotes or None

    def matcher(self, compiled):
        return self.lib.GrammarMatcher(compiled)


class TreegramEngine(_ByteEngine):
    name = "treegram"

    def compile(self, schema: Any, format_assertion: bool = True):
        grammar = self.lib.Grammar.from_json_schema(
            schema,
            format_assertion=format_assertion,
            any_whitespace=True,
            strict_mode=self.strict_mode,
            canonical_integers=self.strict_mode,
            remote_schemas=self.remotes,
        )
        return self.compiler.compile_grammar(grammar)

    def proves_empty(self, exc: Exception) -> bool:
        """Whether the compile failed because the schema admits no value at all."""
        return isinstance(exc, self.lib.GrammarError) and str(exc).startswith(
            "the schema admits no JSON value"
        )


class XgrammarEngine(_ByteEngine):
    name = "xgrammar"

    def compile(self, schema: Any, format_assertion: bool = True):  # noqa: ARG002 - no option
        return self.compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=True, strict_mode=self.strict_mode
        )

    def proves_empty(self, exc: Exception) -> bool:  # noqa: ARG002 - no such error
        return False


def make_engine(name: str, strict_mode: bool, remotes: dict | None = None):
    """An engine; ``remotes`` reach treegram only (xgrammar cannot take them)."""
    return {"treegram": TreegramEngine, "xgrammar": XgrammarEngine}[name](strict_mode, remotes)


def accepts(matcher, text: str) -> bool:
    """The whole text is accepted and forms a complete document."""
    matcher.reset()
    return bool(matcher.accept_string(text)) and bool(matcher.is_completed())


# ---------------------------------------------------------------------------- harness


def empty_counts() -> dict[str, int]:
    return {o: 0 for o in OUTCOMES} | {"tests": 0}


def run_group(
    engine,
    group: dict,
    texts: list[str | None],
    draft: str = "draft2020-12",
    format_assertion: bool = True,
) -> tuple[list[str], dict]:
    """Outcome per test of one group, plus the group record (compile status, timing)."""
    tests = group["tests"]
    record: dict[str, Any] = {"compiled": True}
    t0 = time.perf_counter()
    try:
        compiled = engine.compile(for_draft(group["schema"], draft), format_assertion)
        matcher = engine.matcher(compiled)
    except Exception as exc:  # noqa: BLE001 - any refusal or crash is a compile error
        record["compiled"] = False
        first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
        record["error"] = f"{type(exc).__name__}: {first_line}"
        record["compile_ms"] = (time.perf_counter() - t0) * 1e3
        if engine.proves_empty(exc):  # every instance rejected, for the right reason
            record["empty"] = True
            return ["false_negative" if t["valid"] else "pass" for t in tests], record
        return ["compile_error" if t["valid"] else "refused_invalid" for t in tests], record
    record["compile_ms"] = (time.perf_counter() - t0) * 1e3
    outcomes = []
    for test, text in zip(tests, texts, strict=True):
        try:
            ok = text is not None and accepts(matcher, text)
        except Exception as exc:  # noqa: BLE001 - a crash while matching is a rejection
            record.setdefault("match_errors", []).append(f"{type(exc).__name__}: {exc}"[:200])
            ok = False
        if ok == test["valid"]:
            outcomes.append("pass")
        else:
            outcomes.append("false_positive" if ok else "false_negative")
    return outcomes, record


def run(suite: dict, engines: list, progress: Callable[[str], None] | None = None) -> dict:
    """Run every engine over every group; per-test outcomes and aggregated counts."""
    per_engine: dict[str, dict] = {}
    for engine in engines:
        totals = empty_counts()
        drafts: dict[str, dict] = {}
        examples: dict[str, list] = {
            "false_positive": [],
            "false_negative": [],
            "compile_error": [],
        }
        groups_out = []
        t_engine = time.perf_counter()
        for draft, files in suite.items():
            draft_counts = empty_counts()
            file_counts: dict[str, dict] = {}
            for fname, groups in files.items():
                fc = empty_counts()
                for gi, group in enumerate(groups):
                    texts = [serialize(t["data"]) for t in group["tests"]]
                    asserted = fname.startswith("optional/")
                    outcomes, record = run_group(engine, group, texts, draft, asserted)
                    record.update(
                        {
                            "draft": draft,
                            "file": fname,
                            "group": gi,
                            "description": group["description"],
                            "remote_ref": uses_remote_ref(group["schema"]),
                            "outcomes": outcomes,
                        }
                    )
                    groups_out.append(record)
                    pairs = zip(group["tests"], outcomes, strict=True)
                    for ti, (test, outcome) in enumerate(pairs):
                        for counts in (fc, draft_counts, totals):
                            counts[outcome] += 1
                            counts["tests"] += 1
                        if outcome in examples and len(examples[outcome]) < MAX_EXAMPLES:
                            ex = {
                                "draft": draft,
                                "file": fname,
                                "group": gi,
                                "test": ti,
                                "group_description": group["description"],
                                "test_description": test["description"],
                            }
                            if outcome == "compile_error":
                                ex["error"] = record.get("error")
                            else:
                                ex["instance"] = texts[ti]
                            examples[outcome].append(ex)
                file_counts[fname] = fc
            drafts[draft] = {"totals": draft_counts, "files": file_counts}
            if progress:
                progress(f"{engine.name} {draft}: {draft_counts}")
        groups_compiled = sum(1 for g in groups_out if g["compiled"])
        per_engine[engine.name] = {
            "version": engine.version,
            "totals": totals,
            "drafts": drafts,
            "groups": len(groups_out),
            "groups_compiled": groups_compiled,
            "seconds": time.perf_counter() - t_engine,
            "examples": examples,
            "group_records": groups_out,
        }
    return per_engine


# ---------------------------------------------------------------------------- report


def _cell(counts: dict) -> str:
    return (
        f"{counts['pass']} | {counts['false_positive']} | {counts['false_negative']} | "
        f"{counts['compile_error']}"
    )


def format_markdown(results: dict) -> str:
    engines = [e for e in ENGINES if e in results["engines"]]
    meta = results["meta"]
    head = "| " + " | ".join(f"{e} pass | {e} FP | {e} FN | {e} CE" for e in engines) + " |"
    sep = "|" + "---|" * (4 * len(engines))
    lines = [
        "Columns per engine: pass, FP = false positives (invalid instance accepted), "
        "FN = false negatives (valid instance rejected), CE = valid tests of groups "
        "the engine refused to compile.",
        "",
    ]
    lines.append("| draft | tests " + head)
    lines.append("|---|---:" + sep)
    drafts = list(results["engines"][engines[0]]["drafts"])
    for draft in drafts:
        n = results["engines"][engines[0]]["drafts"][draft]["totals"]["tests"]
        cells = " | ".join(_cell(results["engines"][e]["drafts"][draft]["totals"]) for e in engines)
        lines.append(f"| **{draft}** | {n} | {cells} |")
    n = results["engines"][engines[0]]["totals"]["tests"]
    cells = " | ".join(_cell(results["engines"][e]["totals"]) for e in engines)
    lines.append(f"| **all** | {n} | {cells} |")
    for draft in drafts:
        lines += ["", f"### {draft}, per keyword file", ""]
        lines.append("| file | tests " + head)
        lines.append("|---|---:" + sep)
        for fname, fc in results["engines"][engines[0]]["drafts"][draft]["files"].items():
            cells = " | ".join(
                _cell(results["engines"][e]["drafts"][draft]["files"][fname]) for e in engines
            )
            lines.append(f"| {fname.removesuffix('.json')} | {fc['tests']} | {cells} |")
    lines += [
        "",
        f"Options: any_whitespace=True, strict_mode={meta['strict_mode']}; "
        f"vocabulary: 256 single-byte tokens + `<eos>`; "
        f"instances serialized with `json.dumps`.",
    ]
    return "\n".join(lines)


def format_table(results: dict) -> str:
    engines = [e for e in ENGINES if e in results["engines"]]
    lines = [
        f"{'scope':<32} {'engine':<9} {'tests':>6} {'pass':>6} {'FP':>5} {'FN':>5} "
        f"{'CE':>5} {'refI':>5}",
        "-" * 80,
    ]
    drafts = list(results["engines"][engines[0]]["drafts"])
    for scope in [*drafts, "all"]:
        for e in engines:
            r = results["engines"][e]
            c = r["totals"] if scope == "all" else r["drafts"][scope]["totals"]
            lines.append(
                f"{scope:<32} {e:<9} {c['tests']:>6} {c['pass']:>6} "
                f"{c['false_positive']:>5} {c['false_negative']:>5} "
                f"{c['compile_error']:>5} {c['refused_invalid']:>5}"
            )
    lines.append(
        "FP: invalid accepted, FN: valid rejected, CE: valid tests of refused groups, "
        "refI: invalid tests of refused groups"
    )
    return "\n".join(lines)


def write_doc(results: dict, path: Path) -> None:
    meta = results["meta"]
    eng = results["engines"]
    verdict = []
    if "treegram" in eng and "xgrammar" in eng:
        tg, xg = eng["treegram"]["totals"], eng["xgrammar"]["totals"]
        verdict = [
            f"- passes: treegram {tg['pass']}, xgrammar {xg['pass']} "
            f"({'more' if tg['pass'] > xg['pass'] else 'NOT more'} for treegram)",
            f"- false positives: treegram {tg['false_positive']}, xgrammar "
            f"{xg['false_positive']} "
            f"({'fewer' if tg['false_positive'] < xg['false_positive'] else 'NOT fewer'} "
            f"for treegram)",
            f"- for information, passes counting the invalid tests of refused groups as "
            f"rejected (pass + refused_invalid): treegram "
            f"{tg['pass'] + tg['refused_invalid']}, xgrammar "
            f"{xg['pass'] + xg['refused_invalid']}",
        ]
    text = "\n".join(
        [
            "# JSON Schema Test Suite conformance: treegram vs xgrammar",
            "",
            "Generated by `python benchmarks/conformance_json_schema.py` "
            f"({meta['date']}); raw results in `benchmarks/results/json_schema_suite.json`. "
            "Data: the official JSON-Schema-Test-Suite (json-schema-org/JSON-Schema-Test-Suite "
            "@ 44401e0, MIT), "
            + (
                "drafts 2020-12 and 7, required tests and those under `optional/` (formats "
                "as assertions, ECMA-262 regexes, big numbers; `--optional`)."
                if meta.get("optional")
                else "required tests of drafts 2020-12 and 7 (not `optional/`)."
            ),
            "",
            "Method: per test group, each engine compiles the group's schema into a grammar over a "
            "byte-level vocabulary (256 single-byte tokens + `<eos>`); per test, the instance is "
            "serialized with `json.dumps` and must be accepted (`accept_string` then "
            "`is_completed`) exactly when the test is valid. A group the engine refuses counts its "
            "valid tests as compile errors (CE); its invalid tests are counted apart "
            "(`refused_invalid` in the JSON), neither as passes nor as errors; a schema treegram "
            "proves empty (`GrammarError: the schema admits no JSON value`: `not: {}`, `false`) "
            "is not a refusal: each of its tests counts as rejected. Draft-7 schemas "
            "without `$schema` are given the draft-07 one. Remote `$ref`s "
            "(`http://localhost:1234/...`) name the suite's `remotes/` documents: treegram "
            "receives them as `remote_schemas`; xgrammar has no such option, so its groups "
            "using them are compile errors unless it compiles them anyway.",
            "",
            f"`strict_mode={meta['strict_mode']}`: "
            + (
                "JSON Schema semantics (an absent `additionalProperties` allows more properties). "
                "Both engines default to `strict_mode=True` for generation, which forbids them; "
                "`--strict-mode` measures that setting."
                if not meta["strict_mode"]
                else "the engines' generation default (absent `additionalProperties` = false)."
            ),
            "",
            "## Verdict",
            "",
            *verdict,
            "",
            "## Totals and per file",
            "",
            format_markdown(results),
            "",
            *_other_mode_lines(results),
            "Note that the suite's tests exercise keywords one at a time, usually with schemas "
            "that do not constrain `type`; an engine that refuses an inexact keyword "
            "(treegram raises `UnsupportedSchemaError`) trades compile errors for false "
            "positives.",
            "",
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _other_mode_lines(results: dict) -> list[str]:
    other = results.get("other_mode")
    if not other:
        return []
    lines = [
        f"## The same harness with strict_mode={other['strict_mode']} (totals)",
        "",
        "| engine | draft | tests | pass | FP | FN | CE | refused invalid |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in other["engines"].items():
        for scope, c in [*r["drafts"].items(), ("all", r["totals"])]:
            lines.append(
                f"| {name} | {scope} | {c['tests']} | {c['pass']} | "
                f"{c['false_positive']} | {c['false_negative']} | "
                f"{c['compile_error']} | {c['refused_invalid']} |"
            )
    return [*lines, ""]


# ---------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = arg_parser(__doc__)
    ap.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="suite checkout (holding tests/<draft>/) or a folder of <draft>/ dirs",
    )
    ap.add_argument("--drafts", nargs="+", default=list(DRAFTS), help="drafts to run")
    ap.add_argument(
        "--optional",
        action="store_true",
        help="also run the tests under <draft>/optional/ (formats as assertions, ECMA-262 "
        "regexes, big numbers...)",
    )
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument(
        "--strict-mode",
        action="store_true",
        help="compile with strict_mode=True (the engines' generation default)",
    )
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    ap.add_argument(
        "--doc", type=Path, default=DEFAULT_DOC, help="markdown report to write ('-' to skip)"
    )
    ap.add_argument(
        "--no-group-records",
        action="store_true",
        help="leave the per-group records out of the JSON",
    )
    ap.add_argument(
        "--no-other-mode",
        action="store_true",
        help="skip the second run with the other strict_mode (totals only)",
    )
    return ap


def main(argv: list[str] | None = None) -> dict:
    load_start = load_average()
    args = build_parser().parse_args(argv)
    suite = load_suite(args.data, tuple(args.drafts), args.optional)
    remotes = load_remotes(args.data)
    engines = [make_engine(name, args.strict_mode, remotes) for name in args.engines]
    per_engine = run(suite, engines, progress=lambda s: print(s, file=sys.stderr))
    if args.no_group_records:
        for r in per_engine.values():
            r.pop("group_records")
    other = None
    if not args.no_other_mode:
        other_engines = [make_engine(name, not args.strict_mode, remotes) for name in args.engines]
        other_run = run(suite, other_engines)
        other = {
            "strict_mode": not args.strict_mode,
            "engines": {
                name: {
                    "totals": r["totals"],
                    "drafts": {d: v["totals"] for d, v in r["drafts"].items()},
                }
                for name, r in other_run.items()
            },
        }
    meta = {
        **run_meta(argv, load_start),
        "data": str(args.data),
        "source": "json-schema-org/JSON-Schema-Test-Suite @ 44401e0 (MIT)",
        "drafts": list(suite),
        "optional": args.optional,
        "n_files": {d: len(f) for d, f in suite.items()},
        "n_groups": {d: sum(len(g) for g in f.values()) for d, f in suite.items()},
        "strict_mode": args.strict_mode,
        "any_whitespace": True,
        "vocabulary": "256 single-byte tokens + <eos> (stop id 256)",
        "outcomes": {
            "pass": "valid and accepted, or invalid and rejected",
            "false_positive": "invalid instance accepted",
            "false_negative": "valid instance rejected",
            "compile_error": "valid test of a group the engine refused to compile",
            "refused_invalid": "invalid test of a group the engine refused to compile",
        },
    }
    results = {"meta": meta, "engines": per_engine}
    if other is not None:
        results["other_mode"] = other
    write_json(args.output, results, indent=1)
    if str(args.doc) != "-":
        write_doc(results, args.doc)
    print(format_table(results))
    print(f"wrote {args.output}" + (f" and {args.doc}" if str(args.doc) != "-" else ""))
    return results


if __name__ == "__main__":
    main()
