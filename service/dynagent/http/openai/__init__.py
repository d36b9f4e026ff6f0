"""The OpenAI-compatible routes: chat completions, Responses, models."""
