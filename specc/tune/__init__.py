"""`search=tune`: choose the best speculative setting per concurrency in a few server starts.

Pure logic only (no I/O, no clock): ``predict`` turns measured acceptance into every
candidate's accept length; ``search`` races candidates, stops, and states the decision.
The executor feeds it (``specc.run.tune``). See docs/tune.md.
"""
