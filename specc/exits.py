"""Exit codes, defined once (CONTRACT.md): 0 ok, 2 invalid input, 3 a server or point
failed (or the run dir stopped taking writes mid-run), 4 the run dir is in use by another
executor (nothing done; wait or stop it), 70 specc itself failed (a bug: sysexits'
EX_SOFTWARE; the traceback is kept in a file), 130 interrupted."""

OK, INVALID, FAILED, BUSY, INTERNAL, INTERRUPTED = 0, 2, 3, 4, 70, 130
