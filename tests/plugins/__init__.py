"""A third-party tool kind, installed as a plugin the way a user would."""
