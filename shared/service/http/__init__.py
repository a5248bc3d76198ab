"""The HTTP kit both services share: the error shape, request checks, bearer tokens, OpenAPI."""
