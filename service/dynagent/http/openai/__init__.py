"""dynagent.http.openai."""
