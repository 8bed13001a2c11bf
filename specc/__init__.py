"""specc: a declarative experiment-spec compiler for speculative-decoding benchmarks.

Pipeline: compose -> schema -> rules, matrix, placement -> lower -> emit -> execute -> report.
"""

__version__ = "0.1.0"
