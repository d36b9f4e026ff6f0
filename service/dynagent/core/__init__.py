"""The service without HTTP: ``Service`` owns everything a running Dynagent has, and
``run_agent``/``stream_agent`` are the one run path every protocol calls."""

from dynagent.core.runs import RunRequest, run_agent, stream_agent
from dynagent.core.service import Service

__all__ = ["RunRequest", "Service", "run_agent", "stream_agent"]
