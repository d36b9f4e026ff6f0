"""The agents being served: the table of stable versions, the canaries and their guard,
readiness, and the typed events listeners receive; ``AgentRegistry`` composes them."""
