"""What wraps every route: CORS, errors mapped to statuses in one place, secrets masked
in bodies."""
