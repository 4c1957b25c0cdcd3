"""The live router: one policy routing queries one at a time, with ids, deadlines and a journal.

docs/architecture.md, "The router and the journal": one registered policy with R = 1; experts have
stable string ids (never reused), costs and contexts have names. Decision n's randomness is a pure
function of (seed, n) (``DecisionStreams``): the journal re-derives every decision bit for bit.
Feedback may come late, in any order, or never: a decision expires after ``feedback_ttl_s`` (its
missing reward dropped or replaced by ``on_missing``); a reward for an expired decision is logged
("late"), not learned.

Every state change is one journal event committed before the call returns (or at the end of a
``Router.group`` block); the state can always be rebuilt from the last snapshot plus the events
after it (``Router.open``, module ``msroute.router.recovery``). A call that cannot be journaled (a
full disk, an I/O error) raises ``JournalError`` and changes nothing, in memory or on disk, and a
group is all or nothing; bounds and settings change by journaled events too (``Router.set_bounds``,
``Router.open(config=...)``). docs/operations.md states each guarantee.

This module is the live layer: each call validates its input, applies its event with
``msroute.router.state.apply`` (the one transition function, which replay uses too) and journals it,
inside a transaction that commits, or rolls back both journal and memory (the base class
``msroute.router.transactions.Transactional``). The calls that change the experts and the bounds
are the other base's, ``msroute.router.instance.InstanceChanges``; each ends in ``_change`` here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msroute._validation import text_name
from msroute.errors import (
    InvalidFeedbackError,
    JournalError,
    MSRouteError,
    RouterConfigError,
)
from msroute.policies.base import BasePolicy
from msroute.router import recovery, reports
from msroute.router.changes import (
    applied_config,
    applied_entry,
    change_event,
    config_changes,
    journal_policy_kwargs,
    put_applied,
)
from msroute.router.config import RouterConfig
from msroute.router.ids import RandomHex
from msroute.router.inputs import (
    check_client_id,
    check_cost,
    check_count,
    check_now,
    check_repeat,
    check_reward,
    closed_status,
    decision_cost,
    routed_before,
)
from msroute.router.instance import InstanceChanges
from msroute.router.journal import Journal, open_journal
from msroute.router.state import (
    DEFAULT_OMD_PARAMS,
    AddExpert,
    Configure,
    CostReport,
    Decide,
    Expire,
    Feedback,
    Given,
    RemoveExpert,
    RoutedDecision,
    RouterState,
    SetBounds,
    SetCost,
    apply,
    policy_kwargs,
)
from msroute.router.text import adopt_contexts_from, apply_contexts_from, prompt_context, save_model
from msroute.router.transactions import Transactional
from msroute.router.warm import moved_table, record_warm_start, recorded_warm_sha256

if TYPE_CHECKING:
    from msroute.prompts.model import ContextModel

__all__ = ["DEFAULT_OMD_PARAMS", "RoutedDecision", "Router"]  # the last two: from state.py

_log = logging.getLogger("msroute.router")


class Router(Transactional, InstanceChanges):
    """Route live queries with one policy; see the module docstring and docs/router.md.

    Parameters
    ----------
    config : RouterConfig or mapping
        The configuration (a mapping is validated by ``RouterConfig.from_dict``).
    journal : str or path-like, optional
        The journal file to create (default: ``config.journal``; without either the journal is
        kept in memory). An existing journal is refused: reopen it with ``open``.

    Raises
    ------
    InfeasibleConstraintsError
        No routing of the experts meets the bounds (names the cost).
    RouterConfigError
        A configuration value is invalid (names the key).
    JournalError
        The journal file already holds a journal or cannot be created.

    Notes
    -----
    A router is not thread-safe: one caller (one event loop) at a time.
    """

    _warm_sha256: str | None = None  # the warm-start table's (``msroute.router.warm``)
    _warm_table: str | None = None  # where that table is now, if it moved (``Router.open``)
    _text_model: ContextModel | None = None  # contexts_from's (``msroute.router.text``)

    def __init__(
        self,
        config: RouterConfig | Mapping[str, Any],
        journal: str | os.PathLike[str] | None = None,
    ) -> None:
        cfg = config if isinstance(config, RouterConfig) else RouterConfig.from_dict(config)
        path = journal if journal is not None else cfg.journal
        where = Path(path) if isinstance(path, str | os.PathLike) else None  # else refused below
        cfg, self._text_model = apply_contexts_from(cfg, where)
        self._base_config = cfg
        self._policy_kwargs = policy_kwargs(cfg)
        self._setup(cfg)
        self._warm_sha256 = self._state.warm_sha256
        self._attach(open_journal(path, cfg.journal_sync, create=True))
        self._run_id = self._journal.run_id
        log = self._journal
        try:
            log.begin()
            log.put_meta("config", json.dumps(cfg.to_dict()))
            # The policy's constructor arguments, defaults resolved: a journal re-derives its
            # decisions with these, whatever a later msroute's defaults.
            log.put_meta("policy_kwargs", json.dumps(self.policy._init_kwargs))
            log.put_meta("created", repr(time.time()))
            record_warm_start(log, cfg, self._warm_sha256)
            save_model(cfg, self._text_model, log.path)
            log.commit()
        except (sqlite3.Error, OSError) as exc:  # a full disk at the first write
            log.rollback()
            log.close()
            raise JournalError(f"{log.label}: cannot create the journal: {exc}") from exc

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls, config: str | os.PathLike[str] | Mapping[str, Any] | RouterConfig
    ) -> Router:
        """A new router from a TOML file, a dict or a ``RouterConfig``.

        A relative ``journal`` path in a TOML file is taken relative to the file's directory.
        """
        if isinstance(config, RouterConfig | Mapping):
            return cls(config)
        path = Path(config)
        cfg = RouterConfig.from_toml(path)
        journal = None if cfg.journal is None else path.parent / cfg.journal
        return cls(cfg, journal=journal)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        use_snapshot: bool = True,
        config: RouterConfig | Mapping[str, Any] | None = None,
    ) -> Router:
        """Reopen a journal: the last snapshot, then a replay of the events after it.

        Every replayed decision is re-derived and compared with the logged one. The result has
        the state, and makes the next decisions, of a router that never stopped.

        Parameters
        ----------
        path : str or path-like
        use_snapshot : bool, default True
            False replays the whole journal from the start (verifying every decision).
        config : RouterConfig or mapping, optional
            The configuration the router should now run (a service's config file), applied
            by ``reconfigure``: what it changed since the configuration applied last is
            applied as journaled events, in one transaction, each checked first (experts
            added, experts repriced, the bounds, experts removed, then the settings that
            change no state: ``feedback_ttl_s``, ``on_missing``, ``reward_min``,
            ``reward_max``, ``snapshot_every``, ``journal_sync``, ``name``); what it left as
            it was keeps the journal's state, runtime changes included. A difference in any
            other key (``policy``, ``m_draws``, ``cost_names``, ``contexts``, ``seed``,
            ``horizon``, ``params``), or an expert id removed earlier that it adds or reprices,
            is refused, naming each. ``journal`` is not compared, and a warm start that differs
            in its table's path alone reads the table there (a table moved since; its bytes
            must still be those the journal recorded).

        Raises
        ------
        JournalError
            Missing, damaged or of another schema version; or a decision re-derives differently
            (the message names the first mismatch).
        RouterConfigError
            ``config`` differs in keys a running router cannot change (one line naming each;
            nothing changed, the journal is closed again).
        InfeasibleConstraintsError
            The changes of ``config`` cannot all be applied (nothing changed).
        """
        wanted = (
            None
            if config is None
            else config
            if isinstance(config, RouterConfig)
            else RouterConfig.from_dict(config)
        )
        journal = Journal(path, create=False)
        try:
            stored = json.loads(journal.meta("config"))
            if isinstance(stored, dict):  # journals that name no pacing ran without it
                stored.setdefault("pacing", False)
            cfg = RouterConfig.recorded(stored)
            router = cls.__new__(cls)
            router._base_config = cfg
            router._policy_kwargs = journal_policy_kwargs(journal, cfg)
            router._warm_sha256 = recorded_warm_sha256(journal, cfg)
            router._warm_table = moved_table(wanted, cfg)
            router._text_model = apply_contexts_from(cfg, journal.path)[1]
            router._setup(cfg)
            router._attach(journal)
            router._run_id = journal.run_id
            recovery.load(router, use_snapshot)
        except (RouterConfigError, ValueError, KeyError, TypeError) as exc:
            journal.close()
            raise JournalError(f"{journal.label}: cannot rebuild the router: {exc}") from exc
        except BaseException:
            journal.close()
            raise
        if wanted is not None:
            if router._warm_table is not None:  # the same warm start, its table moved
                wanted = dataclasses.replace(wanted, warm_start=cfg.warm_start)
            try:
                router.reconfigure(adopt_contexts_from(wanted, cfg))
            except BaseException:
                router.close()
                raise
        return router

    def config_changes(
        self, config: RouterConfig | Mapping[str, Any]
    ) -> list[tuple[str, str | None, dict[str, Any]]]:
        """The journal events that take this router to ``config``: (kind, id, payload) in the
        order ``open`` applies them (empty when nothing differs). A three-way merge
        (``msroute.router.changes``): what ``config`` changed since the configuration applied
        last wins over the router's state; the rest of the state, runtime changes included,
        is kept.

        Raises
        ------
        RouterConfigError
            ``config`` differs in a key a running router cannot change, or adds or reprices an
            expert id removed earlier; one line naming each.
        """
        new = config if isinstance(config, RouterConfig) else RouterConfig.from_dict(config)
        base = applied_config(self._journal)
        return config_changes(self._state, new, base, self._journal.label)

    def reconfigure(self, config: RouterConfig | Mapping[str, Any]) -> list[str]:
        """Take the router to ``config`` by journaled events (see ``open`` and
        ``config_changes``): all of them in one transaction, or none, with ``config`` recorded
        as the configuration applied last (the base of the next merge). Returns one line per
        change applied (also logged).

        Raises
        ------
        RouterConfigError
            A key a running router cannot change differs (names each; nothing changed).
        InfeasibleConstraintsError
            A change is infeasible (names the cost; nothing changed).
        JournalError
            The changes could not be written (nothing changed).
        """
        self._check_usable()
        if self._depth:
            raise MSRouteError("reconfigure() inside a group(): call it on its own")
        new = config if isinstance(config, RouterConfig) else RouterConfig.from_dict(config)
        changes = self.config_changes(new)
        applied = applied_entry(new)
        if not changes and applied == applied_entry(applied_config(self._journal)):
            return []
        lines = []
        self._begin()
        try:
            for kind, ref, payload in changes:
                event = change_event(kind, ref, payload, self._removal)
                policy = None if isinstance(event, Configure) else self._state.policy_after(event)
                self._commit_event(event, time.time(), policy)
                lines.append(f"{kind} {ref or ''} {event.payload()}".replace("  ", " "))
            put_applied(self._journal, applied)
        except BaseException:
            self._journal.rollback()
            self._reload_committed()  # from _setup: no failed write pending
            raise
        self._finish()
        self._journal.set_sync(self.config.journal_sync)  # not allowed inside a transaction
        for line in lines:
            _log.warning("%s: configuration change applied: %s", self._journal.label, line)
        return lines

    def _setup(self, cfg: RouterConfig) -> None:
        """Everything but the journal: the state before any event, no transaction."""
        self._state = RouterState.initial(
            cfg, self._policy_kwargs, self._warm_sha256, self._text_model, self._warm_table
        )
        self._reset_transactions()
        self._snap_seq = 0
        self._snap_before = 0  # the snapshot before it (recovery.take_snapshot)
        self._snap_retry = 0  # after a failed snapshot: the seq from which to try again
        self._random_hex = RandomHex()  # route(id_prefix=...)'s ids

    @property
    def config(self) -> RouterConfig:
        """The configuration the router runs now (as changed by its journaled events)."""
        return self._state.config

    @property
    def policy(self) -> BasePolicy:
        """The policy (R = 1) that routes the queries."""
        return self._state.policy

    def _rebuild(self) -> None:
        """The state of the journal's committed events: the last snapshot, then the events
        after it (``msroute.router.recovery``)."""
        self._setup(self._base_config)
        recovery.load(self, use_snapshot=True)

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str | None:
        """The configured label."""
        return self.config.name

    @property
    def cost_names(self) -> list[str]:
        """The cost names, in cost-vector order."""
        return list(self.config.cost_names)

    @property
    def expert_ids(self) -> list[str]:
        """The current experts' ids."""
        return list(self._state.ids)

    @property
    def context_names(self) -> list[str]:
        """The context names (empty for a context-free router)."""
        return list(self._state.contexts)

    @property
    def journal_path(self) -> Path | None:
        """The journal file (None for an in-memory router)."""
        return self._journal.path

    # ------------------------------------------------------------------ routing
    def route(
        self,
        context: str | None = None,
        eligible: Sequence[str] | None = None,
        decision_id: str | None = None,
        prompt: str | None = None,
        *,
        id_prefix: str | None = None,
    ) -> RoutedDecision:
        """Route one query: decide its team and log the decision.

        Parameters
        ----------
        context : str, optional
            The query's context name (required when the router has contexts).
        prompt : str, optional
            Instead of ``context``, for a router with ``contexts_from``: the prompt's text,
            whose predicted task or cluster is the context (``msroute.router.text``; the text
            is not journaled).
        eligible : sequence of str, optional
            The expert ids this query may go to (default: all).
        decision_id : str, optional
            The id to give the decision (default: a new one, ``<run id>-<n>``; a new client id
            of that form is refused, so that the two never collide). An id already routed returns
            that same decision again, with no new journal row (a retried request); a context
            or an eligible set given with it must then be the original one.
        id_prefix : str, optional
            Instead of a ``decision_id``: give the decision a new random id,
            ``<id_prefix><32 hex digits>`` (``msroute.router.ids``; the gateway's are
            ``<router>:...``, by which its feedback finds the router). Such an id is new by
            construction, so it is not looked up in the journal as a ``decision_id`` is (the
            lookup reads SQLite, which a fold in the background may hold for a while).

        Returns
        -------
        RoutedDecision

        Raises
        ------
        InvalidFeedbackError
            Unknown context, unknown or empty eligible set, a bad decision id or id prefix
            (or both given), or a prompt for a router without a context model (nothing
            changed).
        DecisionConflictError
            The id was routed with another context or eligible set (nothing changed).
        """
        self._check_usable()
        if prompt is not None:
            context = prompt_context(self._text_model, context, prompt)
        elif context is None and self._text_model is not None:
            raise InvalidFeedbackError("give a context or a prompt (this router reads prompts)")
        did = decision_id
        if id_prefix is not None:
            did = self._minted_id(id_prefix, decision_id)
        elif decision_id is not None:
            text_name(decision_id, "decision_id", InvalidFeedbackError)
            known = routed_before(self._journal, self._state, decision_id, context, eligible)
            if known is not None:
                return known
            check_client_id(decision_id, self._run_id)
        state = self._state
        ctx = state.context_index(context)
        mask = state.eligible_mask(eligible)
        with self._write():
            now = time.time()
            self._expire_due(now)
            if did is None:
                did = f"{self._run_id}-{state.n}"
            decided = apply(state, Decide(did, ctx, mask, now, self._journal.last_seq + 1))
            assert decided is not None
            routed, payload, blob = decided
            payload["context"] = context
            payload["eligible"] = None if eligible is None else tuple(eligible)
            # Unmasked decisions of a context share their distribution until the policy learns.
            self._append("decision", did, now, payload, blob, None if mask is not None else (ctx,))
        return routed

    def _minted_id(self, prefix: object, decision_id: str | None) -> str:
        """A new random id ``<prefix><hex digits>`` for ``route(id_prefix=prefix)``."""
        if decision_id is not None:
            raise InvalidFeedbackError("give a decision_id or an id_prefix, not both")
        if not isinstance(prefix, str):
            raise InvalidFeedbackError(f"id_prefix: must be a string, got {prefix!r:.80}")
        return text_name(prefix + self._random_hex(), "id_prefix", InvalidFeedbackError)

    # ------------------------------------------------------------------ feedback
    def feedback(
        self,
        decision_id: str,
        reward: float,
        cost: Mapping[str, float] | Sequence[float] | None = None,
    ) -> str:
        """Report the outcome of a routed decision.

        Parameters
        ----------
        decision_id : str
        reward : float
            The team's aggregate (sum-max) reward, in ``[reward_min, reward_max]``.
        cost : mapping or sequence, optional
            The real cost when it is only known afterwards (tokens spent): a dict by cost name
            (names not given keep the routed team's cost) or a list in cost-name order. It
            replaces the decision's realized cost in the time averages and in what the policy
            learns.

        Returns
        -------
        str
            ``"applied"`` (learned), ``"duplicate"`` (already reported with this reward and
            cost: a retried request; nothing changes),
            ``"late"`` (the decision had expired: logged, not learned) or ``"expert_removed"``
            (an expert of its team was removed before the feedback came: logged, not learned).

        Raises
        ------
        UnknownDecisionError
            The router never issued this id.
        InvalidFeedbackError
            NaN/inf/out-of-range reward, unknown cost name, negative or non-finite cost
            (nothing changed), for a repeat as for a first feedback.
        DecisionConflictError
            A repeat with another reward or cost than the first feedback (nothing changed; the
            journal keeps one feedback per decision).
        """
        self._check_usable()
        if not isinstance(decision_id, str):
            raise InvalidFeedbackError(f"decision_id: must be a string, got {decision_id!r:.80}")
        r = check_reward(reward, self.config, self._state.policy)
        pending = self._state.pending.get(decision_id)
        closed = None
        if pending is None:
            closed = closed_status(self._journal, decision_id)
            realized = decision_cost(self._journal, decision_id)
        else:
            realized = pending.cost
        c = check_cost(cost, realized, self.config.cost_names, self.policy)
        if closed == "duplicate":  # validated like a first feedback, then compared with it
            check_repeat(self._journal, decision_id, r, c)
            return closed
        with self._write():
            now = time.time()
            self._expire_due(now)
            pending = self._state.pending.get(decision_id)  # it may just have expired
            status = "applied" if pending is not None else closed or "late"
            self._commit_event(Feedback(decision_id, r, c, realized, status), now)
        return status

    def report_cost(self, decision_id: str, cost: Mapping[str, float] | Sequence[float]) -> str:
        """Book a decision's realized cost before (or without) its reward (what an LLM call
        billed, known when its answer arrives): it replaces the decision's current cost (its
        booking, or the last one reported) in the averages and the pacer's spend at once, so
        the bounds hold on what calls really cost. A later ``feedback`` learns it unless it
        reports another.

        Parameters
        ----------
        decision_id : str
        cost : mapping or sequence
            By cost name (names not given keep the decision's current cost) or a list in
            cost-name order.

        Returns
        -------
        str
            ``"applied"`` (the decision is pending: it now costs this), ``"late"`` (it was
            closed: counted in the averages and the spend, not learned) or ``"unchanged"``
            (the decision already costs this: nothing is written, so a retry is harmless).

        Raises
        ------
        UnknownDecisionError
            The router never issued this id.
        InvalidFeedbackError
            An unknown cost name, a negative or non-finite cost (nothing changed).
        """
        self._check_usable()
        if not isinstance(decision_id, str):
            raise InvalidFeedbackError(f"decision_id: must be a string, got {decision_id!r:.80}")
        pending = self._state.pending.get(decision_id)
        realized = decision_cost(self._journal, decision_id) if pending is None else pending.cost
        if cost is None:
            raise InvalidFeedbackError("cost: required (by cost name, or in cost-name order)")
        c = check_cost(cost, realized, self.config.cost_names, self.policy)
        assert c is not None
        if c.tolist() == realized.tolist():  # np.array_equal of two finite cost vectors
            return "unchanged"
        with self._write():
            now = time.time()
            self._expire_due(now)  # an expiry closes the decision at the same cost
            status = "applied" if decision_id in self._state.pending else "late"
            self._commit_event(CostReport(decision_id, c, realized, status), now)
        return status

    def _commit_event(self, event: Given, now: float, policy: BasePolicy | None = None) -> None:
        """Journal an event other than a decision, then apply it (inside a transaction)."""
        self._append(event.kind, event.ref, now, event.payload(), None)
        apply(self._state, event, policy=policy)

    # ------------------------------------------------------------------ expiry
    def expire(self, now: float | None = None) -> int:
        """Expire the decisions whose deadline is at or before ``now`` (also done inside every
        call).

        Each expired decision's missing reward is dropped, or learned as the configured
        ``on_missing`` default reward. Returns how many expired.
        """
        t = time.time() if now is None else check_now(now)
        with self._write():
            return self._expire_due(t)

    def _expire_due(self, now: float) -> int:
        due = self._state.due(now)
        if not due:
            return 0
        default = self.config.on_missing
        reward = None if default == "drop" else float(default)
        for did in due:
            self._commit_event(Expire(did, reward), now)
        return len(due)

    # ------------------------------------------------------------------ experts and bounds
    def _change(self, event: AddExpert | RemoveExpert | SetCost | SetBounds) -> None:
        """An expert or bounds change (``InstanceChanges``) in its own transaction; its policy is
        built (and the change checked) before anything is written. Here, with every other read
        of the clock, so that one clock serves all of a router's events."""
        policy = self._state.policy_after(event)  # raises before any change
        with self._write():
            self._commit_event(event, time.time(), policy)

    # ------------------------------------------------------------------ reports
    def state(self) -> dict[str, Any]:
        """A JSON-ready summary of the router (counters, averages, bounds, q)."""
        return reports.summary(self._state, self._journal.last_seq)

    def decisions_since(self, seq: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """The journal events after ``seq`` (at most ``limit``), as JSON-ready dicts
        (``msroute.router.reports.event_dicts``)."""
        return reports.event_dicts(
            self._journal, check_count(seq, "seq"), check_count(limit, "limit")
        )

    def export_rows(self, seq: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """The journal events after ``seq`` (at most ``limit``) as export rows: the HTTP API's
        names and shapes (``decision_id``, ``propensities`` by expert, ``cost`` by name; see
        ``msroute.router.rows`` and its JSON Schema), as ``GET .../decisions`` serves them."""
        return reports.export_rows(
            self._journal, self._state, check_count(seq, "seq"), check_count(limit, "limit")
        )

    # ------------------------------------------------------------------ snapshots and replay
    def _maybe_snapshot(self) -> None:
        """Take the periodic snapshot when it is due (``recovery.maybe_snapshot``; a router
        without a file takes none)."""
        if self._journal.path is not None:
            recovery.maybe_snapshot(self)

    def _snapshot_due(self) -> bool:
        return recovery.snapshot_due(self)

    def snapshot(self) -> None:
        """Store a snapshot of the policy and the router's state in the journal now (inside a
        ``group``, when the group has committed).

        Raises
        ------
        JournalError
            The snapshot could not be written; nothing else changed (the events it would have
            summarized are durable already), and the router goes on.
        """
        self._check_usable()
        if self._depth:
            self._snap_retry = 0
            self._snap_seq = -self.config.snapshot_every  # due when the group ends
            return
        recovery.take_snapshot(self)
