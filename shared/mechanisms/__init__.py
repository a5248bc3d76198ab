"""The DP engine's mechanisms. Importing the package registers the served label mechanisms
(``registry``); their registration order is the order ``mechanism="auto"`` compares them in."""

from shared.mechanisms import rp_with_prior, rr_on_bins, unbiased  # noqa: F401
