"""The service kit both parties' services share: HTTP app and auth, TLS, database URLs and
migrations, strict input, the HTTP clients, signed receipts and the command-line plumbing;
the DP engine and the wire format stay in ``shared``."""
