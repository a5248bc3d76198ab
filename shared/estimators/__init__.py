"""Private model releases: ePTR estimators (Shen, Tong & Wang) and exact label-DP versions.

- :mod:`.eptr`: Algorithm 2, the efficient Propose-Test-Release step ((epsilon, delta)-DP).
- :mod:`.ols`: ePTR-OLS (Algorithm 4) and label-DP OLS (pure epsilon, public features).
- :mod:`.kernel`: ePTR-NW (Algorithm 5) and label-DP Nadaraya-Watson, one vector release at
  public query points, interpolated elsewhere.
- :mod:`.bayes`: ePTR-Bayes (Algorithm 3).
- :mod:`.registry`: every estimator family a model release can publish; :mod:`.families`
  registers the three above (importing the package does it).

See docs/estimators.md for what each releases and which privacy it gives.
"""

from shared.estimators import families  # noqa: F401  (registers ols, nw, bayes)
