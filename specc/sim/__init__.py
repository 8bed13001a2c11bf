"""specc.sim: a simulated SGLang server (``python -m specc.sim``) that emulates a
stated SGLang version (``--sim-version``, default 0.5.23).

* ``args``: SGLang launch_server flags + ``--sim-*`` knobs, model facts, the
  server arguments resolved as SGLang resolves them.
* ``faults``: the fault hooks (``$SPECC_SIM_FAULT``).
* ``versions``: each version's log strings (with their source files) and order.
* ``startup``: the startup phases and their log lines.
* ``scheduler``: continuous batching in real time, acceptance, SGLang's counters.
* ``http``: the routes; ``stream``: SSE token emission.
* ``truth``: ground truth (``$SPECC_SIM_TRUTH``); ``log``: SGLang's log format.
* the performance model lives in ``specc.perf.model`` (shared with the compiler).
* ``server``: process main.
"""
