"""The public path of ``msroute.core.problem_batch``: its public names, re-exported (the module and
its documentation live there)."""

from msroute.core.problem_batch import ProblemBatch, draws_cost, surrogate_cost, team_cost

__all__ = ["ProblemBatch", "draws_cost", "surrogate_cost", "team_cost"]
