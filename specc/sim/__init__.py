"""specc.sim: a simulated SGLang server (``python -m specc.sim``).

* ``cli``: SGLang launch_server flags + ``--sim-*`` knobs, faults, model facts.
* the performance model is ``specc.perf.model`` (constants from
  ``specc/perf/calibration/<gpu kind>.json``, every one sourced).
* ``server``: startup phases, scheduler (continuous batching in real time),
  HTTP endpoints, faults, ground truth.
"""
