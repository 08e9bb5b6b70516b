"""Matmul TFLOP/s per device, precision and shape, and on every GPU at once."""

from suite.cases import measuring_names
from suite.cases.matmul.config import MatmulConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
