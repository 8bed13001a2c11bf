"""python -m specc.report RUN_DIR [--no-plots]"""

from specc.report import main

raise SystemExit(main())
