"""The bars of ``bench.throughput`` as a budget of microseconds.

The floor with N µs of plain-Python work added per request (``bench._floor work=N``)
shows what work added to a request costs in server CPU and in requests/s on this machine,
in this run. From it: how many µs of work per request the CPU bar (1.5 times the floor's CPU)
and the req/s bar (0.8 of the floor's) leave to everything a service does beyond
forwarding the call, and how many the service's routes take now.
"""

from __future__ import annotations

from typing import Any


def _slope(points: list[tuple[float, float]]) -> float:
    """Least squares: the rise of y per unit of x."""
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    rise = sum((x - mean_x) * (y - mean_y) for x, y in points)
    run = sum((x - mean_x) ** 2 for x, _ in points)
    return rise / run if run else 0.0


def work_name(micros: int) -> str:
    return f"floor_work{micros}"


def budget(
    figures: dict[str, dict[str, Any]],
    works: tuple[int, ...],
    routes: tuple[str, ...],
    *,
    cpu_ratio: float,
    rps_ratio: float,
    suffix: str = "",
) -> dict[str, Any]:
    """One level's budget: CPU per µs of added work, the µs each bar leaves, and the µs
    each route takes beyond the floor (its CPU above the floor's, at the same rate)."""
    floor = figures["floor" + suffix]
    base = floor["server_cpu_ms_per_request"] * 1000
    worked = [(float(w), figures[work_name(w) + suffix]) for w in works]
    cpu = [(0.0, base), *((w, f["server_cpu_ms_per_request"] * 1000) for w, f in worked)]
    per_work = _slope(cpu)  # µs of CPU per µs of work added
    # req/s as a share of the floor's falls with work; where it crosses the req/s bar:
    shares = [(0.0, 1.0), *((w, f["rps_ratio_to_floor"]) for w, f in worked)]
    share_slope = _slope(shares)
    taken = {
        name: round((figures[name]["server_cpu_ms_per_request"] * 1000 - base) / per_work, 1)
        for name in (route + suffix for route in routes)
        if name in figures and per_work > 0
    }
    return {
        "floor_cpu_us": round(base, 1),
        "cpu_us_per_work_us": round(per_work, 3),
        "cpu_bar_leaves_us": round((cpu_ratio - 1) * base / per_work, 1) if per_work > 0 else None,
        "rps_bar_leaves_us": round((rps_ratio - 1) / share_slope, 1) if share_slope < 0 else None,
        "routes_take_us": taken,
    }


def budget_lines(budgets: dict[str, dict[str, Any]], kind: str) -> list[str]:
    found = []
    for level, b in budgets.items():
        taken = ", ".join(f"{name} {us:.0f}" for name, us in b["routes_take_us"].items())
        found.append(
            f"budget {kind} at {level}: floor {b['floor_cpu_us']:.0f} µs CPU/request; each µs "
            f"of work adds {b['cpu_us_per_work_us']:.2f} µs; the CPU bar leaves "
            f"{b['cpu_bar_leaves_us']} µs, the req/s bar {b['rps_bar_leaves_us']} µs; "
            f"taken now (µs): {taken}"
        )
    return found
