"""Labels and example registrations in: the bulk parsers and the all-or-nothing store."""
