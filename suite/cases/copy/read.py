"""How copy results are read (torch-free): headline rate, report title and note."""

RATE = "gbps"  # the rate that says how fast this family is
TITLE = "Copies between host and devices"
NOTE = (
    "Bandwidth counts the buffer's bytes once. pinned = page-locked host memory (DMA directly); pageable "
    "copies go through a driver staging buffer and are often half as fast."
)
