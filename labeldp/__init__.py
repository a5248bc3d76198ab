"""The ``labeldp`` command (``cli``): one entry point over both parties, the demo and the Spark
release; each registers its own subcommands. Depends on all of them, so none depends on it."""
