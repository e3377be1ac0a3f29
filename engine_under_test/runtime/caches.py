"""The models' per-layer views of the unified pool.

Contract: `layer_caches(pool, num_target_layers, layer_types, num_draft_layers)` returns
(kv_caches, state_caches): {layer_name: LayerCache} with the pool's zero-copy typed views and
the cache group whose block ids index them. Nothing is allocated here.
"""

from __future__ import annotations

from engine_under_test.model.drafter import draft_layer_name
from engine_under_test.model.forward_batch import LayerCache
from engine_under_test.model.target import target_layer_name
from engine_under_test.pool import UnifiedPool


def layer_caches(pool: UnifiedPool, layer_types: tuple[str, ...], num_draft_layers: int
                 ) -> tuple[dict[str, LayerCache], dict[str, LayerCache]]:
    kv: dict[str, LayerCache] = {}
    state: dict[str, LayerCache] = {}
    for i, kind in enumerate(layer_types):
        name = target_layer_name(i)
        gid = pool.layout.group_of(name).group_id
        if kind == "full_attention":
            kv[name] = LayerCache(*pool.attention_kv(name), gid)
        else:
            state[name] = LayerCache(*pool.recurrent_state(name), gid)
    for i in range(num_draft_layers):
        name = draft_layer_name(i)
        kv[name] = LayerCache(*pool.attention_kv(name), pool.layout.group_of(name).group_id)
    return kv, state
