"""The proximal step (6) of Algorithm 1: a projection onto the floored simplex, cut by
half-spaces.

* ``projection``: ``project_step``, the exact QP (6) with the paper's single cut;
* ``projection_cuts``: the same with one cut per active bound (the scale-invariant dual's);
* ``_simplex``: the floored simplex and the accuracy check of a cut's solution;
* ``_projection_rows``: the single cut's Newton iteration for a batch of rows;
* ``_cut_rows``: steps 1 and 2 of the projection with cuts, row by row (Python floats for one
  row, compiled for a batch, with the same floats);
* ``_exact_cut``: a binding cut's row solved again in exact rational arithmetic, when its
  floats fail the check.
"""
