"""The operations routes: admin (promote, rollback, pause, resume), probes and metrics,
traces and series, the operations page and its live feed, MCP status."""
