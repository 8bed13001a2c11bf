"""`python -m specc.run.rank --head ADDR -- ARGV...`: one node's part of a multi-node server
(and `--group -- srun ...`: the launch of all of them, marking them as its process group's).

node.py starts it on every node of the job with one `srun` task per node. It fills in
the argv's `{node_rank}` from this task's own SLURM_NODEID (expanded here, on the node:
a rank expanded by the batch shell is the same on every node) and `{head}` with the
first node's address, then execs the engine.
"""

from __future__ import annotations

import os
import sys


def fill(argv: list[str], *, rank: str, head: str) -> list[str]:
    return [a.replace("{node_rank}", rank).replace("{head}", head) for a in argv]


#: Set for every rank to the process group the executor launched (srun's): a listener
#: that carries it is the server's own although slurmd, not that group, started it.
GROUP_ENV = "SPECC_SERVER_PGID"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["--group", "--"] and len(argv) > 2:   # the launch, before srun
        os.environ[GROUP_ENV] = str(os.getpgid(0))
        os.execvp(argv[2], argv[2:])
    if len(argv) < 4 or argv[0] != "--head" or argv[2] != "--":
        print("usage: python -m specc.run.rank --head ADDR -- ARGV...", file=sys.stderr)
        return 2
    rank = os.environ.get("SLURM_NODEID") or os.environ.get("SLURM_PROCID")
    if rank is None:
        print("specc.run.rank: no SLURM_NODEID (run it under srun)", file=sys.stderr)
        return 2
    cmd = fill(argv[3:], rank=rank, head=argv[1])
    sys.stdout.write(f"specc: node {os.environ.get('SLURMD_NODENAME', '?')} is rank {rank} of a "
                     f"{os.environ.get('SLURM_NNODES', '?')}-node server\n")
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)
    return 0   # pragma: no cover


if __name__ == "__main__":
    raise SystemExit(main())
