"""dynagent.http.middleware."""
