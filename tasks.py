"""`inv ...` in a checkout: the tasks live in the package (specc/tasks.py; `specc <task>` when installed)."""

from specc.tasks import namespace  # noqa: F401
