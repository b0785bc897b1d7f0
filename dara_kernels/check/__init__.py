"""The installed check, `python -m dara_kernels.check`: every backend this
machine can run against the float64 reference on a fixed sweep, and one
timed call of each on verl's and on the paper's batch. Its case builders
(`cases`, `sweeps`, `compare`) are also what the test suite runs."""
