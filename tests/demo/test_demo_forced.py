"""The demo with grammar-forced draft nodes (``forced_budget`` / ``--forced-drafts``): the
output stays token for token that of plain constrained greedy decoding, and forced nodes
are accepted (fewer steps)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from treegram.cli import main  # noqa: E402
from treegram.demo import EXAMPLES, DemoEngine, DemoRequest  # noqa: E402

REQUESTS = (
    *EXAMPLES,
    DemoRequest("[[1, 2], [3]] ", None, "json"),
    DemoRequest(
        "Pick: ",
        {
            "type": "object",
            "properties": {"mode": {"enum": ["automatic", "manual"]}, "n": {"const": 42}},
            "required": ["mode", "n"],
            "additionalProperties": False,
        },
        "enum",
    ),
)


@pytest.fixture(scope="module", params=[0, 3], ids=lambda s: f"seed{s}")
def engine(request):
    with DemoEngine(seed=request.param) as eng:
        yield eng


@pytest.mark.parametrize(("tree_nodes", "budget"), [(1, 16), (6, 3), (16, 16)])
def test_forced_nodes_keep_the_greedy_output(engine, tree_nodes, budget):
    reference = engine.greedy(REQUESTS, max_tokens=200)
    plain = engine.speculative(REQUESTS, max_tokens=200, tree_nodes=tree_nodes)
    forced = engine.speculative(
        REQUESTS, max_tokens=200, tree_nodes=tree_nodes, forced_budget=budget
    )
    for got, ref in zip(forced.results, reference, strict=True):
        assert got.token_ids == ref.token_ids, got.request.name
        assert sum(got.step_lengths) == len(got.token_ids)
        assert got.terminated
    # forced nodes are accepted: more tokens per step than without them
    assert forced.mean_step_length > plain.mean_step_length
    if tree_nodes == 1:  # no drafter at all: every step beyond one token is forced nodes
        assert plain.mean_step_length == 1.0
        assert forced.steps < plain.steps


def test_bad_forced_budget(engine):
    with pytest.raises(ValueError, match="forced_budget"):
        engine.speculative(EXAMPLES[:1], forced_budget=-1)


def test_cli_forced_drafts(capsys):
    assert main(["demo", "--max-tokens", "200", "--forced-drafts", "8", "--check"]) == 0
    out = capsys.readouterr().out
    assert "up to 8 grammar-forced nodes" in out
    assert out.count(", valid\n") == len(EXAMPLES)
    assert "identical to plain constrained greedy decoding: yes" in out
    assert main(["demo", "--forced-drafts", "-1"]) == 2
