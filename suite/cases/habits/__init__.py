"""Transfer habits as slow/fast pairs of equal work."""

from suite.cases import measuring_names
from suite.cases.habits.config import HabitsConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
