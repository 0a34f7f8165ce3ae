"""The checks made before the first model call: settings, environment, sandbox, targets and the endpoint."""
