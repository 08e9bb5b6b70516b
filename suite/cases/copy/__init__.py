"""The copy matrix: every ordered device pair x size, pinned/pageable, uni/bidirectional."""

from suite.cases import measuring_names
from suite.cases.copy.config import CopyConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
