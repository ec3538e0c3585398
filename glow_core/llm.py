"""Text generation with a static memory plan: ``Generator``.

A decoder-only ONNX model with the I/O names optimum and onnxruntime-genai use (inputs ``input_ids``, optionally
``attention_mask`` and ``position_ids``, and ``past_key_values.{i}.key|value``; outputs ``logits`` and
``present.{i}.key|value``) is imported twice: for a block of ``prefill_block`` prompt tokens and for one token.
``glow_core.passes.kv_cache`` turns each layer's growing cache into persistent state of ``max_seq_len``
positions written in place, and ``glow_core.module.compile_module`` compiles the two functions as one module:
one constant region (the weights once) and one state region (the KV cache) that both read and update. Nothing
copies the cache per token and nothing is allocated per token: every buffer has its place in the plan.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from .api import _collector_paused
from .discovery import get_backend
from .errors import GlowError, InputError, UnsupportedOpError
from .importer.onnx_import import graph_input_specs, import_model, load_model
from .module import CompiledModule, compile_module
from .passes import run_pipeline
from .passes.kv_cache import CACHE_POSITION, LOGITS_POSITION, keep_one_logits_row, rewrite_kv_cache
from .types import dtype

PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)")


@dataclass(frozen=True)
class DecoderIO:
    """The inputs and outputs of a decoder-only model, by their optimum / onnxruntime-genai names: ``caches``
    is one (past input, present output) per layer and kind, ``heads`` and ``head_dim`` the caches' static
    dims, and the optional inputs None when absent."""

    input_ids: str
    attention_mask: str | None
    position_ids: str | None  # None only with com.microsoft GroupQueryAttention (positions from attention_mask)
    caches: tuple[tuple[str, str], ...]
    heads: dict
    dtypes: dict  # input name -> numpy dtype

    @classmethod
    def of(cls, m) -> "DecoderIO":
        specs = {nm: (elem, dims) for nm, elem, dims in graph_input_specs(m)}
        outputs = [o.name for o in m.graph.output]
        missing = [nm for nm in ("input_ids",) if nm not in specs] + [nm for nm in ("logits",) if nm not in outputs]
        caches, heads = [], {}
        for nm, (_, dims) in specs.items():
            mt = PAST.fullmatch(nm)
            if mt is None:
                continue
            present = f"present.{mt.group(1)}.{mt.group(2)}"
            if present not in outputs:
                missing.append(present)
                continue
            if len(dims) != 4 or not isinstance(dims[1], int) or not isinstance(dims[3], int):
                raise UnsupportedOpError(f"model input '{nm}' has shape {dims}; a cache [batch, heads, past, "
                                         f"head_dim] with static heads and head_dim is expected")
            caches.append((nm, present))
            heads[nm] = (dims[1], dims[3])
        if not caches:
            missing.append("past_key_values.0.key")
        if missing:
            raise UnsupportedOpError(
                f"model is not a decoder with a KV cache as optimum and onnxruntime-genai export it: it lacks "
                f"{missing}; expected inputs input_ids, (attention_mask, position_ids,) past_key_values.<i>.key|value "
                f"and outputs logits, present.<i>.key|value (the model takes {list(specs)}, returns {outputs})")
        known = {"input_ids", "attention_mask", "position_ids", CACHE_POSITION} | {p for p, _ in caches}
        extra = [nm for nm in specs if nm not in known]
        if extra:
            raise UnsupportedOpError(f"model input(s) {extra} are not ones a generator feeds; it feeds input_ids, "
                                     f"attention_mask, position_ids, {CACHE_POSITION} and the past_key_values")
        gqa = any(n.op_type == "GroupQueryAttention" and n.domain == "com.microsoft" for n in m.graph.node)
        if "position_ids" not in specs and not (gqa and "attention_mask" in specs):
            raise UnsupportedOpError("model has no 'position_ids' input: the generator places token t at cache slot "
                                     "t and feeds its position there (without it the model derives positions from "
                                     "the past's length, which a fixed-capacity cache does not have; only "
                                     "com.microsoft GroupQueryAttention takes them from attention_mask)")
        return cls("input_ids", "attention_mask" if "attention_mask" in specs else None,
                   "position_ids" if "position_ids" in specs else None,
                   tuple(sorted(caches, key=lambda c: (int(PAST.fullmatch(c[0]).group(1)), c[0]))), heads,
                   {nm: dtype(elem).np for nm, (elem, _) in specs.items()})


class Generator:
    """Greedy or sampled generation with a KV cache of ``max_seq_len`` positions as persistent state.

    ``prefill_block`` prompt tokens run at once (the prompt in blocks, the last one padded); then one token per
    decode step. ``backend`` as for ``glow_core.compile`` (a list partitions both functions). Sampling (with a
    ``seed``) uses ``temperature``, then keeps the ``top_k`` most likely tokens (0: all) and the smallest set
    whose probability reaches ``top_p``. The other keyword options are compile options; ``schedule`` is False
    unless given: the functions keep the export's node order, which computes each layer's key/value head repeats
    and the mask before its attention products (the order in which a backend can run the attention as one kernel:
    the scheduler's saves activation bytes, few next to the cache, by computing them between the products)."""

    def __init__(self, model, backend="cpu", max_seq_len: int = 256, prefill_block: int = 16, *,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, **compile_options):
        m, _ = load_model(model)
        compile_options.setdefault("schedule", False)
        self.io = io = DecoderIO.of(m)
        if not isinstance(max_seq_len, (int, np.integer)) or max_seq_len < 2:
            raise GlowError(f"max_seq_len={max_seq_len!r}: an int of at least 2 positions is accepted")
        if not isinstance(prefill_block, (int, np.integer)) or not 1 <= prefill_block <= max_seq_len - 1:
            raise GlowError(f"prefill_block={prefill_block!r}: an int from 1 to max_seq_len - 1 "
                            f"({max_seq_len - 1}) is accepted")
        if temperature <= 0 or top_k < 0 or not 0 < top_p <= 1:
            raise GlowError(f"temperature={temperature}, top_k={top_k}, top_p={top_p}: accepted are temperature > 0, "
                            f"top_k >= 0 and 0 < top_p <= 1")
        self.max_seq_len, self.prefill_block = int(max_seq_len), int(prefill_block)
        self.temperature, self.top_k, self.top_p = float(temperature), int(top_k), float(top_p)
        first = get_backend(backend[0] if isinstance(backend, (list, tuple)) else backend)
        self.rewrites = {}
        weights: dict = {}
        functions = {}
        blocks = {"decode": 1} if self.prefill_block == 1 else {"prefill": self.prefill_block, "decode": 1}
        for name, s in blocks.items():
            fn = self._function(m, s, weights, first, compile_options)
            fn.name = name
            functions[name] = fn
        del weights
        t0 = time.perf_counter()
        self.module: CompiledModule = compile_module(functions, backend, **compile_options)
        self.compile_seconds = time.perf_counter() - t0
        self._runs = {name: _Run(self.module.functions[name].compiled, io, self.max_seq_len, s,
                                 self.rewrites[s].get("one_logits_row", False)) for name, s in blocks.items()}
        self._stats = {}

    @_collector_paused()
    def _function(self, m, s, weights, backend, options):
        """The model imported for a block of ``s`` tokens over a past of max_seq_len - s, passes run, rewritten."""
        L, io = self.max_seq_len, self.io
        shapes = {io.input_ids: (1, s)}
        if io.position_ids:
            shapes[io.position_ids] = (1, s)
        if io.attention_mask:
            shapes[io.attention_mask] = (1, L)
        for past, _ in io.caches:
            h, d = io.heads[past]
            shapes[past] = (1, h, L - s, d)
        if CACHE_POSITION in io.dtypes:
            shapes[CACHE_POSITION] = (s,)
        fn = import_model(m, input_shapes=shapes, initializers=weights)
        if options.get("optimize", True):
            run_pipeline(fn, backend.optimization_pipeline())
        self.rewrites[s] = rewrite_kv_cache(fn, list(io.caches), L, s)
        if s > 1:
            self.rewrites[s]["one_logits_row"] = keep_one_logits_row(fn)
        return fn

    # -- running ------------------------------------------------------------------------------------------
    def _choose(self, logits: np.ndarray, rng) -> int:
        if rng is None:
            return int(np.argmax(logits))
        x = logits.astype(np.float64) / self.temperature
        order = np.argsort(-x, kind="stable")
        if self.top_k:
            order = order[:self.top_k]
        p = np.exp(x[order] - x[order[0]])
        p /= p.sum()
        if self.top_p < 1:
            keep = int(np.searchsorted(np.cumsum(p), self.top_p) + 1)
            order, p = order[:keep], p[:keep] / p[:keep].sum()
        return int(order[rng.choice(len(order), p=p)])

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        """Run the prompt (int64 [n]) through the cache from position 0 (a new sequence); the logits of its last
        token."""
        n, P = input_ids.shape[0], self.prefill_block
        if not 1 <= n <= self.max_seq_len:
            raise InputError(f"a prompt of {n} tokens: from 1 to max_seq_len={self.max_seq_len} are accepted")
        self._runs["decode"].reset()
        if P == 1:
            run = self._runs["decode"]
            for t in range(n):
                logits = run(input_ids[t:t + 1], t)
            return logits[0, -1]
        run = self._runs["prefill"]
        run.reset()
        start = 0
        while True:
            if start + P > self.max_seq_len:  # the last block ends at the capacity: it runs some tokens again
                start = self.max_seq_len - P
            block = input_ids[start:start + P]
            real = block.shape[0]
            last = start + real >= n
            logits = run(block, start, real - 1 if last else None)
            if last:
                return logits[0, -1 if run.one_row else real - 1]
            start += P

    def decode(self, token: np.ndarray, position: int) -> np.ndarray:
        """Run one token (int64 [1]) at ``position``, after the prompt's ``prefill`` and the tokens before it; the
        logits of the next token (a view, valid until the next run)."""
        run = self._runs["decode"]
        if position < run.valid - 1 or position >= self.max_seq_len:
            raise InputError(f"position {position}: decode continues the sequence (at {run.valid} or later, below "
                             f"max_seq_len={self.max_seq_len})")
        return run(token, position)[0, -1]

    def generate(self, input_ids, max_new_tokens: int, seed=None) -> np.ndarray:
        """The prompt (int64 [1, n]) followed by ``max_new_tokens`` tokens: greedy without ``seed``, sampled with
        it."""
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] < 1 or ids.dtype.kind not in "iu":
            raise InputError(f"input_ids: an int64 array [1, n] with n >= 1 is accepted, got {ids.dtype} "
                             f"{list(ids.shape)}")
        n = ids.shape[1]
        if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise InputError(f"max_new_tokens={max_new_tokens!r}: an int >= 0 is accepted")
        if n + max_new_tokens > self.max_seq_len:
            raise InputError(f"a prompt of {n} tokens and {max_new_tokens} new tokens need {n + max_new_tokens} "
                             f"positions; the generator's cache holds max_seq_len={self.max_seq_len}")
        rng = None if seed is None else np.random.default_rng(seed)
        out = np.empty((1, n + max_new_tokens), np.int64)
        out[0, :n] = ids[0]
        if max_new_tokens == 0:
            return out
        t0 = time.perf_counter()
        logits = self.prefill(out[0, :n])
        token = self._choose(logits, rng)
        t1 = time.perf_counter()
        out[0, n] = token
        for t in range(n, n + max_new_tokens - 1):
            token = self._choose(self.decode(out[0, t:t + 1], t), rng)
            out[0, t + 1] = token
        t2 = time.perf_counter()
        steps = max_new_tokens - 1
        self._stats = {"prompt_tokens": n, "new_tokens": max_new_tokens, "prefill_seconds": t1 - t0,
                       "decode_seconds": t2 - t1, "decode_steps": steps,
                       "prefill_tokens_per_s": n / (t1 - t0) if t1 > t0 else float("inf"),
                       "decode_tokens_per_s": steps / (t2 - t1) if steps and t2 > t1 else 0.0}
        return out

    def stats(self) -> dict:
        """Rates of the last ``generate``: ``prefill_tokens_per_s`` (prompt tokens over the prefill's time, the
        first new token's choice included), ``decode_tokens_per_s`` (decode steps over their time), the counts
        and seconds behind them, and ``compile_seconds``."""
        return dict(self._stats, compile_seconds=self.compile_seconds)


class _Run:
    """One function of a generator's module with its inputs: written in place into the function's placeholders
    when its backend exposes them (``CompiledFunction.placeholders``: then a run copies and allocates nothing on
    the host), else kept here and passed to ``execute``. ``one_row``: the function computes the logits of one
    token of its block (``keep_one_logits_row``)."""

    def __init__(self, compiled, io: DecoderIO, capacity: int, block: int, one_row: bool = False):
        self.compiled, self.io, self.block = compiled, io, block
        self.views = compiled.placeholders()
        names = [nm for nm in (io.input_ids, io.position_ids, CACHE_POSITION, io.attention_mask) if nm]
        shapes = {io.input_ids: (1, block), io.position_ids: (1, block), CACHE_POSITION: (block,),
                  io.attention_mask: (1, capacity)}
        dts = dict(io.dtypes)
        dts.setdefault(CACHE_POSITION, np.dtype(np.int64))
        self.one_row = one_row
        if one_row:
            names.append(LOGITS_POSITION)
            shapes[LOGITS_POSITION] = (1,)
            dts[LOGITS_POSITION] = np.dtype(np.int64)
        self.feed = {nm: self.views[nm] if self.views is not None else np.zeros(shapes[nm], dts[nm])
                     for nm in names}
        self.arange = np.arange(block, dtype=np.int64)
        self.valid = 0

    def reset(self):
        """A new sequence: nothing in the cache is valid."""
        if self.io.attention_mask:
            self.feed[self.io.attention_mask][...] = 0
        self.valid = 0

    def __call__(self, ids: np.ndarray, start: int, row: int | None = None) -> np.ndarray:
        """Run tokens ``ids`` (at most the block; the rest of the block is padding) at positions start..; the
        logits [1, block, vocab] (with ``one_row``: [1, 1, vocab], of token ``row`` of the block, or of the last
        when ``row`` is None). The cache is then valid through slot start + block - 1."""
        io, f = self.io, self.feed
        if self.one_row:
            f[LOGITS_POSITION][0] = self.block - 1 if row is None else row
        f[io.input_ids][0, :ids.shape[0]] = ids
        f[io.input_ids][0, ids.shape[0]:] = 0
        np.add(self.arange, start, out=f[CACHE_POSITION], casting="unsafe")
        if io.position_ids:
            np.add(self.arange, start, out=f[io.position_ids][0], casting="unsafe")
        valid = start + self.block
        if io.attention_mask:
            mask = f[io.attention_mask][0]
            if valid >= self.valid:
                mask[self.valid:valid] = 1
            else:
                mask[valid:] = 0
        self.valid = valid
        if self.views is not None:
            self.compiled.run_placeholders()
            return self.views["logits"]
        return self.compiled.execute(f)["logits"]
