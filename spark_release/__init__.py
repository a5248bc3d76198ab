"""The release as a Spark job, where the labels live: the job (``job``) and its command
``labeldp release --engine spark`` (``cli``). Neither party's service: it talks to the labels
party over HTTP only (charge, publication) and runs the engine of ``shared``."""

# The driver JVM's settings, applied by ``spark_release.job.spark_session``. Its heap unless
# ``--driver-memory`` says else (in local mode every task runs in it): the setting of every
# benchmark in bench/results/spark_release.md. Spark's own default, 1g, made no measurable
# difference to the 10^8-id command (240-246 s against 239 s).
DRIVER_MEMORY = "2g"

# The driver JVM's collector (in local mode the executors' too): a release is a batch job that
# wants throughput, not short pauses. Parallel GC ran the first job of a fresh JVM (the command's
# case) in 0.91x G1's time, four pairs at 3 x 10^7 ids (bench/results/spark_release.md); a
# C2-only JIT (-XX:-TieredCompilation) 1.03x slower, C1 only 2.7x.
DRIVER_JAVA_OPTIONS = "-XX:+UseParallelGC"
