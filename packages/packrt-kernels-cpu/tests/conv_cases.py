"""The conv2d problems the property tests draw: a batch, its grouping and channels, a bias or none, and
the seed of the inputs. (The geometry each test draws itself: it is what the tests differ in.)"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st


@dataclass(frozen=True)
class ConvCase:
    """``n`` images of ``groups * channels[0]`` channels into ``groups * channels[1]``."""

    n: int
    groups: int
    channels: tuple[int, int]  # per group: in, out
    bias: bool
    seed: int

    def inputs(
        self, image: tuple[int, int], kernel: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """float32 normal samples from the seed: input (n, C_in, *image), weight (C_out, in, *kernel) and
        the bias (C_out,), or None when the case has none."""
        r = np.random.default_rng(self.seed)
        cin, cout = self.channels
        x = r.standard_normal((self.n, self.groups * cin, *image)).astype(np.float32)
        w = r.standard_normal((self.groups * cout, cin, *kernel)).astype(np.float32)
        b = r.standard_normal(self.groups * cout).astype(np.float32)
        return x, w, b if self.bias else None


def conv_cases(*, groups: int, per_group: int) -> st.SearchStrategy[ConvCase]:
    """One or two images, up to ``groups`` groups of up to ``per_group`` channels in and out."""
    per = st.integers(1, per_group)
    return st.builds(
        ConvCase,
        n=st.integers(1, 2),
        groups=st.integers(1, groups),
        channels=st.tuples(per, per),
        bias=st.booleans(),
        seed=st.integers(0, 2**16),
    )


def pairs(low: int, high: int) -> st.SearchStrategy[tuple[int, int]]:
    """A (height, width) pair of a conv argument, each in ``[low, high]``."""
    return st.tuples(st.integers(low, high), st.integers(low, high))
