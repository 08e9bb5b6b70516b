"""`.to` against copies on each device: to the same device is free, a copy is not."""

from suite.cases import measuring_names
from suite.cases.placement.config import PlacementConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
