"""How matmul results are read (torch-free): headline rate, report title and note."""

RATE = "tflops"  # the rate that says how fast this family is
TITLE = "Matmul"
NOTE = ""
