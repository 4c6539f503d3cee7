"""The five roles, one module each: memory, research, judge, refresher, working.

The graph package is loaded first so that any role module can be imported on
its own: each role imports the graph's context and state, and the graph
imports every role.
"""

import strata.graph  # noqa: F401
