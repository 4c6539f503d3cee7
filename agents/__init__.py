"""The five roles, one module each: memory, research, judge, refresher, working."""

# Every role imports graph.context, and the graph package imports the compiled graph, which imports
# the roles: loading the graph first lets any role module be imported first without a circular import.
import graph  # noqa: F401
