"""Collectives over torch.distributed under torchrun: algbw and busbw."""

from suite.cases import measuring_names
from suite.cases.collectives.config import CollectivesConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
