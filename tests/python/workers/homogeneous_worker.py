"""Prints "rank R: homogeneous=H" from hvdrun.torch's is_homogeneous(), which the tests
compare across the ranks and with the job's layout; before init() it raises ValueError."""
from _checks import expect_raises

import hvdrun.torch as hvd

expect_raises(ValueError, hvd.is_homogeneous, "before init()")
hvd.init()
print(f"rank {hvd.rank()}: homogeneous={hvd.is_homogeneous()}", flush=True)
hvd.shutdown()
