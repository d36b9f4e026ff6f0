"""``bench.side_by_side``: trees serving at once, each measured over its own turns."""

from __future__ import annotations

from bench.side_by_side import Turns, measure, table


async def test_each_tree_is_measured_over_its_own_turns() -> None:
    turns = await measure(["-", "-"], "invoke", stream=True, rounds=2, seconds=0.2, level=2)

    assert [t.tree for t in turns] == ["-", "-"]
    for turn in turns:
        assert turn.answered > 0
        assert len(turn.each) == 2
        assert turn.per_request == turn.cpu / turn.answered * 1e6


def test_the_table_gives_each_tree_against_the_first() -> None:
    first = Turns("a", cpu=0.5, answered=1000, each=[400.0, 600.0])
    second = Turns("b", cpu=0.45, answered=1000, each=[440.0, 460.0])

    lines = table([first, second]).splitlines()

    assert lines[1].split()[:3] == ["a", "500.0", "1.000"]
    assert lines[2].split()[:3] == ["b", "450.0", "0.900"]
