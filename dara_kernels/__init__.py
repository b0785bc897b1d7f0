"""dara-kernels: fused multi-reward RL advantages (GRPO, GDPO, DARA and baselines)."""
from ._ops import extension_available, set_token_cache_bytes
from .api import fused_advantage
from .backends import BACKENDS, BackendUnavailable, unavailable_reason
from .options import AdvantageOptions, resolve_options
from .output import AdvantageOutput
from .wire import BATCH_NORMS, METHODS, NAN_POLICIES, PRESETS

__all__ = [
    "fused_advantage", "AdvantageOutput", "AdvantageOptions", "resolve_options",
    "METHODS", "PRESETS", "BATCH_NORMS", "NAN_POLICIES", "BACKENDS",
    "BackendUnavailable", "unavailable_reason", "extension_available", "set_token_cache_bytes",
]
__version__ = "0.1.0"
