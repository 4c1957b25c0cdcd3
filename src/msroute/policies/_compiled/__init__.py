"""The policies' compiled loops (numba), one concept per module, imported on first use.

Each loop computes what a numpy update of the same policy computes, with the same operations in
the same order, so a batch of runs in one loop gives the floats a single run (a live router)
gets from numpy:

* ``variates`` -- each run's own random stream (xoshiro256++)
  and its uniforms, normals, Gamma and Beta variates;
* ``top`` -- the M best experts of a score row, and of Thompson
  sampling's Beta samples;
* ``credit`` -- the team baselines' statistics credited with a
  batch's feedback;
* ``gram`` -- the dense model fit's Gram matrices and moments credited with a batch's round;
* ``dual`` -- the Lagrangian dual's step and penalty;
* ``checks`` -- the feedback's range checks;
* ``multinomial`` -- inverse-CDF draws of the routing
  distribution;
* ``live_step`` -- a live router's decision, feedback and QP step with OMD, and its pacer's
  narrowing, at one run and one draw
  (``msroute.policies.live_step``), each compiled for one signature on import.

How they are compiled and cached: ``msroute._jit``.
"""
