"""Run xgrammar 0.2.8's own Python test suite against treegram through an import shim.

1. Downloads the xgrammar 0.2.8 sdist with pip (once; cached under ``.cache/`` here, so
   reruns are offline) and extracts its ``tests/`` folder.
2. Lists the tests with the real xgrammar (the reference list; a test module that cannot
   even be imported under the shim still counts, as failed).
3. Runs pytest over the tests in subprocesses with ``shim/`` first on ``PYTHONPATH``, so
   ``import xgrammar`` is treegram (checked: the run aborts if any other ``xgrammar`` is
   imported), the Hugging Face hub offline and a per-test time limit. A process that dies
   (a crash, a hard timeout) is restarted after the test it died in.
4. Writes totals, per-test outcomes and failure causes to
   ``benchmarks/results/xgrammar_suite.json`` and prints a table.

Tests marked ``hf_token_required`` are not run; tests that fail on a network or hub error
(a tokenizer download) are counted apart as not offline-runnable. ``--oracle`` runs the
same tests with the real xgrammar first (cached), so the table also shows which tests the
real xgrammar passes offline.

Examples::

    python benchmarks/xgrammar_suite/run_suite.py                      # the whole suite
    python benchmarks/xgrammar_suite/run_suite.py --files test_lark.py # one file
    python benchmarks/xgrammar_suite/run_suite.py -k any_order --show-failures 20
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHIM = HERE / "shim"
CACHE = HERE / ".cache"
VERSION = "0.2.8"
RESULTS = REPO / "benchmarks" / "results" / "xgrammar_suite.json"

_PYTEST_INI = """[pytest]
markers =
    hf_token_required: mark test as requiring a huggingface token
    thread_unsafe: mark the test function as single-threaded
"""

# Failure causes, checked in order against the exception line pytest reports.
_NETWORK = re.compile(
    r"huggingface|hf_hub|HF_HUB_OFFLINE|offline mode|LocalEntryNotFound|couldn't connect|"
    r"Cannot find the requested files|is not a local folder and is not a valid model|"
    r"Can't load tokenizer|ConnectionError|MaxRetryError|NameResolution|gated repo",
    re.IGNORECASE,
)
_MISSING = re.compile(
    r"has no attribute|cannot import name|No module named 'xgrammar|"
    r"unexpected keyword argument|positional argument|required (keyword-only |positional )?"
    r"argument|is not callable|object is not subscriptable|not iterable",
)


# Known deliberate differences, by the text of the failure (checked before the generic causes).
_KNOWN = [
    (r"Regex pattern did not match", "different error message"),
    (r"excludes is not supported|excludes with a JSON value that may hold strings",
     "JSON Schema string excludes not built"),
    (r"'\w+_xml' is not supported|carry XML arguments", "XML argument style not built"),
    (r"token and character budgets|rule attribute '(max_tokens|suffix|stop)'|"
     r"'max_tokens' is not supported", "token / character budgets and Lark stop/suffix"),
    (r"temperature|batch_fill_temperature", "per-rule temperature not built"),
    (r"No module named 'cohere_melody'", "needs a package that is not installed"),
    (r"KeyError: '(grammar|adaptive_token_mask_cache|rules|grammar_expr_data|"
     r"sorted_decoded_vocab)'|'v16'|__VERSION__|DID NOT RAISE DeserializeFormatError",
     "compares xgrammar's serialization format"),
    (r"Expected RepeatRef edges|Rule 0: |_debug_print_internal_state",
     "compares xgrammar's internal FSM / state printout"),
    (r"is not supported \(position \d+ in regex|lookahead assertion|lookbehind|"
     r"backreference|word boundary|Unicode property", "regex features refused (lookaround...)"),
]  # fmt: skip


def cause(outcome: str, message: str) -> str:
    """The failure cause of one test from its outcome and pytest's exception line."""
    if outcome == "timeout" or "SuiteTimeout" in message:
        return "timeout"
    if outcome == "crash":
        return "crash (process died)"
    if outcome == "not run":
        return "not run (no outcome under this test id)"
    if _NETWORK.search(message):
        return "network / hub download"
    for pattern, name in _KNOWN:
        if re.search(pattern, message):
            return name
    if outcome == "collection error":
        return "missing API (test module does not import)"
    if _MISSING.search(message):
        return "missing API (name, argument or method)"
    first = message.split("\n", 1)[0]
    asserted = first.startswith("AssertionError") or first.startswith("assert ")
    if asserted and ("::=" in message or "Regex(" in message or "json_string=" in message):
        return "compares xgrammar's printed EBNF text"
    if asserted and (" in '" in first or ' in "' in first) and "rror" in message:
        return "different error message"
    if asserted:
        return "different behaviour (assertion)"
    if first.startswith("Failed: DID NOT RAISE"):
        return "different behaviour (no error raised)"
    if first.startswith("Failed: DID NOT WARN"):
        return "different behaviour (no warning)"
    head = first.split(":", 1)[0].strip().split(".")[-1] or "unknown"
    return f"exception ({head})"


def ensure_tests(download: bool = True) -> Path:
    """The extracted ``tests`` folder of the xgrammar sdist, downloading it once."""
    CACHE.mkdir(exist_ok=True)
    (CACHE / ".gitignore").write_text("*\n", encoding="utf-8")
    sdist = CACHE / f"xgrammar-{VERSION}.tar.gz"
    if not sdist.exists():
        if not download:
            raise SystemExit(f"{sdist} missing and --no-download given")
        # --no-binary for xgrammar only: its build dependencies may come as wheels (pip
        # prepares the sdist's metadata, which builds nothing of xgrammar itself).
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
               "xgrammar", f"xgrammar=={VERSION}", "-d", str(CACHE)]  # fmt: skip
        subprocess.run(cmd, check=True)
    root = CACHE / f"xgrammar-{VERSION}"
    tests = root / "tests"
    if not (tests / "python").is_dir():
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"{root.name}/tests/")]
            tar.extractall(CACHE, members=members, filter="data")
        (tests / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")
    return tests


# caches of test ids name the hash seed they were made with (older ones, made with random
# seeds, are not read)
_HASH_SEED = "0"
_SEED_TAG = f"-hashseed{_HASH_SEED}"


def _env(
    shim: bool, events: Path, only: Path | None, timeout: float, ignore_text: bool = False
) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(HERE)]
    if shim:
        paths[:0] = [str(SHIM), str(REPO)]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    # some parameter ids of the suite come from set order: one hash seed for every run, so
    # the collection, the oracle run and the shim run name the same tests alike
    env["PYTHONHASHSEED"] = _HASH_SEED
    env["XGR_SUITE_EVENTS"] = str(events)
    env["XGR_SUITE_TIMEOUT"] = str(timeout)
    env["XGR_SUITE_IGNORE_TEXT"] = "1" if ignore_text else "0"
    env.pop("XGR_SUITE_ONLY", None)
    if only is not None:
        env["XGR_SUITE_ONLY"] = str(only)
    return env


def _read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _pytest(tests: Path, env: dict[str, str], args: list[str]) -> int:
    # --tb=native: the plugin records only the exception line, and pytest's own traceback
    # (the source of each frame, found by parsing the whole test file per failure) cost
    # more than running the failing test (8 s of a 25 s run with 132 failures)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "_suite_plugin",
           "-q", "--no-header", "-rN", "-W", "ignore", "--continue-on-collection-errors",
           "--tb=native", *args]  # fmt: skip
    done = subprocess.run(cmd, cwd=tests, env=env, stdout=subprocess.DEVNULL)
    return done.returncode


def collect(tests: Path) -> list[dict]:
    """Every test id of the suite with its hf_token_required marker, from the real xgrammar."""
    cached = CACHE / f"collected{_SEED_TAG}.json"
    if cached.exists():
        return json.loads(cached.read_text(encoding="utf-8"))
    events = CACHE / "collect_events.jsonl"
    events.unlink(missing_ok=True)
    _pytest(tests, _env(False, events, None, 60.0), ["--collect-only", "python"])
    found = [e for e in _read_events(events) if e["event"] == "collected"]
    if not found:
        raise SystemExit("collecting xgrammar's tests with the real xgrammar failed")
    listed = found[-1]["tests"]
    cached.write_text(json.dumps(listed), encoding="utf-8")
    return listed


def _absorb(new: list[dict], remaining: list[str], outcomes: dict[str, dict], shim: bool) -> None:
    """Fold the plugin's events into ``outcomes`` (a failure in any phase wins)."""
    for e in new:
        if e["event"] == "xgrammar":
            inside = Path(e["file"]).is_relative_to(SHIM)
            if inside != shim:
                raise SystemExit(f"the tests imported the wrong xgrammar: {e['file']}")
        elif e["event"] == "collect_error":
            for i in remaining:
                if i.startswith(e["id"] + "::") or i == e["id"]:
                    msg = e["message"].strip().splitlines()
                    outcomes.setdefault(i, {"outcome": "collection error",
                                            "message": msg[-1] if msg else ""})  # fmt: skip
        elif e["event"] == "report":
            cur = outcomes.get(e["id"])
            if e["outcome"] == "failed" or cur is None or cur["outcome"] == "passed":
                outcome = e["outcome"]
                if outcome == "failed" and e["when"] != "call":
                    outcome = "error"
                if "SuiteTimeout" in e["message"]:
                    outcome = "timeout"
                outcomes[e["id"]] = {"outcome": outcome, "message": e["message"]}


def replay(ids: list[str], tag: str, shim: bool) -> dict[str, dict]:
    """The outcomes a finished run recorded in ``.cache/<tag>_events.jsonl`` (no rerun)."""
    outcomes: dict[str, dict] = {}
    _absorb(_read_events(CACHE / f"{tag}_events.jsonl"), list(ids), outcomes, shim)
    for i in ids:
        outcomes.setdefault(i, {"outcome": "not run", "message": "no outcome recorded"})
    return outcomes


def run(
    tests: Path, ids: list[str], *, shim: bool, timeout: float, tag: str, ignore_text: bool = False
) -> dict[str, dict]:
    """Run ``ids``; one outcome per id (restarting the process after a crash)."""
    events = CACHE / f"{tag}_events.jsonl"
    events.unlink(missing_ok=True)
    only = CACHE / f"{tag}_only.txt"
    outcomes: dict[str, dict] = {}
    remaining = list(ids)
    files = sorted({i.split("::", 1)[0] for i in ids})
    while remaining:
        only.write_text("\n".join(remaining), encoding="utf-8")
        start = len(_read_events(events))
        rc = _pytest(tests, _env(shim, events, only, timeout, ignore_text), files)
        new = _read_events(events)[start:]
        _absorb(new, remaining, outcomes, shim)
        started = [e["id"] for e in new if e["event"] == "start"]
        last = started[-1] if started else None
        if rc not in (0, 1, 5) and last is not None and last not in outcomes:
            outcomes[last] = {"outcome": "crash", "message": f"pytest exited with {rc}"}
        before = len(remaining)
        remaining = [i for i in remaining if i not in outcomes]
        if rc in (0, 1, 5) or len(remaining) == before:
            for i in remaining:  # never reported: deselected or lost
                outcomes[i] = {"outcome": "not run", "message": f"pytest exited with {rc}"}
            break
        print(f"  pytest exited with {rc} in {last}; resuming ({len(remaining)} left)")
    return outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--files", nargs="*", help="only these test files (e.g. test_lark.py)")
    p.add_argument("-k", dest="keyword", help="only test ids containing this substring")
    p.add_argument("--timeout", type=float, default=60.0, help="per-test limit, seconds")
    p.add_argument("--oracle", action="store_true", help="also run with the real xgrammar")
    p.add_argument(
        "--compare-time",
        action="store_true",
        help="run the selected tests with the real xgrammar again and report both wall times",
    )
    p.add_argument(
        "--oracle-only", action="store_true", help="only run (and cache) the real xgrammar"
    )
    p.add_argument(
        "--ignore-text",
        action="store_true",
        help="measurement: the suite's EBNF-text comparison helpers only build the grammar",
    )
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the results from the last run's recorded events, without running",
    )
    p.add_argument("--output", type=Path, default=None, help="JSON results file")
    p.add_argument("--show-failures", type=int, default=0, help="print N failure messages")
    args = p.parse_args(argv)

    tests = ensure_tests(download=not args.no_download)
    listed = collect(tests)
    selected = [t for t in listed if not t["hf_token_required"]]
    if args.files:
        selected = [t for t in selected if t["id"].split("::")[0].split("/")[-1] in args.files]
    if args.keyword:
        selected = [t for t in selected if args.keyword in t["id"]]
    ids = [t["id"] for t in selected]
    partial = bool(args.files or args.keyword or args.ignore_text)
    output = args.output or (RESULTS if not partial else CACHE / "partial.json")

    cached = CACHE / f"oracle{_SEED_TAG}.json"  # the real xgrammar's outcomes, when once run
    oracle: dict[str, dict] = json.loads(cached.read_text("utf-8")) if cached.exists() else {}
    xgrammar_wall = None
    if args.oracle or args.oracle_only or args.compare_time:
        # --compare-time runs every selected test with the real xgrammar again, timed
        todo = ids if args.compare_time else [i for i in ids if i not in oracle]
        if todo:
            print(f"running {len(todo)} tests with the real xgrammar ...")
            t0 = time.perf_counter()
            oracle.update(run(tests, todo, shim=False, timeout=args.timeout, tag="oracle"))
            if args.compare_time:
                xgrammar_wall = time.perf_counter() - t0
            cached.write_text(json.dumps(oracle), encoding="utf-8")
        if args.oracle_only:
            passed = sum(1 for i in ids if oracle[i]["outcome"] == "passed")
            print(f"real xgrammar, offline: {passed} of {len(ids)} selected tests pass")
            return 0

    t0 = time.perf_counter()
    tag = "shim_text" if args.ignore_text else "shim"
    if args.report_only:
        outcomes = replay(ids, tag, shim=True)
    else:
        print(f"running {len(ids)} tests against treegram through the shim ...")
        outcomes = run(
            tests, ids, shim=True, timeout=args.timeout, tag=tag, ignore_text=args.ignore_text
        )
    wall = time.perf_counter() - t0

    per_test = {}
    for i in ids:
        o = outcomes[i]
        c = None if o["outcome"] in ("passed", "skipped") else cause(o["outcome"], o["message"])
        # the message's head is enough to read the cause (the events file keeps it whole)
        per_test[i] = {"outcome": o["outcome"], "message": o["message"][:240], "cause": c}
        if i in oracle:
            per_test[i]["xgrammar"] = oracle[i]["outcome"]
    # Offline-runnable: with the real xgrammar's outcomes at hand, the tests it passes here
    # (the others are skipped for CUDA/MLX, need a package, or have unstable ids); without
    # them, every selected test that did not fail on a hub download.
    have_oracle = all(i in oracle for i in ids)
    not_runnable: Counter = Counter()
    runnable = []
    for i in ids:
        if have_oracle and oracle[i]["outcome"] != "passed":
            o = oracle[i]
            reason = o["message"].split("\n", 1)[0][:80] if o["outcome"] == "skipped" else None
            not_runnable[reason or cause(o["outcome"], o["message"])] += 1
        elif per_test[i]["cause"] == "network / hub download":
            not_runnable["network / hub download"] += 1
        else:
            runnable.append(i)
    passed = [i for i in runnable if per_test[i]["outcome"] == "passed"]
    skipped = [i for i in runnable if per_test[i]["outcome"] == "skipped"]
    causes = Counter(per_test[i]["cause"] for i in runnable if per_test[i]["cause"])
    by_file: dict[str, Counter] = {}
    for i in runnable:
        f = i.split("::")[0].split("/")[-1]
        by_file.setdefault(f, Counter())[per_test[i]["outcome"]] += 1

    result = {
        "xgrammar_version": VERSION,
        "command": " ".join(
            ["python", "benchmarks/xgrammar_suite/run_suite.py", *(argv or sys.argv[1:])]
        ),
        "timeout_s": args.timeout,
        "ignore_text": args.ignore_text,
        # --report-only re-sorts the causes of the last run's recorded outcomes (wall_s 0)
        "replayed_from_events": args.report_only,
        "wall_s": round(wall, 1),
        # --compare-time: the same tests with the real xgrammar, in the same processes' setup
        "xgrammar_wall_s": None if xgrammar_wall is None else round(xgrammar_wall, 1),
        "totals": {
            "collected": len(listed),
            "hf_token_required (not run)": sum(t["hf_token_required"] for t in listed),
            "selected": len(ids),
            "not offline-runnable": sum(not_runnable.values()),
            "offline-runnable": len(runnable),
            "passed": len(passed),
            "skipped": len(skipped),
            "failed": len(runnable) - len(passed) - len(skipped),
            "pass_rate": round(len(passed) / max(1, len(runnable)), 4),
        },
        "offline_runnable_by": (
            "tests the real xgrammar passes offline here" if have_oracle else "no hub error"
        ),
        "not_offline_runnable": dict(not_runnable.most_common()),
        "failure_causes": dict(causes.most_common()),
        "by_file": {f: dict(c) for f, c in sorted(by_file.items())},
        "tests": per_test,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")

    tot = result["totals"]
    print(f"\nxgrammar {VERSION} suite against treegram ({wall:.0f} s)")
    if xgrammar_wall is not None:
        print(f"  the same tests with the real xgrammar: {xgrammar_wall:.0f} s")
    for k, v in tot.items():
        print(f"  {k:40s} {v}")
    print(f"  (offline-runnable: {result['offline_runnable_by']})")
    for reason, n in not_runnable.most_common():
        print(f"  not runnable: {n:5d}  {reason}")
    print("\nfailure causes (offline-runnable tests)")
    for c, n in causes.most_common():
        print(f"  {n:6d}  {c}")
    print("\nper file: passed / offline-runnable")
    for f, c in sorted(by_file.items()):
        print(f"  {f:45s} {c['passed']:5d} / {sum(c.values())}")
    if args.show_failures:
        print("\nfailures")
        shown = [i for i in runnable if per_test[i]["cause"]][: args.show_failures]
        for i in shown:
            print(f"  {i}\n      [{per_test[i]['cause']}] {per_test[i]['message'][:300]}")
    print(f"\nwrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
