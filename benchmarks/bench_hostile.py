"""Hostile grammars, each sent as a request would send it: compile time, memory and outcome.

Every case (a regex, JSON Schema, EBNF or Lark grammar or a structural tag whose automaton
blows up unless it is built another way) runs in a fresh subprocess per engine, with the
engine imported and its kernels warm before the clock starts, under a time limit
(``--timeout``). Reported per engine: the outcome (compiled, refused with the error's type
and message, or killed at the limit), the compile's wall time, and the peak memory the
compile added (the peak resident set size, reset before the compile, minus the resident
set size before it). treegram
runs beside xgrammar 0.2.8 and llguidance where they can express the case.

Results go to ``benchmarks/results/hostile.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, run_meta, write_results  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "hostile.json"


def _tags(n: int, chars: int) -> dict:
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": [f"<t{i}>" for i in range(n)],
            "tags": [
                {
                    "type": "tag",
                    "begin": f"<t{i}>",
                    "content": {"type": "any_text", "max_chars": chars},
                    "end": f"</t{i}>",
                }
                for i in range(n)
            ],
        },
    }


# key -> (what it is, kind, source); kinds: regex, json_schema, ebnf, lark, structural_tag
CASES: dict[str, tuple[str, str, object]] = {
    "regex_exp": ("regex [ab]*a[ab]{20}", "regex", "[ab]*a[ab]{20}"),
    "schema_exp": (
        "JSON Schema pattern ^[ab]*a[ab]{20}$",
        "json_schema",
        {"type": "string", "pattern": "^[ab]*a[ab]{20}$"},
    ),
    "ebnf_exp": ('EBNF [ab]* "a" [ab]{20}', "ebnf", 'root ::= [ab]* "a" [ab]{20}'),
    "lark_exp": ("Lark /[ab]*a[ab]{20}/", "lark", "start: /[ab]*a[ab]{20}/"),
    "regex_written": (
        "regex (a|b)*a(a|b)(a|b)... (20 written out)",
        "regex",
        "(a|b)*a" + "(a|b)" * 20,
    ),
    "regex_nested30": ("regex ((a{1,30}){1,30}){1,30}", "regex", "((a{1,30}){1,30}){1,30}"),
    "regex_nested16": ("regex ((a{1,16}){1,16}){1,16}", "regex", "((a{1,16}){1,16}){1,16}"),
    "schema_nested16": (
        "JSON Schema pattern ^((a{1,16}){1,16}){1,16}$",
        "json_schema",
        {"type": "string", "pattern": "^((a{1,16}){1,16}){1,16}$"},
    ),
    "schema_nested_max": (
        "JSON Schema pattern ^((a{1,30}){1,30}){1,30}$ and maxLength 100",
        "json_schema",
        {"type": "string", "pattern": "^((a{1,30}){1,30}){1,30}$", "maxLength": 100},
    ),
    "tags8x1000": ("8 triggered tags, any_text max_chars 1000", "structural_tag", _tags(8, 1000)),
    "tags1x1200": ("1 triggered tag, any_text max_chars 1200", "structural_tag", _tags(1, 1200)),
}

_SETUP = {
    "treegram": """
import treegram
info = treegram.TokenizerInfo.deepseek_v4()
compiler = treegram.GrammarCompiler(info, cache_enabled=False)
treegram.warm_up()
def compile_case(kind, source):
    if kind == "regex":
        return compiler.compile_regex(source)
    if kind == "json_schema":
        return compiler.compile_json_schema(source)
    if kind == "ebnf":
        return compiler.compile_grammar(source)
    if kind == "lark":
        return compiler.compile_lark(source)
    return compiler.compile_structural_tag(source)
compile_case("regex", "ab")
""",
    "xgrammar": """
import xgrammar as xgr
import treegram
info = treegram.TokenizerInfo.deepseek_v4()
xinfo = xgr.TokenizerInfo(list(info.decoded_vocab), xgr.VocabType.RAW,
                          vocab_size=info.vocab_size, stop_token_ids=list(info.stop_token_ids))
compiler = xgr.GrammarCompiler(xinfo, cache_enabled=False)
def compile_case(kind, source):
    if kind == "regex":
        return compiler.compile_regex(source)
    if kind == "json_schema":
        return compiler.compile_json_schema(json.dumps(source))
    if kind == "ebnf":
        return compiler.compile_grammar(source)
    if kind == "lark":
        raise NotImplementedError("xgrammar compiles no Lark grammars")
    return compiler.compile_structural_tag(json.dumps(source))
compile_case("regex", "ab")
""",
    "llguidance": """
import llguidance
import treegram
from treegram.tokenizer import deepseek_v4_tokenizer_json
info = treegram.TokenizerInfo.deepseek_v4()
tok = llguidance.LLTokenizer(str(deepseek_v4_tokenizer_json()), n_vocab=info.vocab_size,
                             eos_token=list(info.stop_token_ids))
def compile_case(kind, source):
    if kind == "regex":
        grammar = llguidance.grammar_from("regex", source)
    elif kind == "json_schema":
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(source))
    elif kind == "lark":
        grammar = llguidance.grammar_from("lark", source)
    else:
        raise NotImplementedError(f"no {kind} in llguidance's grammar formats here")
    m = llguidance.LLMatcher(tok, grammar, log_level=0)
    if m.is_error():
        raise ValueError(m.get_error())
    return m
compile_case("regex", "ab")
""",
}

_RUN = """
import json, sys, time
kind, source = json.loads(sys.argv[1])
{setup}
def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
before = status_mb("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) starts again from here
    f.write("5")
t0 = time.perf_counter()
try:
    compile_case(kind, source)
    outcome = "compiled"
except NotImplementedError as exc:
    outcome = "n/a: " + str(exc)
except Exception as exc:
    outcome = f"refused: {{type(exc).__name__}}: {{str(exc)[:240]}}"
seconds = time.perf_counter() - t0
peak = status_mb("VmHWM")
print(json.dumps({{"outcome": outcome, "seconds": seconds, "memory_mb": peak - before}}))
"""


def run_case(engine: str, kind: str, source: object, timeout: float) -> dict:
    code = _RUN.format(setup=_SETUP[engine])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, json.dumps([kind, source])],
            capture_output=True,
            text=True,
            timeout=timeout + 60,  # the engine's own set-up comes first
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": f"killed at {timeout + 60:.0f} s", "seconds": None, "memory_mb": None}
    if proc.returncode != 0:
        return {
            "outcome": f"crashed (exit {proc.returncode}): {proc.stderr.strip()[-240:]}",
            "seconds": time.perf_counter() - t0,
            "memory_mb": None,
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def format_table(results: dict) -> str:
    engines = results["meta"]["engines"]
    lines = []
    for key, per_engine in results["cases"].items():
        lines.append(f"{key}: {CASES[key][0]}")
        for engine in engines:
            r = per_engine[engine]
            secs = "-" if r["seconds"] is None else f"{r['seconds']:.3f} s"
            mem = "-" if r["memory_mb"] is None else f"{r['memory_mb']:.0f} MB"
            lines.append(f"  {engine:<11} {secs:>10} {mem:>8}  {r['outcome'][:110]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="treegram,xgrammar,llguidance")
    ap.add_argument("--cases", default=None, help="comma-separated case keys (default: all)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per compile")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = ap.parse_args(argv)
    load_start = load_average()
    engines = [e for e in args.engines.split(",") if e]
    names = list(CASES) if args.cases is None else args.cases.split(",")
    cases = {}
    for name in names:
        _, kind, source = CASES[name]
        cases[name] = {e: run_case(e, kind, source, args.timeout) for e in engines}
    results = {
        "cases": cases,
        "meta": {
            **run_meta(argv, load_start, date=False),
            "engines": engines,
            "timeout_s": args.timeout,
            "notes": "fresh subprocess per case and engine; kernels and libraries warmed "
            "before the clock; memory = peak RSS (VmHWM, reset by /proc/self/clear_refs before "
            "the compile) minus RSS before it",
        },
    }
    write_results(args.output, results, format_table(results) + "\n", strict=False)
    return results


if __name__ == "__main__":
    main()
