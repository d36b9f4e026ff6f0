"""dynagent.http.ops."""
