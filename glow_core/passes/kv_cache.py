"""The KV-cache rewrite: a decoder's growing cache becomes persistent state of fixed capacity, written in place.

A decoder exported for generation (optimum's and onnxruntime-genai's I/O names) takes each layer's cache as an
input ``past`` of P positions and returns ``present`` = Concat(past, new, axis=2) of P + S positions, or an
opset-23 ``Attention`` node concatenates them inside. Imported with P = capacity - S, every shape downstream is
that of a cache of ``capacity`` positions. ``rewrite_kv_cache`` then:

* replaces each ``present`` by a persistent placeholder of ``capacity`` positions (``Function.state``, named after
  the ``past`` input it replaces) updated by ``scatter_nd`` at the block's positions: rows
  ``cache_position[0..S-1]`` of the cache receive the block's keys or values, in place, and nothing else moves;
  every reader of ``present`` (the attention) reads the updated cache;
* masks the attention to the written positions: query i (at position ``cache_position[i]``) sees key slot j only
  when j <= cache_position[i]: a 0 / -inf bias added before every Softmax that reads a cache (the export's own
  mask, built for a past of P positions, is looser than that and stays; when the Softmax reads scores + that mask,
  the bias joins the mask: one mask, whose -inf tail a backend may skip), or the mask of a rewritten
  ``Attention`` node (its causal flag then off);
* adds the int64 input ``cache_position`` [S] (the absolute positions of the block's tokens), unless the model
  already takes one.

A com.microsoft ``GroupQueryAttention`` node (onnxruntime-genai's form) already writes its new rows into the
cache at the positions its ``seqlens_k`` gives and masks the rest itself: it is rebuilt on the two caches (past
and present then have the capacity, the buffer-sharing mode of onnxruntime), and its present outputs are the
updated states. Its positions come from ``attention_mask`` (seqlens_k = sum(mask) - 1), not ``cache_position``.

Slot j of a cache holds the token at position j, so a run of S tokens at positions p..p+S-1 writes slots
p..p+S-1 and attends to slots 0..p+i: exactly the export's attention over its past and the block.
"""
from __future__ import annotations

import numpy as np

from ..builder import Builder, build_node
from ..errors import GlowError, ShapeError
from ..graph import Function, Node, Value
from ..types import TensorType
from .basic import dce

CACHE_POSITION = "cache_position"
GQA = "com.microsoft.GroupQueryAttention"


def _source(v: Value) -> Value:
    """``v`` through nodes that pass it on unchanged (Identity, a one-input Concat)."""
    while v.producer is not None and (v.producer.op == "Identity" or
                                      (v.producer.op == "Concat" and len(v.producer.inputs) == 1)):
        v = v.producer.inputs[0]
    return v


class _Rewrite:
    def __init__(self, fn: Function, capacity: int, block: int):
        self.fn, self.capacity, self.block = fn, capacity, block
        self.b = Builder(fn, "KV-cache rewrite", name="kv_cache")
        self.uses = fn.use_lists()
        self.placeholders = {v.name: v for v in fn.inputs}
        self.outputs = dict(zip(fn.output_names, fn.outputs))
        pos = self.placeholders.get(CACHE_POSITION)
        if pos is None:
            pos = Value(CACHE_POSITION, TensorType("int64", (block,)), "placeholder")
            fn.inputs.append(pos)
        elif pos.dtype.name != "int64" or pos.shape != (block,):
            raise ShapeError(f"model input '{CACHE_POSITION}' is {pos.type}; the KV-cache rewrite feeds the block's "
                             f"positions there as int64 [{block}]")
        self.pos = pos
        self._indices: dict = {}
        self._allowed = None
        self._bias: dict = {}
        self._merged: dict = {}  # the export's mask (value id) -> it plus the cache's bias, broadcast
        self.states: list[Value] = []  # the updated caches: their readers are the attention
        self.old: list[Value] = []  # the past inputs the states replace

    # -- pieces shared by every layer -----------------------------------------------------------------
    def indices(self, heads: int) -> Value:
        """scatter_nd indices [1, heads, S, 3]: (0, h, cache_position[s])."""
        if heads not in self._indices:
            b, s = self.b, self.block
            b.name = "cache_slots"
            bh = np.zeros((1, heads, s, 2), np.int64)
            bh[..., 1] = np.arange(heads).reshape(1, heads, 1)
            p = b.broadcast_to(b.reshape_(self.pos, (1, 1, s, 1)), (1, heads, s, 1))
            self._indices[heads] = b.concat(b.const(bh), p, axis=3)
        return self._indices[heads]

    def allowed(self) -> Value:
        """bool [S, capacity]: slot j is visible to query i when j <= cache_position[i]."""
        if self._allowed is None:
            b = self.b
            b.name = "cache_mask"
            slots = b.const(np.arange(self.capacity, dtype=np.int64).reshape(1, self.capacity))
            self._allowed = b.binary("le", slots, b.reshape_(self.pos, (self.block, 1)))
        return self._allowed

    def bias(self, dt) -> Value:
        """[S, capacity] of ``dt``: 0 where ``allowed``, -inf elsewhere."""
        if dt.name not in self._bias:
            self.allowed()
            self.b.name = "cache_mask"
            shape = (self.block, self.capacity)
            self._bias[dt.name] = self.b.select(self.allowed(), self.b.const(np.zeros(shape, dt.np)),
                                                self.b.const(np.full(shape, -np.inf, dt.np)))
        return self._bias[dt.name]

    # -- one cache --------------------------------------------------------------------------------------
    def state(self, past: str, present: str) -> Value:
        """A persistent placeholder named ``past`` holding ``capacity`` positions of ``present``'s type."""
        out = self.outputs[present]
        t = out.type
        if t.rank != 4 or t.shape[0] != 1 or t.shape[2] != self.capacity:
            raise ShapeError(f"model output '{present}' is {t}; a cache [1, heads, {self.capacity}, head_dim] is "
                             f"expected (batch 1, the past and the block of {self.block} concatenated on axis 2)")
        self.old.append(self.placeholders[past])
        ph = Value(past, TensorType(t.dtype, t.shape), "placeholder")
        self.fn.inputs.append(ph)
        return ph

    def update(self, past: str, present: str, new: Value) -> Value:
        st = self.state(past, present)
        if new.shape != (1, st.shape[1], self.block, st.shape[3]) or new.dtype != st.dtype:
            raise ShapeError(f"the block written into '{past}' is {new.type}; [1, {st.shape[1]}, {self.block}, "
                             f"{st.shape[3]}] of {st.dtype} is expected")
        idx = self.indices(st.shape[1])
        self.b.name = f"update_{past}"
        upd = self.b.emit("scatter_nd", st, idx, new)
        self.b.name = "kv_cache"
        self.states.append(upd)
        return upd

    def concat(self, past: str, present: str, node: Node):
        """present = Concat(past, new, axis=2): the update of the state."""
        axis = node.attrs.get("axis", 0)
        ph = self.placeholders[past]
        if len(node.inputs) != 2 or axis not in (2, -2) or _source(node.inputs[0]) is not ph:
            raise GlowError(f"model output '{present}' is computed by Concat node '{node.name}' with axis {axis} "
                            f"from {[v.name for v in node.inputs]}; Concat('{past}', new, axis=2) is expected")
        upd = self.update(past, present, node.inputs[1])
        self.uses.replace(node.outputs[0], upd)
        self.fn.output_names[self.fn.output_names.index(present)] = past

    def attention(self, node: Node, names: dict):
        """An opset-23 Attention node with past_key/past_value inputs: both caches updated in place, the node
        rebuilt on the caches with the mask of the written positions (its causal flag off)."""
        q, k, v, mask = (list(node.inputs) + [None] * 4)[:4]
        outs = node.outputs
        if len(outs) > 3 and self.uses.num_users(outs[3]) + self.uses.is_output(outs[3]):
            raise GlowError(f"Attention node '{node.name}': its qk_matmul_output is read; the KV-cache rewrite "
                            f"changes its shape, so it cannot be")
        attrs = dict(node.attrs)
        rank3 = q.rank == 3
        b = self.b
        if rank3:
            hq, hk = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
            if not hq or not hk:
                raise ShapeError(f"Attention node '{node.name}': 3-D inputs need q_num_heads and kv_num_heads")

            def heads(x, h):
                x = b.reshape_(x, (x.shape[0], x.shape[1], h, x.shape[2] // h))
                return b.transpose_(x, (0, 2, 1, 3))
            q, k, v = heads(q, hq), heads(k, hk), heads(v, hk)
        ck = self.update(names[1][0], names[1][1], k)
        cv = self.update(names[2][0], names[2][1], v)
        allowed = self.allowed()
        if mask is None:
            mask = self.bias(q.dtype)
        elif mask.dtype.name == "bool":
            mask = b.binary("and", mask, allowed)
        else:
            mask = b.binary("add", b.cast_(mask, q.dtype), self.bias(q.dtype))
        attrs["is_causal"] = 0
        for a in ("q_num_heads", "kv_num_heads"):
            attrs.pop(a, None)
        (y,) = build_node(self.fn, Node("Attention", [q, ck, cv, mask], attrs, [], f"{node.name}_cached",
                                        node.opset), 1)
        if rank3:
            y = b.transpose_(y, (0, 2, 1, 3))
            y = b.reshape_(y, (y.shape[0], y.shape[1], y.shape[2] * y.shape[3]))
        self.uses.replace(outs[0], y)
        for i in (1, 2):
            self.uses.replace(outs[i], ck if i == 1 else cv)
            past, present = names[i]
            self.fn.output_names[self.fn.output_names.index(present)] = past

    def group_query_attention(self, node: Node, names: dict):
        """com.microsoft GroupQueryAttention: the node rebuilt with the states as past_key/past_value; its present
        outputs become the states' new values."""
        states = {i: self.state(*names[i]) for i in (1, 2)}
        ins = list(node.inputs)
        ins[3], ins[4] = states[1], states[2]
        outs = build_node(self.fn, Node(node.op, ins, dict(node.attrs), [], f"{node.name}_cached", node.opset),
                          len(node.outputs))
        for i, old in enumerate(node.outputs):
            if i in (1, 2) and outs[i].type != old.type:
                raise ShapeError(f"GroupQueryAttention node '{node.name}': its present output {i} is {old.type} but "
                                 f"{outs[i].type} over a cache of {self.capacity} positions; its total_sequence_length "
                                 f"must be the attention_mask's length (the capacity)")
            self.uses.replace(old, outs[i])
        for i in (1, 2):
            self.states.append(outs[i])
            past, present = names[i]
            self.fn.output_names[self.fn.output_names.index(present)] = past

    # -- the masks ----------------------------------------------------------------------------------
    def mask_softmaxes(self) -> int:
        """A 0 / -inf bias of the written positions before every Softmax that reads a cache."""
        tainted = {v.id for v in self.states}
        count = 0
        for n in list(self.fn.nodes):
            if not any(v is not None and v.id in tainted for v in n.inputs):
                continue
            tainted.update(v.id for v in n.outputs)
            if n.op != "Softmax":
                continue
            x = n.inputs[0]
            axis = n.attrs.get("axis", -1)
            if x.shape[-1] != self.capacity or axis not in (-1, x.rank - 1):
                raise GlowError(f"Softmax node '{n.name}' reads the KV cache over axis {axis} of {x.type}; the "
                                f"KV-cache rewrite masks the last axis of {self.capacity} key positions")
            bias = self.bias(x.dtype)
            count += 1
            if self.merge_mask(x, tainted, bias):
                continue
            self.b.name = f"{n.name}_cache_mask"
            self.uses.set_inputs(n, [self.b.binary("add", x, bias)] + n.inputs[1:])
        return count

    def merge_mask(self, x: Value, tainted: set, bias: Value) -> bool:
        """When the Softmax's input ``x`` is scores + mask (the export's mask, not computed from a cache) read by the
        Softmax alone: fold the bias into that mask, scores + (mask + bias), so the attention keeps one mask (the
        CPU's fused attention takes one, and ends each row at its last key that is not -inf). Exact: with a bias
        of 0 or -inf, (s + m) + b and s + (m + b) are the same value for every s and m, inf and NaN included.
        The sum is formed once per distinct mask (layers share the export's) before any broadcast of it."""
        p = x.producer
        if p is None or p.op not in ("add", "Add") or len(p.inputs) != 2 or len(p.outputs) != 1 or \
                self.uses.num_users(x) != 1 or self.uses.is_output(x):
            return False
        hit = [v is not None and v.id in tainted for v in p.inputs]
        if hit.count(True) != 1:
            return False
        i = hit.index(True)
        scores, m = p.inputs[i], p.inputs[1 - i]
        if scores.shape != x.shape or m.dtype != x.dtype:
            return False
        if m.id not in self._merged:
            src = m
            while src.producer is not None and src.producer.op in ("broadcast", "reshape") and \
                    src.producer.inputs[0].type.numel <= src.type.numel:
                src = src.producer.inputs[0]
            b = self.b
            b.name = "cache_mask"
            start = len(self.fn.nodes)
            try:
                merged = b.binary("add", src, bias)
                self._merged[m.id] = b.broadcast_to(merged, x.shape)
            except ShapeError:  # the mask's own shape does not broadcast with [block, capacity]
                return False
            # right after the export's mask in the node order (so before the first layer's products, as the export
            # computes its mask; built at the end, the sorts would place it just before its first reader)
            new = self.fn.nodes[start:]
            del self.fn.nodes[start:]
            at = next((k + 1 for k, n in enumerate(self.fn.nodes) if src.producer is n), 0)
            self.fn.nodes[at:at] = new
        ins = list(p.inputs)
        ins[1 - i] = self._merged[m.id]
        self.uses.set_inputs(p, ins)
        return True


def rewrite_kv_cache(fn: Function, caches: list[tuple[str, str]], capacity: int, block: int) -> dict:
    """Rewrite ``fn`` (imported for a block of ``block`` tokens and a past of ``capacity - block`` positions) so
    that each (past input, present output) of ``caches`` is a persistent placeholder of ``capacity`` positions
    named after the past input, updated in place (see the module docstring). Returns counts: caches, Attention
    nodes and Softmax nodes rewritten. Raises GlowError naming the output whose computation is not a cache
    concatenation."""
    rw = _Rewrite(fn, capacity, block)
    present_of = {present: past for past, present in caches}
    attention_nodes: dict[int, tuple[Node, dict]] = {}
    for past, present in caches:
        if past not in rw.placeholders:
            raise GlowError(f"model input '{past}' is missing")
        if present not in rw.outputs:
            raise GlowError(f"model output '{present}' is missing")
        out = _source(rw.outputs[present])
        node = out.producer
        if node is not None and node.op == "Concat":
            rw.concat(past, present, node)
        elif node is not None and node.op in ("Attention", GQA) and out in node.outputs[1:3]:
            slot = node.outputs.index(out)
            attention_nodes.setdefault(id(node), (node, {}))[1][slot] = (past, present)
        else:
            what = f"{node.op} node '{node.name}'" if node is not None else "no node"
            raise GlowError(f"model output '{present}' is computed by {what}; Concat('{past}', new keys or "
                            f"values, axis=2) or an Attention node's present output is expected")
    for node, names in attention_nodes.values():
        past_k, past_v = (3, 4) if node.op == GQA else (4, 5)
        if set(names) != {1, 2} or any(
                len(node.inputs) <= i or node.inputs[i] is None or _source(node.inputs[i]) is not
                rw.placeholders[names[slot][0]] for slot, i in ((1, past_k), (2, past_v))):
            raise GlowError(f"{node.op} node '{node.name}': its present key and value must both be model outputs "
                            f"and its past key and value the matching inputs")
        if node.op == GQA:
            rw.group_query_attention(node, names)
        else:
            rw.attention(node, names)
    fn.toposort()
    softmaxes = rw.mask_softmaxes()
    if not attention_nodes and not softmaxes:
        raise GlowError("no Softmax reads the KV cache: the KV-cache rewrite finds the attention by the Softmax "
                        "over the cache's positions (or an Attention node)")
    fn.state.extend(past for past, _ in caches)
    fn.toposort()
    dce(fn)
    users = fn.users()
    stale = [ph.name for ph in rw.old if users.get(ph.id)]
    if stale:
        raise GlowError(f"model input(s) {stale} are read other than by the concatenation with the new keys or "
                        f"values; the KV-cache rewrite replaces them by caches of {capacity} positions")
    fn.inputs = [v for v in fn.inputs if all(v is not ph for ph in rw.old)]
    return {"caches": len(caches), "attention_nodes": len(attention_nodes), "softmax_masks": softmaxes}


LOGITS_POSITION = "logits_position"


def keep_one_logits_row(fn: Function, output: str = "logits") -> bool:
    """When ``output`` [1, S, vocab] is MatMul(hidden [1, S, H], W) or com.microsoft MatMulNBits(hidden, W
    quantized, ...): compute it for one position only, the int64 input ``logits_position`` [1] (a prefill needs the
    logits of its last real token, not of every token of the block: the vocabulary projection is a large share of
    its work). ``output`` becomes [1, 1, vocab]. Returns whether it applied (another form of the output is left
    alone)."""
    outputs = dict(zip(fn.output_names, fn.outputs))
    v = outputs.get(output)
    n = v.producer if v is not None else None
    if n is None or n.op not in ("MatMul", "com.microsoft.MatMulNBits") or v.rank != 3 or v.shape[0] != 1 or \
            n.inputs[0].rank != 3 or v.shape[1] == 1:
        return False
    pos = Value(LOGITS_POSITION, TensorType("int64", (1,)), "placeholder")
    fn.inputs.append(pos)
    b = Builder(fn, "logits row", name="logits_row")
    row = b.gather(n.inputs[0], pos, axis=1)
    (out,) = build_node(fn, Node(n.op, [row] + list(n.inputs[1:]), dict(n.attrs), [], f"{n.name}_row", n.opset), 1)
    fn.outputs[fn.output_names.index(output)] = out
    fn.toposort()
    dce(fn)
    return True
