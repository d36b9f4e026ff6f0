"""``bench.sample_serving``: py-spy's raw stacks counted by package, the serving thread's
only, its waits for the network left out."""

from __future__ import annotations

from bench.sample_serving import package, shares

LOOP = "run (serving.py:54);BaseEventLoop._run_once (asyncio/base_events.py:1922)"
RAW = "\n".join(
    [
        f"{LOOP};Handle._run (asyncio/events.py:80);front (dynagent/http/middleware/front.py:40) 5",
        f"{LOOP};Handle._run (asyncio/events.py:80);Agent.run (dynagent/runtime/agent.py:130) 3",
        f"{LOOP};Handle._run (asyncio/events.py:80);_request (aiohttp/client.py:558) 7",
        f"{LOOP};EpollSelector.select (selectors.py:468) 50",  # waiting: not CPU
        f"{LOOP};Handle._run (asyncio/events.py:80);__init__ (<string>:3) 2",
        "Thread._bootstrap (threading.py:1002);Condition.wait (threading.py:327) 40",  # a worker
    ]
)


def test_samples_are_counted_by_package_on_the_serving_thread_only() -> None:
    assert shares(RAW) == {
        "dynagent/http": 5,
        "dynagent/runtime": 3,
        "aiohttp": 7,
        "<dataclass>": 2,
    }


def test_own_code_is_split_by_module_when_asked() -> None:
    assert shares(RAW, modules=True)["dynagent/runtime/agent"] == 3
    assert package("x (dynagent/http/middleware/front.py:40)", True) == (
        "dynagent/http/middleware/front"
    )
    assert package("get (json/decoder.py:337)") == "json"
