"""A realistic next-token distribution for dummy weights, and its entropy measured in the engine.

vLLM's `load_format="dummy"` draws every weight from U(-1e-3, 1e-3): the logits come out within
~1e-4 of each other and every next-token distribution is near uniform (entropy ~ln(vocab), 11.9
nats at vocab 151936), where a trained model's sampled text has ~1 nat per token. Top-k, top-p,
penalties and speculative acceptance then see another distribution than in production.
`calibrate` sets the model's logit scale (`LogitsProcessor.scale`, applied eagerly after the
head in both model runners, outside CUDA graphs) so that the mean entropy of the distributions
the engine samples from (temperature 1, before penalties) is the target, bisecting on short
generates, and returns what it measured. No weight changes, no copy of the head.

Runs inside the engine worker (`python -m verify.ab.engines --target-entropy X`); the functions
given to `LLM.apply_model` are module-level so that they reach the engine core by reference."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable

#: Bisection range of log10(logit scale), and its steps (each a short generate).
LOG_SCALE_RANGE = (0.0, 8.0)
PROBES = 16
#: Probe generates: requests x tokens (prompts of 32 random ids, seeded, temperature 1).
PROBE_BATCH, PROBE_TOKENS = 64, 24
#: Entropy the calibration must reach: within this many nats of the target.
TOLERANCE_NATS = 0.05


class CalibrationError(RuntimeError):
    """The logit scale does not reach the target entropy (a model whose head ignores it)."""


def _meter_hook(meter, module, args, output):
    import torch

    if output is None:  # not the last pipeline rank
        return
    probs = torch.softmax(output.float(), dim=-1)
    entropy = torch.special.entr(probs).sum(-1)
    meter[0] += entropy.sum().double()
    meter[1] += entropy.numel()


def _install(model) -> None:
    """Attach the meter (a device tensor: sum, count; no sync per step) to the head's logits."""
    import torch

    head = model.logits_processor
    if getattr(head, "_pb_meter", None) is None:
        meter = torch.zeros(2, dtype=torch.float64, device=next(model.parameters()).device)
        handle = head.register_forward_hook(functools.partial(_meter_hook, meter))
        head._pb_meter, head._pb_handle = meter, handle


def _set_scale(scale: float, model) -> float:
    model.logits_processor.scale = scale
    return scale


def _take(model) -> tuple[float, int]:
    """(sum of entropies, distributions) since the last take; resets the meter."""
    meter = model.logits_processor._pb_meter
    total, count = meter.tolist()
    meter.zero_()
    return total, int(count)


def _remove(model) -> None:
    head = model.logits_processor
    handle = getattr(head, "_pb_handle", None)
    if handle is not None:
        handle.remove()
    head._pb_meter = head._pb_handle = None


def _on_model(llm, fn, *args):
    """`fn(*args, model)` in the engine's worker (the first worker's answer)."""
    return llm.apply_model(functools.partial(fn, *args))[0]


def measure(llm, scale: float, vocab: int) -> float:
    """Mean entropy (nats) of the distributions one probe generate sampled from at `scale`."""
    from vllm import SamplingParams

    _on_model(llm, _set_scale, scale)
    _on_model(llm, _take)
    rng = random.Random(0)
    prompts = [
        {"prompt_token_ids": [rng.randrange(10, min(vocab, 4000)) for _ in range(32)]}
        for _ in range(PROBE_BATCH)
    ]
    params = [
        SamplingParams(max_tokens=PROBE_TOKENS, ignore_eos=True, temperature=1.0, seed=i)
        for i in range(PROBE_BATCH)
    ]
    llm.generate(prompts, params, use_tqdm=False)
    total, count = _on_model(llm, _take)
    if count == 0:
        raise CalibrationError("the entropy meter saw no logits (is the head elsewhere?)")
    return total / count


def search(measure: Callable[[float], float], target_nats: float) -> tuple[float, list]:
    """Bisect log10(scale) in LOG_SCALE_RANGE for `measure(scale)` (entropy, falling as the
    scale grows) to reach `target_nats`: (the probed scale closest to it, the probes as
    (log10 scale, nats)). CalibrationError where none gets within TOLERANCE_NATS."""
    lo, hi = LOG_SCALE_RANGE
    probes = [(lo, measure(10**lo))]
    for _ in range(PROBES):
        mid = (lo + hi) / 2
        got = measure(10**mid)
        probes.append((mid, got))
        lo, hi = (mid, hi) if got > target_nats else (lo, mid)
    best_log, best = min(probes, key=lambda p: abs(p[1] - target_nats))
    if abs(best - target_nats) > TOLERANCE_NATS:
        raise CalibrationError(
            f"entropy {best:.3f} nats at the closest logit scale 1e{best_log:.2f}, target "
            f"{target_nats} (probes: {[(round(a, 2), round(b, 3)) for a, b in probes]})"
        )
    return 10**best_log, probes


def calibrate(llm, target_nats: float) -> dict:
    """Set the logit scale so that the sampled distributions' mean entropy is `target_nats`;
    returns {target_nats, measured_nats (a fresh probe at the chosen scale), logit_scale,
    uniform_nats, unscaled_nats, probes}. CalibrationError where it cannot get there."""
    vocab = llm.model_config.get_vocab_size()
    _on_model(llm, _install)
    try:
        scale, probes = search(lambda s: measure(llm, s, vocab), target_nats)
        measured = measure(llm, scale, vocab)
    finally:
        _on_model(llm, _remove)
    return {
        "target_nats": target_nats,
        "measured_nats": round(measured, 4),
        "logit_scale": scale,
        "uniform_nats": round(math.log(vocab), 4),
        "unscaled_nats": round(probes[0][1], 4),
        "probes": len(probes) + 1,
        "probe_shape": f"{PROBE_BATCH} requests x {PROBE_TOKENS} tokens, temperature 1",
    }
