"""specc.sim: a simulated SGLang server (``python -m specc.sim``).

* ``cli``: SGLang launch_server flags + ``--sim-*`` knobs, faults, model facts.
* ``perf``: the performance model (pure functions; every constant sourced).
* ``server``: startup phases, scheduler (continuous batching in real time),
  HTTP endpoints, faults, ground truth.
"""
