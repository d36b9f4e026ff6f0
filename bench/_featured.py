"""``python -m bench._featured BASE_URL``: the raw floor plus the least each per-request
feature of the service's default configuration costs, in the libraries the service uses.

``POST /invoke`` makes the raw floor's model call (``bench._floor raw``: aiohttp's client,
one session) and around it does, once each and in the simplest way that does the job:

- auth: the caller's key looked up;
- validation: the body parsed by the service's own request model (``InvokeRequest``);
- a trace id (``secrets.token_hex``), and the run's deadline (one timer, cancelled);
- the run's five events kept, as tuples, in a trace store bounded to 1,000 traces;
- the answer masked for the service's secrets (``SecretValues``);
- metrics: the request, token and evidence counters and two latency histograms
  (``prometheus_client``, label children made once);
- the run's log line, written and flushed;
- the answer as the service's ``invoke`` answers it (``orjson``).

Left out, each a few microseconds at least when done this way: routing and the canary's
choice, retries and the breaker, spend and the guard's window, the judge's sampling, the
drain's count of running requests. Whole answers only. What this floor costs beyond the
raw floor is about what the service's features must cost; the rest of what the service
spends is how it is built (``bench.throughput --featured-floor``).

Prints ``{"url": …}`` once listening; stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import sys
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import ValidationError

from bench._floor import serve_app
from bench.scenarios import REPLY_MODEL, SYSTEM
from dynagent.http.api.schemas import InvokeRequest
from dynagent.masking import SecretValues

MAX_TRACES = 1000


class _Metrics:
    """The service's per-run series, their children made once."""

    def __init__(self) -> None:
        registry = CollectorRegistry()
        runs = Counter("runs", "", ["agent", "variant", "endpoint", "outcome"], registry=registry)
        tokens = Counter("tokens", "", ["agent", "revision", "variant"], registry=registry)
        labels = ["agent", "revision", "variant", "source", "outcome", "weight"]
        evidence = Counter("evidence", "", labels, registry=registry)
        latency = Histogram("latency", "", ["agent", "variant", "endpoint"], registry=registry)
        evidence_latency = Histogram(
            "evidence_latency", "", ["agent", "revision", "variant", "source"], registry=registry
        )
        self.runs = runs.labels("reply", "stable", "invoke", "ok")
        self.tokens = tokens.labels("reply", "r1", "stable")
        self.evidence = evidence.labels("reply", "r1", "stable", "routed", "ok", "")
        self.latency = latency.labels("reply", "stable", "invoke")
        self.evidence_latency = evidence_latency.labels("reply", "r1", "stable", "routed")

    def observe(self, seconds: float, tokens: int) -> None:
        self.runs.inc()
        self.tokens.inc(tokens)
        self.evidence.inc()
        self.latency.observe(seconds)
        self.evidence_latency.observe(seconds)


def app(session: aiohttp.ClientSession, base_url: str) -> web.Application:
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}
    keys = {"Bearer a-caller-key": "caller"}
    mask = SecretValues()
    mask.add(["bench-key-not-shown", "another-secret-value"])
    metrics = _Metrics()
    traces: collections.OrderedDict[str, tuple[Any, ...]] = collections.OrderedDict()
    log = sys.stderr

    async def invoke(request: web.Request) -> web.Response:
        started = time.perf_counter()
        keys.get(request.headers.get("Authorization", ""))
        try:
            body = InvokeRequest.model_validate_json(await request.read())
        except ValidationError as exc:
            error = {"type": "invalid_request", "message": str(exc.errors()[0]["msg"])}
            return web.json_response({"error": error}, status=400)
        text = body.input if isinstance(body.input, str) else ""
        trace_id = secrets.token_hex(16)
        loop = asyncio.get_running_loop()
        deadline = loop.call_at(loop.time() + 60, lambda: None)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        events: list[tuple[Any, ...]] = [("run_started", text), ("model_request", 2)]
        call = {"model": REPLY_MODEL, "messages": messages}
        async with session.post(url, data=orjson.dumps(call), headers=headers) as response:
            answer = orjson.loads(await response.read())
        deadline.cancel()
        output = mask.mask(answer["choices"][0]["message"]["content"])
        usage = answer.get("usage") or {}
        events += [("model_response", output, usage), ("final_output", output)]
        events.append(("run_finished", usage))
        traces[trace_id] = tuple(events)
        while len(traces) > MAX_TRACES:
            traces.popitem(last=False)
        seconds = time.perf_counter() - started
        metrics.observe(seconds, int(usage.get("total_tokens", 0)))
        log.write(f"INFO | {trace_id} | invoke reply@r1 (stable) ok in {seconds * 1000:.0f} ms\n")
        log.flush()
        shown = {
            "input_tokens": usage.get("prompt_tokens", 0),
            "output_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0),
        }
        out = {
            "output": output,
            "agent": "reply",
            "revision": "r1",
            "variant": "stable",
            "trace_id": trace_id,
            "session_id": None,
            "usage": shown,
            "steps": 1,
        }
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    application = web.Application()
    application.router.add_post("/invoke", invoke)
    return application


async def serve(base_url: str) -> None:
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    await serve_app(app(session, base_url), session.close)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
