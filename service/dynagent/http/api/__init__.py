"""dynagent.http.api."""
