"""The calling context tree, its frames and metrics, and the profile file."""

from .cct import CallingContextTree, Node
from .frame import Frame
from .profile_file import load, save

__all__ = ["CallingContextTree", "Node", "Frame", "load", "save"]
