"""One agent and its run: the immutable ``Agent``, the run loop, the builder that turns
an ``AgentSpec`` into an agent, and the resources agents share."""
