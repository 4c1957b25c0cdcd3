"""The mathematics of Multinomial Subset Routing, below every policy, environment and router.

One module per concept; nothing is imported here, so a module loads only what it uses:

* the problem and its bounds: ``problem`` (``Constraints``, ``Problem``: the surrogate box of
  Section 4.2, the feasibility LP, the exploration floor), ``_floor`` (the floor's and the
  smallest budget's LPs), ``problem_batch`` (``ProblemBatch``: R problems stacked for batched
  runs, and the cost of a routing per run), ``bounds`` (the box's support function and
  distance, what a floor can reach, bound reports);
* the reward: ``reward`` (the sum-max reward, the exact expected reward ``Phi`` and its
  gradient, a Monte Carlo estimate);
* the QP step of Algorithm 1 and its helpers: ``qp`` (``msroute.core.qp``);
* the oracle: ``oracle`` (OPT of eq. (3) and OPT^ctx, certified) and ``_polytope`` (their
  feasible set: interior point, LPs).

The public paths ``msroute.problem``, ``msroute.problem_batch``, ``msroute.bounds``,
``msroute.reward``, ``msroute.projection`` and ``msroute.oracle`` re-export these modules'
public names; code inside the package imports from here.
"""
