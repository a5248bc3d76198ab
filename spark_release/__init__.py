"""The release as a Spark job, where the labels live: the job (``job``) and its command
``labeldp release --engine spark`` (``cli``). Neither party's service: it talks to the labels
party over HTTP only (charge, publication) and runs the engine of ``shared``."""
