"""The grouping of texts into padded calls (packrt.models.length_groups): every text once, longest first, and the
fewest padded tokens plus the calls' own cost."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from packrt.models.length_groups import CALL_TOKENS, length_groups

LENGTHS = st.lists(st.integers(1, 40), max_size=30)


def _cost(lengths: list[int], groups: list[list[int]], call_tokens: int) -> int:
    return sum(len(g) * max(lengths[i] for i in g) + call_tokens for g in groups)


@given(LENGTHS, st.integers(0, 200))
def test_every_text_is_in_exactly_one_group_longest_first_within_and_across_groups(
    lengths: list[int], call_tokens: int
) -> None:
    groups = length_groups(lengths, call_tokens)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    flat = [lengths[i] for g in groups for i in g]
    assert flat == sorted(flat, reverse=True)
    assert all(g for g in groups)


@given(LENGTHS, st.integers(0, 200))
def test_texts_of_one_length_share_a_group(lengths: list[int], call_tokens: int) -> None:
    groups = length_groups(lengths, call_tokens)
    home = {lengths[i]: n for n, g in enumerate(groups) for i in g}
    assert all(home[lengths[i]] == n for n, g in enumerate(groups) for i in g)


@given(st.lists(st.integers(1, 40), max_size=9), st.integers(0, 200))
def test_no_other_split_of_the_sorted_lengths_costs_less(lengths: list[int], call_tokens: int) -> None:
    got = _cost(lengths, length_groups(lengths, call_tokens), call_tokens)
    distinct = sorted(set(lengths), reverse=True)
    best = None
    for cuts in itertools.product([False, True], repeat=max(len(distinct) - 1, 0)):
        runs: list[list[int]] = [[]]
        for at, length in enumerate(distinct):
            if at and cuts[at - 1]:
                runs.append([])
            runs[-1] += [i for i, n in enumerate(lengths) if n == length]
        cost = _cost(lengths, [r for r in runs if r], call_tokens)
        best = cost if best is None else min(best, cost)
    assert got == (best or 0)


def test_a_short_text_beside_long_ones_gets_a_call_of_its_own_once_padding_outweighs_the_call() -> None:
    lengths = [17] * 20 + [8] * 20
    assert [sorted(g) for g in length_groups(lengths)] == [list(range(20)), list(range(20, 40))]
    assert len(length_groups([17, 8])) == 1  # 9 padded tokens cost less than a call (CALL_TOKENS)
    assert CALL_TOKENS > 9


def test_no_texts_make_no_groups_and_a_large_call_cost_makes_one() -> None:
    assert length_groups([]) == []
    assert len(length_groups([5, 50, 500], call_tokens=10**6)) == 1
    assert len(length_groups([5, 50, 500, 50], call_tokens=0)) == 3
