"""``bench._budget``: the throughput bars as microseconds of work per request, read off
the floor with work added (``bench._floor work=N``)."""

from __future__ import annotations

from typing import Any

import pytest

from bench._budget import budget, budget_lines


def figure(cpu_us: float, rps_share: float) -> dict[str, Any]:
    return {"server_cpu_ms_per_request": cpu_us / 1000, "rps_ratio_to_floor": rps_share}


def test_the_budget_is_what_the_bars_leave_at_the_rate_work_costs() -> None:
    # Each µs of work costs 1 µs of CPU, and 0.002 of the floor's req/s.
    figures = {
        "floor_stream": figure(200, 1.0),
        "floor_work100_stream": figure(300, 0.8),
        "floor_work200_stream": figure(400, 0.6),
        "invoke_stream": figure(600, 0.4),
    }
    found = budget(
        figures,
        (100, 200),
        ("invoke", "chat_completions"),
        cpu_ratio=1.5,
        rps_ratio=0.8,
        suffix="_stream",
    )
    assert found["cpu_us_per_work_us"] == pytest.approx(1.0)
    assert found["cpu_bar_leaves_us"] == pytest.approx(100.0)  # 0.5 x the floor's 200
    assert found["rps_bar_leaves_us"] == pytest.approx(100.0)
    assert found["routes_take_us"] == {"invoke_stream": pytest.approx(400.0)}
    [line] = budget_lines({"8": found}, "streamed")
    assert "the CPU bar leaves 100.0 µs" in line
    assert "invoke_stream 400" in line
