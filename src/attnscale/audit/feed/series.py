"""Time series and trajectories: inputs for models that read a series or a trajectory instead of tokens.

Forecasters (PatchTST, TimesFM, Informer, the Time Series Transformer, ...) take the series' past values, and some
also a mask of the values observed, time features and the values to forecast (which their decoder reads); Decision
Transformer takes states, actions and rewards.  As for images and audio, the path probe overwrites q, k and v at the
projections, so only the shapes matter: the values are fixed random draws, every value observed, every step real.
"""

from __future__ import annotations

import torch

from .kinds import SERIES_INPUT


SERIES_LENGTH = 32  # steps of history where the config states no context length
TRAJECTORY_STEPS = 8  # (return, state, action) triples: 24 tokens


def values(generator, batch: int, *shape: int) -> torch.Tensor:
    return torch.randn(1, *shape, generator=generator).repeat(batch, *([1] * len(shape)))


def history_length(config) -> int:
    """Steps of history: the context plus the furthest lag where the model builds lagged copies
    of the series (the Time Series Transformer's lags_sequence)."""
    lags = getattr(config, "lags_sequence", None) or [0]
    return (getattr(config, "context_length", None) or SERIES_LENGTH) + max(lags)


def series_shapes(config) -> list[tuple[int, ...]]:
    """Shapes (without the batch) to try for the past values: one value a step, then a value per
    channel (PatchTST's (steps, channels))."""
    length = history_length(config)
    channels = getattr(config, "num_input_channels", None) or getattr(config, "input_size", None) or 1
    return list(dict.fromkeys([(length,), (length, channels)] if channels == 1 else [(length, channels), (length,)]))


def series_input(model, batch: int, shape: tuple[int, ...], takes, required: list[str]) -> dict:
    """The past values at ``shape`` and what the forward also takes of them: the observed mask, time
    features and the future values a decoder reads (at the config's prediction length), and
    TimesFM's padding and frequency; ``takes(name)`` says whether the forward takes an argument."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    length, channels = shape[0], shape[1:]
    inputs = {SERIES_INPUT: values(generator, batch, *shape)}
    for mask in ("past_observed_mask", "observed_mask"):
        if takes(mask):
            inputs[mask] = torch.ones(batch, *shape)
    time_features = getattr(config, "num_time_features", None)
    if takes("past_time_features"):
        inputs["past_time_features"] = values(generator, batch, length, time_features or 0)
    horizon = getattr(config, "prediction_length", None)
    if takes("future_values") and "past_time_features" in inputs and horizon:  # the decoder's input
        inputs["future_values"] = values(generator, batch, horizon, *channels)
        inputs["future_time_features"] = values(generator, batch, horizon, time_features or 0)
    if "past_values_padding" in required:
        inputs["past_values_padding"] = torch.zeros(batch, length, dtype=torch.long)
    if "freq" in required:
        inputs["freq"] = torch.zeros(batch, 1, dtype=torch.long)
    return inputs


def trajectory_input(model, batch: int) -> dict:
    """TRAJECTORY_STEPS steps of states, actions, rewards and returns-to-go, their time steps and mask."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    steps = TRAJECTORY_STEPS
    return {"states": values(generator, batch, steps, config.state_dim),
            "actions": values(generator, batch, steps, config.act_dim),
            "rewards": values(generator, batch, steps, 1), "returns_to_go": values(generator, batch, steps, 1),
            "timesteps": torch.arange(steps).repeat(batch, 1),
            "attention_mask": torch.ones(batch, steps, dtype=torch.long)}
