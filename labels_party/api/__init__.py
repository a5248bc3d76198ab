"""HTTP layer: the only code that knows about FastAPI and status codes."""
