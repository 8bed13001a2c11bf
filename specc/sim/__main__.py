"""``python -m specc.sim <SGLang launch_server flags> [--sim-* knobs]``."""

import sys

from specc.sim.server import main

if __name__ == "__main__":
    sys.exit(main())
