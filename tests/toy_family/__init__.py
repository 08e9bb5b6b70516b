"""A toy case family (fill a buffer with a value) that lives in the test folder: what docs/adding-a-family.md shows."""

from suite.cases import measuring_names
from tests.toy_family.config import ToyConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
