"""A check shared by the router tests: a reopened journal decides as a twin fed alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msroute.router import Router


def decides_as_twin(journal: Path, twin: Router, rounds: int, **route: Any) -> None:
    """Reopened from its last snapshot and from its events alone, the router of ``journal``
    makes the same decisions (team, propensities) as ``twin``, a router fed the same traffic,
    for ``rounds`` calls of ``route(**route)``, each fed back 1.0; after each pass ``twin`` is
    reopened from its own journal, so both pass through a restart. Closes ``twin``."""
    twin_journal = twin.journal_path
    assert twin_journal is not None
    for use_snapshot in (True, False):
        again = Router.open(journal, use_snapshot=use_snapshot)
        for _ in range(rounds):
            a, b = again.route(**route), twin.route(**route)
            assert a.team == b.team and a.propensities == b.propensities
            again.feedback(a.decision_id, 1.0)
            twin.feedback(b.decision_id, 1.0)
        again.close()
        twin.close()
        twin = Router.open(twin_journal)
    twin.close()
