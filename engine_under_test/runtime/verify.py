"""Turning target logits into output tokens: plain sampling and draft verification.

Contract: `verify(logits, drafts, params, generator, acceptance)` with `logits` [len(drafts) + 1, V]
(row i scores the token after input i of the verified run: row 0 follows the last known token,
row j follows draft j) returns the output tokens: the accepted draft prefix then one more
token (the correction at the first rejection, or the bonus after all were accepted), as vLLM
0.33's rejection sampler does. A draft id < 0 (a padded slot) is always rejected.

Decision rules (`acceptance` None means the real drafter is judged, `mode model`):
- greedy (temperature 0): accept d_j while d_j == argmax(row j-1); the next token is argmax.
- standard rejection sampling (temperature > 0, greedy draft as vLLM's default
  draft_sample_method): accept d_j with probability p_target(d_j); on rejection sample from
  p_target with d_j removed (renormalised); the bonus is sampled from the last row.
- synthetic / fixed (an `AcceptanceModel`): the model decides how many drafts are accepted
  (vLLM's synthetic: accepted drafts are kept as drafted, lossy by design); the token at the
  first rejection is the target's (argmax if greedy, else a recovered sample); the bonus
  follows when all were accepted.
"""

from __future__ import annotations

import torch

from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.sampling_params import SamplingParams


def probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """softmax(logits / temperature) with top-k / top-p applied, float32 [rows, V]."""
    x = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def _sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def _uniform(generator: torch.Generator, device) -> float:
    return float(torch.rand((), generator=generator, device=device, dtype=torch.float64))


def verify(logits: torch.Tensor, drafts: list[int], params: SamplingParams, generator: torch.Generator | None,
           acceptance: AcceptanceModel | None, argmax: list[int] | None = None) -> list[int]:
    if logits.shape[0] != len(drafts) + 1:
        raise ValueError(f"verify: {logits.shape[0]} logit rows for {len(drafts)} drafts")
    greedy = params.is_greedy
    if greedy and argmax is None:
        argmax = logits.argmax(dim=-1).tolist()
    probs = None if greedy else probabilities(logits, params)

    def target_token(row: int, rejected: int | None) -> int:
        if greedy:
            return argmax[row]
        p = probs[row]
        if rejected is not None and rejected >= 0:
            q = p.clone()
            q[rejected] = 0.0
            if float(q.sum()) > 0.0:
                p = q / q.sum()
        return _sample(p, generator)

    out: list[int] = []
    if acceptance is not None:
        num_valid = next((j for j, d in enumerate(drafts) if d < 0), len(drafts))
        n = min(acceptance.accepted(len(drafts)), num_valid)
        out = list(drafts[:n])
        rejected = drafts[n] if n < len(drafts) else None
        out.append(target_token(n, rejected))
        return out
    for j, d in enumerate(drafts):
        if d < 0:
            out.append(target_token(j, None))
            return out
        if greedy:
            accepted = d == argmax[j]
        else:
            accepted = _uniform(generator, logits.device) < float(probs[j, d])
        if not accepted:
            out.append(target_token(j, d))
            return out
        out.append(d)
    out.append(target_token(len(drafts), None))
    return out
