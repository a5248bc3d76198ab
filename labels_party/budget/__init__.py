"""The privacy budget: the accountant's exact rule, the hash-chained ledger, the trails."""
