"""The calls that change a live router's instance at runtime: its experts (added, removed,
repriced) and its bounds, each one journaled event, replayed as it was applied.

``InstanceChanges`` is a base of ``msroute.router.core.Router``: each call checks its input
against the router's state (``msroute.router.inputs`` holds the longer checks) and hands the
event to the router's ``_change``, which builds the policy after it (the feasibility LP runs
there: on failure nothing changes) and commits it in its own transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from msroute._validation import text_name
from msroute.errors import InvalidFeedbackError, RouterConfigError
from msroute.router.config import RouterConfig, cost_vector
from msroute.router.inputs import bounds_event, check_price
from msroute.router.state import AddExpert, RemoveExpert, RouterState, SetBounds, SetCost

__all__ = ["InstanceChanges"]


class InstanceChanges:
    """A router's runtime changes of its experts and bounds (see the module docstring); the
    router provides its state, its configuration, ``_check_usable`` and ``_change``."""

    _state: RouterState

    @property
    def config(self) -> RouterConfig:
        """The configuration the router runs now (the router's)."""
        raise NotImplementedError

    def _check_usable(self) -> None:
        """Raise if the router cannot take a call now (the router's)."""
        raise NotImplementedError

    def _change(self, event: AddExpert | RemoveExpert | SetCost | SetBounds) -> None:
        """Check and commit one change in its own transaction (the router's)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ experts
    def add_expert(self, expert_id: str, cost: Mapping[str, float] | Sequence[float]) -> None:
        """Add an expert (cost as a list in cost-name order or a dict by cost name).

        The feasibility LP runs first; on failure nothing changes. A new expert starts at the
        exploration floor (OMD), with fresh statistics (the baselines).
        """
        self._check_usable()
        state = self._state
        text_name(expert_id, "expert_id", InvalidFeedbackError)
        if expert_id in state.col:
            raise InvalidFeedbackError(f"expert_id: {expert_id!r} is already an expert")
        if expert_id in state.retired:
            raise InvalidFeedbackError(
                f"expert_id: {expert_id!r} was removed; ids are never reused (pick a new one)"
            )
        try:
            vec = cost_vector(cost, self.config.cost_names, "cost")
        except RouterConfigError as exc:
            raise InvalidFeedbackError(str(exc)) from exc
        self._change(AddExpert(expert_id, list(vec)))

    def remove_expert(self, expert_id: str) -> None:
        """Remove an expert; its id is never reused.

        The feasibility LP runs first (``InfeasibleConstraintsError``, nothing changes). The
        pending decisions that routed to it are closed: their feedback gets the status
        ``"expert_removed"`` and is logged, not learned.
        """
        self._check_usable()
        if not isinstance(expert_id, str) or expert_id not in self._state.col:
            raise InvalidFeedbackError(f"expert_id: unknown expert {expert_id!r:.80}")
        if len(self._state.ids) == 1:
            raise InvalidFeedbackError(f"expert_id: {expert_id!r} is the last expert")
        self._change(self._removal(expert_id))

    def set_expert_cost(
        self, expert_id: str, cost: Mapping[str, float] | Sequence[float]
    ) -> dict[str, float]:
        """Change an expert's price (its cost vector) from the next decision on, journaled and
        replayed; returns its cost now, by cost name.

        ``cost`` is a list in cost-name order, or a dict by cost name (costs not named keep
        theirs). Checked first (``InvalidFeedbackError``; ``InfeasibleConstraintsError`` if no
        routing meets the bounds at the new price): nothing changes. The policy keeps what it
        learned; decisions already routed keep the cost they were routed at."""
        self._check_usable()
        vec, changed = check_price(self._state, expert_id, cost)
        if changed:
            self._change(SetCost(expert_id, list(vec)))
        return dict(zip(self.config.cost_names, vec, strict=True))

    def _removal(self, expert_id: str) -> RemoveExpert:
        """The removal of an expert, closing the pending decisions that routed to it."""
        gone = [d for d, p in self._state.pending.items() if expert_id in p.draws]
        return RemoveExpert(expert_id, gone)

    # ------------------------------------------------------------------ bounds
    def set_bounds(
        self,
        upper: Mapping[str, float | None] | None = None,
        lower: Mapping[str, float | None] | None = None,
    ) -> None:
        """Change bounds on the time-averaged realized cost at runtime, journaled and replayed.

        Parameters
        ----------
        upper, lower : mapping of cost name -> float or None, optional
            The new bound of each named cost (None removes that bound); costs not named keep
            theirs.

        Raises
        ------
        InvalidFeedbackError
            An unknown cost name, a bound that is not a finite number, or a lower bound above
            its upper bound (nothing changed).
        InfeasibleConstraintsError
            No routing of the current experts meets the new bounds (names the cost; nothing
            changed).

        Notes
        -----
        The policy keeps what it learned about the experts; its dual, learned against the old
        bounds, restarts (``BasePolicy.resized``).
        """
        self._check_usable()
        event = bounds_event(self._state, upper, lower)
        if event is not None:
            self._change(event)
