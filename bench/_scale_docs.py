"""The agents of the scale benchmark: one Nacos config each, all different."""

from __future__ import annotations

import yaml

GROUP = "BENCH_AGENTS"


def agent_name(index: int) -> str:
    return f"agent-{index:04d}"


def document(index: int, model_url: str, *, version: int = 1) -> str:
    return yaml.safe_dump(
        {
            "name": agent_name(index),
            "description": f"Scale benchmark agent {index}",
            "model": {
                "provider": "openai",
                "base_url": model_url,
                "api_key": "bench-key",
                "name": "reply",
                "settings": {"temperature": 0.2},
            },
            "prompt": {
                "system": f"You are agent {index}, version {version}. Answer for {{{{company}}}}.",
                "variables": {"company": "ACME"},
            },
            "tools": ["calculator", "current_time"],
            "interceptors": [{"tool_call_limit": {"max": 5}}],
            "limits": {"max_steps": 6},
        },
        sort_keys=False,
    )
