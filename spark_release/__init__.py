"""The release as a Spark job, where the labels live: the job (``job``) and its command
``labeldp release --engine spark`` (``cli``). Neither party's service: it talks to the labels
party over HTTP only (charge, publication) and runs the engine of ``shared``."""

# The driver JVM's heap unless ``--driver-memory`` says else (in local mode every task runs in
# it): the setting of every benchmark in bench/results/spark_release.md. Spark's own default,
# 1g, made no measurable difference to the 10^8-id command (240-246 s against 239 s).
DRIVER_MEMORY = "2g"
