"""How model results are read (torch-free): headline rate, report title and note."""

RATE = "samples_per_s"  # the rate that says how fast this family is
TITLE = "Models"
NOTE = ""
