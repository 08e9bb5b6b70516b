"""How placement results are read (torch-free): headline rate, report title and note."""

RATE = "gbps"  # the rate that says how fast this family is
TITLE = "Tensor placement"
NOTE = (
    "`.to(device)` on a tensor already on that device returns the same tensor and copies nothing: its "
    "time is the call's overhead, and it has no bandwidth. clone, copy_ and .to(copy=True) always copy."
)
