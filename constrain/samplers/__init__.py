"""Token samplers: LCD and AWRS draw one token under a matcher with a properly weighted
log-weight (`constrain.samplers.base`). Whole generations (plain, speculative, SMC, ASAp) are
strategies of the decoding loop, in `constrain.decoding`.
"""

from constrain.errors import ConfigError
from constrain.samplers.awrs import AWRS
from constrain.samplers.base import Draw, TokenSampler
from constrain.samplers.lcd import LCD

__all__ = ["AWRS", "LCD", "Draw", "TokenSampler", "token_sampler"]


def token_sampler(spec: "str | TokenSampler") -> TokenSampler:
    """A token sampler from its name ("awrs", "awrs-two-pass", "lcd") or itself."""
    if not isinstance(spec, str):
        if not callable(getattr(spec, "sample", None)):
            raise ConfigError(f"not a token sampler (no .sample method): {spec!r}")
        return spec
    named = {"awrs": AWRS, "lcd": LCD, "awrs-two-pass": lambda: AWRS("two-pass")}
    if spec not in named:
        raise ConfigError(f"unknown sampler {spec!r}; expected one of {sorted(named)}")
    return named[spec]()
