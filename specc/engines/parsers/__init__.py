"""Launch-command checks that run under an ENGINE's own Python, with its real parser.

The modules here are scripts: ``<engine python> sglang_parse.py`` / ``sim_parse.py`` /
``vllm_parse.py`` read ``{"servers": [{"id", "argv"}]}`` as JSON on stdin and
print one JSON object: the installed release and every rejected command with
the parser's own message. They import nothing from specc (specc need not be
installed beside the engine), but the simulator's (specc's own engine). Which one a
plan uses is its engine_info.parser. Used by ``specc doctor`` (on the node that will
run the servers) and by tests/drift (against the pinned releases).
"""
