"""conv2d TFLOP/s per layer shape, precision, memory layout and step."""

from suite.cases import measuring_names
from suite.cases.conv.config import ConvConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
