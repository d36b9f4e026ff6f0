"""Evaluation runs priced by the service's ``models.prices``: a case's cost and its
``max-cost`` check are the run's own cost, as traces and metrics show it."""

from __future__ import annotations

from types import MappingProxyType

from dynagent import AgentBuilder, load_spec
from dynagent.evals.runner import run_suite
from dynagent.evals.spec import load_suite
from dynagent.models.prices import Price, Prices

PRICES = Prices(MappingProxyType({"m-priced": Price(2.0, 8.0)}))
SUITE = """
cases:
  - id: cheap-enough
    input: hello there
    assert: [{type: max-cost, value: 1.0}]
  - id: too-dear
    input: hello there
    assert: [{type: max-cost, value: 0.0000001}]
"""


async def test_a_case_costs_what_its_run_cost_and_max_cost_checks_it() -> None:
    builder = AgentBuilder(prices=PRICES)
    priced = builder.build(
        load_spec(
            {
                "name": "bot",
                "model": {"provider": "test", "name": "m-priced"},
                "prompt": {"system": "Answer."},
            }
        )
    )
    unpriced = builder.build(
        load_spec(
            {
                "name": "bot",
                "model": {"provider": "test", "name": "m-other"},
                "prompt": {"system": "Answer."},
            }
        )
    )
    suite = load_suite(SUITE, agent="bot")
    direct = await priced.run("hello there")

    run = await run_suite(priced, suite)
    free = await run_suite(unpriced, suite)

    assert direct.cost_usd is not None and direct.cost_usd > 1e-7
    cases = {case.case_id: case for case in run.cases}
    assert [t.cost for t in cases["cheap-enough"].trials] == [direct.cost_usd]
    assert (cases["cheap-enough"].passed, cases["too-dear"].passed) == (True, False)
    # Unknown prices: no cost, and a cost ceiling cannot pass.
    assert [t.cost for case in free.cases for t in case.trials] == [None, None]
    assert [case.passed for case in free.cases] == [False, False]
