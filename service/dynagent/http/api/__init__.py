"""Our own API: invoke and stream an agent, feedback on a run."""
