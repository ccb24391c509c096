"""``mptrain bench``: strategies x worker counts on the same work, interleaved and repeated,
so that "did parallelism help?" gets a measured answer on the user's own machine."""
