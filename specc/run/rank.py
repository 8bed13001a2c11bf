"""`python -m specc.run.rank --head ADDR [--follower ARG]... -- ARGV...`: one node's part of a
multi-node server (and `--group -- srun ...`: the launch of all of them, marking them as its
process group's).

node.py starts it on every node of the job with one `srun` task per node. It fills in
the argv's `{node_rank}` from this task's own SLURM_NODEID (expanded here, on the node:
a rank expanded by the batch shell is the same on every node) and `{head}` with the
first node's address, adds the plan's follower args (`--follower`, one each, in order)
on every rank but 0 (vLLM's `--headless`: only rank 0 serves HTTP), then execs the engine.
"""

from __future__ import annotations

import os
import sys

USAGE = "usage: python -m specc.run.rank --head ADDR [--follower ARG]... -- ARGV..."


def fill(argv: list[str], *, rank: str, head: str, follower: list[str] | tuple[()] = ()) -> list[str]:
    """One rank's command: placeholders filled in, and `follower` added on ranks > 0."""
    out = [a.replace("{node_rank}", rank).replace("{head}", head) for a in argv]
    return out + (list(follower) if rank != "0" else [])


#: Set for every rank to the process group the executor launched (srun's): a listener
#: that carries it is the server's own although slurmd, not that group, started it.
GROUP_ENV = "SPECC_SERVER_PGID"


def parse(argv: list[str]) -> tuple[str, list[str], list[str]] | None:
    """(head, follower args, engine argv), or None for a malformed command line."""
    if "--" not in argv:
        return None
    cut = argv.index("--")
    opts, cmd = argv[:cut], argv[cut + 1:]
    if len(opts) % 2 or not cmd:
        return None
    head, follower = None, []
    for key, value in zip(opts[::2], opts[1::2]):
        if key == "--head":
            head = value
        elif key == "--follower":
            follower.append(value)
        else:
            return None
    return (head, follower, cmd) if head is not None else None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["--group", "--"] and len(argv) > 2:   # the launch, before srun
        os.environ[GROUP_ENV] = str(os.getpgid(0))
        os.execvp(argv[2], argv[2:])
    parsed = parse(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    head, follower, engine_argv = parsed
    rank = os.environ.get("SLURM_NODEID") or os.environ.get("SLURM_PROCID")
    if rank is None:
        print("specc.run.rank: no SLURM_NODEID (run it under srun)", file=sys.stderr)
        return 2
    cmd = fill(engine_argv, rank=rank, head=head, follower=follower)
    sys.stdout.write(f"specc: node {os.environ.get('SLURMD_NODENAME', '?')} is rank {rank} of a "
                     f"{os.environ.get('SLURM_NNODES', '?')}-node server\n")
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)
    return 0   # pragma: no cover


if __name__ == "__main__":
    raise SystemExit(main())
