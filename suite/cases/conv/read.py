"""How conv results are read (torch-free): headline rate, report title and note."""

RATE = "tflops"  # the rate that says how fast this family is
TITLE = "Convolutions"
NOTE = (
    "TFLOP/s counts the direct convolution's multiply-adds (fwd+bwd: 3 × the forward). A faster algorithm"
    " (cuDNN Winograd or FFT; oneDNN on the CPU against a small matmul sweep) can exceed 100% of the "
    "ceiling."
)
