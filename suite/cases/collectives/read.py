"""How collectives results are read (torch-free): headline rate, report title and note."""

RATE = "busbw"  # the rate that says how fast this family is
TITLE = "Collectives"
NOTE = (
    "busbw follows nccl-tests: comparable to the link's hardware bandwidth whatever the world size."
)
