"""How habits results are read (torch-free): headline rate, report title and note."""

RATE = "gbps"  # the rate that says how fast this family is
TITLE = "Habits"
NOTE = (
    "Each habit is measured both ways on the same work; the ratio is the slow way's median time over the "
    "fast way's."
)
