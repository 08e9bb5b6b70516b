"""A model on a device: nn.Linear(3, 1) forward, MLP and LeNet training steps."""

from suite.cases import measuring_names
from suite.cases.model.config import ModelConfig as Config

__getattr__ = measuring_names(__name__)
__all__ = ["Config"]
