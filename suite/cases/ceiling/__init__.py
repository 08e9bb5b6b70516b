"""The measured matmul ceiling per device and precision (MAMF-style sweep), and % of peak."""

from suite.cases import measuring_names
from suite.cases.ceiling.config import CeilingConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
