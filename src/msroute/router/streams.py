"""Randomness of a live router: decision n's draws are a pure function of (seed, n).

A simulation gives each run one long stream; a router that replays its journal, or that is
restored from a snapshot taken at any moment, must re-derive every decision bit for bit, so it
gives each decision its own stream instead: a Philox generator keyed by the seed with counter
``(0, n, 0, 0)``. Philox is a counter-based generator, so positioning it at decision n costs one
state assignment (no per-decision seeding work), and the streams of two decisions never overlap
(decision n would have to draw 2^64 blocks of four words to reach decision n + 1's counter).
"""

from __future__ import annotations

import numpy as np

from msroute._validation import FloatArray, IntArray
from msroute.policies.streams import GammaConstants, RunStreams
from msroute.policies.team import top_m

__all__ = ["DecisionStreams"]


class DecisionStreams(RunStreams):
    """The stream of a one-run policy inside a router: call ``start`` before each decision.

    A ``RunStreams`` as far as the policy and its persistence are concerned (its inherited
    per-run generators are kept, untouched, so that a policy file saved with it loads like any
    other); ``uniform``, ``beta`` and ``beta_top`` draw from the current decision's generator.

    Parameters
    ----------
    seed : int
        The router's seed.
    block : int
        The buffer size of the policy's own streams (kept so the saved state has its shape).
    """

    def __init__(self, seed: int, block: int) -> None:
        super().__init__(seed, 1, block=block)
        self._key = np.random.SeedSequence(seed).generate_state(2, np.uint64)
        self._key.flags.writeable = False
        #: The Philox key (2,) uint64 of every decision's stream (read-only).
        self.key = self._key
        self._gen = np.random.Generator(np.random.Philox(key=self._key))
        # One state mapping reused by every decision (the setter copies its values): only the
        # counter's second word changes between decisions.
        self._counter = np.zeros(4, dtype=np.uint64)
        self._state: dict[str, object] = {
            "bit_generator": "Philox",
            "state": {"counter": self._counter, "key": self._key},
            "buffer": np.zeros(4, dtype=np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }
        self.start(0)

    def start(self, n: int) -> None:
        """Start decision ``n``'s randomness: the generator is positioned at its counter when
        the decision first draws (a decision that takes its one uniform from
        ``msroute.policies._philox`` never pays for it)."""
        self.n = n
        #: Whether decision ``n`` has drawn nothing yet: its first uniform may then be taken
        #: from the counter (``take_first``).
        self.fresh = True
        self._positioned = False
        self._taken = False

    def take_first(self) -> None:
        """Record that decision ``n``'s first uniform was taken from its counter
        (``msroute.policies._philox.first_uniform``): its next draws follow that one, as if
        the generator had drawn it."""
        self.fresh = False
        self._taken = True

    def _generator(self) -> np.random.Generator:
        self.fresh = False
        if not self._positioned:
            self._counter[1] = self.n
            self._gen.bit_generator.state = self._state
            self._positioned = True
            if self._taken:  # the first uniform went to the counter's computation
                self._gen.random()
        return self._gen

    def uniform(self, width: int) -> FloatArray:
        """The next ``width`` uniforms of the current decision, shape (1, width)."""
        return self._generator().random((1, width))

    def standard_gamma(self, shape: FloatArray) -> FloatArray:
        """One ``Gamma(shape)`` variate per entry, from the current decision's stream."""
        return np.asarray(self._generator().standard_gamma(shape), dtype=np.float64)

    def beta(
        self, a: FloatArray, b: FloatArray, constants: GammaConstants | None = None
    ) -> FloatArray:
        """``Beta(a, b)`` per entry, from the current decision's stream (``constants``: unused,
        numpy draws these)."""
        return np.asarray(self._generator().beta(a, b), dtype=np.float64)

    def beta_top(
        self,
        a: FloatArray,
        b: FloatArray,
        m: int,
        offset: FloatArray | None,
        constants: GammaConstants | None = None,
    ) -> IntArray:
        """The top M of ``beta``'s draws plus ``offset``, by ``top_m`` (no numba)."""
        scores = self.beta(a, b)
        return top_m(scores if offset is None else scores + offset, m)
