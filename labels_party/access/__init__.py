"""Who may call: named principals and their bearer tokens."""
