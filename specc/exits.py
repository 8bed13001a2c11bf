"""Exit codes, defined once (CONTRACT.md): 0 ok, 2 invalid input, 3 a server or point
failed, 130 interrupted."""

OK, INVALID, FAILED, INTERRUPTED = 0, 2, 3, 130
