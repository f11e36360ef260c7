"""DTDR-L: one linear layer over frozen sentence embeddings of the query and the call history.

DTDR paper, Section 4, Appendix C (Eq. 2) and Algorithms 5-6. Static LR (TinyAgent) is the same
layer over the query alone, trained once per query.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Literal

import numpy as np

from dtdr_agents.foundation.checks import check_number, check_probability
from dtdr_agents.foundation.encoders import Encoder, TokenLimited, VocabularyCheck, token_limit
from dtdr_agents.foundation.errors import ModelArrayError, ModelLoadError
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Toolset
from dtdr_agents.retrievers.base import (
    Scores,
    ToolRetriever,
    check_quantile,
    check_threshold,
    softmax,
)

HistoryMode = Literal["text", "structured", "none"]

MAX_HISTORY_LENGTH = 10_000
"""Largest `history_length` (a structured feature row grows with it)."""


def _recent(history: Sequence[str], length: int | None) -> list[str]:
    return list(history if length is None else history[-length:] if length > 0 else [])


def history_text(query: str, history: Sequence[str], length: int | None = None) -> str:
    """The string DTDR-L embeds at a step: the query, then the calls so far in order."""
    calls = _recent(history, length)
    return f"{query}\nCalls so far: {' -> '.join(calls)}" if calls else query


TOKEN_MARGIN = 2
"""Tokens kept free when fitting a text into the encoder's budget (tokenizer merges)."""


def history_texts(
    queries: Sequence[str],
    histories: Sequence[Sequence[str]],
    length: int | None = None,
    limit: TokenLimited | None = None,
) -> list[str]:
    """`history_text` of each step, fitted into the encoder's token budget.

    An encoder reads only its first `limit.max_tokens` tokens, so a long request would push
    the calls (at the end of the text) out of what the model sees. When a text is too long,
    the most recent calls are kept first (the oldest are dropped, the history taking at most
    what the request leaves, and at least half the budget) and the request is cut at the
    end to fill the rest. Texts that fit are unchanged.
    """
    texts = [history_text(q, h, length) for q, h in zip(queries, histories, strict=True)]
    if limit is None:
        return texts
    budget = limit.max_tokens
    over = [i for i, n in enumerate(limit.token_counts(texts)) if n > budget]
    if not over:
        return texts
    budget = max(1, budget - TOKEN_MARGIN)
    head, sep = limit.token_counts(["Calls so far:", "->"])
    names = sorted({c for i in over for c in _recent(histories[i], length)})
    name_tokens = dict(zip(names, limit.token_counts(names), strict=True))
    unique = sorted({queries[i] for i in over})
    query_tokens = dict(zip(unique, limit.token_counts(unique), strict=True))
    for i in over:
        calls = _recent(histories[i], length)
        if not calls:
            continue  # the request alone: the encoder's own truncation keeps its start
        room = max(budget - query_tokens[queries[i]], budget // 2)
        used, kept = head, list[str]()
        for name in reversed(calls):
            cost = name_tokens[name] + (sep if kept else 0)
            if kept and used + cost > room:
                break
            kept.append(name)
            used += cost
        query = limit.truncate_tokens(queries[i], budget - used)
        texts[i] = f"{query}\nCalls so far: {' -> '.join(reversed(kept))}"
    return texts


def init_linear(n_in: int, n_out: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's default `nn.Linear` initialisation (uniform +-1/sqrt(n_in)), seeded."""
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(n_in)
    weight = rng.uniform(-bound, bound, size=(n_out, n_in)).astype(np.float32)
    bias = rng.uniform(-bound, bound, size=n_out).astype(np.float32)
    return weight, bias


def train_linear(
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    lr_decay: float,
    weight_decay: float,
    batch_size: int,
    seed: int,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray]:
    """Train one linear layer with the summed binary cross-entropy of DTDR Eq. 2.

    The loss of a sample is the sum of its |labels| binary cross-entropy terms; a mini-batch
    averages its samples. Optimiser: Adam with L2 weight decay (PyTorch's `Adam` semantics),
    learning rate multiplied by `lr_decay` after every epoch. The update is torch's fused
    Adam, applied to one cache-sized block of labels at a time (`block_rows`; the same weights
    as all at once), so per-sample updates (batch size 1, Algorithm 5) stay fast on large
    catalogues. The blocks are trained side by side on `fit_workers` threads; each block's
    arithmetic does not depend on the number of threads, so the result is seeded and
    deterministic either way.

    Returns:
        (weight (n_out, n_in), bias (n_out,)) as float32.
    """
    if len(x) == 0:
        raise ValueError("no training samples")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.float32)
    n_in, n_out = x.shape[1], y.shape[1]
    w, b = init if init is not None else init_linear(n_in, n_out, seed)
    w, b = w.astype(np.float32, copy=True), b.astype(np.float32, copy=True)
    import torch

    rng = np.random.default_rng(seed + 1)
    orders = [rng.permutation(len(x)) for _ in range(epochs)]  # the same for every block
    xt = torch.from_numpy(x)
    rows = block_rows(n_in)
    blocks = [(start, min(start + rows, n_out)) for start in range(0, n_out, rows)]
    halt = threading.Event()

    def train_block(block: tuple[int, int]) -> None:
        start, stop = block
        _adam_epochs(
            xt,
            torch.from_numpy(np.ascontiguousarray(y[:, start:stop])),
            torch.from_numpy(w[start:stop]),  # views: updated in place
            torch.from_numpy(b[start:stop]),
            orders,
            batch_size,
            lr_decay,
            stop=halt,
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
        )

    # One torch thread per kernel: the kernels are small, and torch's intra-op threads
    # spin-wait for each other, so with any other load on the cores two threads were measured
    # 100x slower per step. The blocks are independent (see `block_rows`), so they are trained
    # side by side instead, one block per worker thread with no barrier between them (torch
    # releases the GIL inside its kernels); each block's arithmetic is the same as alone.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        workers = min(len(blocks), fit_workers())
        if workers <= 1:
            for block in blocks:
                train_block(block)
        else:
            pool = ThreadPoolExecutor(workers, thread_name_prefix="dtdr-l-fit")
            try:
                list(pool.map(train_block, blocks))  # list(): re-raises a worker's error
            except BaseException:
                halt.set()  # an error or Ctrl-C: the other blocks end at their next epoch
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
    finally:
        torch.set_num_threads(threads)
    return w, b


FIT_THREADS_ENV = "DTDR_AGENTS_FIT_THREADS"
"""Environment variable capping `fit_workers` (e.g. 1 on a machine shared with other jobs)."""


def fit_workers() -> int:
    """Threads `train_linear` trains label blocks on.

    The CPUs this process may run on, or `FIT_THREADS_ENV` when set (a positive integer).

    Raises:
        ValueError: `FIT_THREADS_ENV` is set but not a positive integer.
    """
    value = os.environ.get(FIT_THREADS_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{FIT_THREADS_ENV} must be a positive integer, got {value!r}")
        return int(value)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


BLOCK_BYTES = 1 << 21
"""Bytes of one block of weight rows trained at a time (see `block_rows`)."""


def block_rows(n_in: int) -> int:
    """Output rows trained together: a block's weights, gradient and Adam moments stay in cache.

    The summed binary cross-entropy is separate per label and Adam updates each weight from
    its own gradients only, so training the labels block by block, over the same sample order,
    computes the same weights as training them all at once; per-sample updates then stop being
    bound by memory bandwidth on large catalogues.
    """
    return max(1, BLOCK_BYTES // (4 * n_in))


def _adam_epochs(
    xt: Any,
    yt: Any,
    weight: Any,
    bias: Any,
    orders: list[np.ndarray],
    batch_size: int,
    lr_decay: float,
    *,
    stop: threading.Event | None = None,
    **adam: Any,
) -> None:
    """The training loop of `train_linear` for one block of labels (updated in place).

    Returns early, leaving the block part-trained, once `stop` is set (checked every epoch).
    """
    import torch

    opt = _adam([weight, bias], **adam)
    weight.grad, bias.grad = torch.empty_like(weight), torch.empty_like(bias)  # reused
    logits = torch.empty((min(batch_size, len(xt)), len(bias)))  # reused
    with torch.no_grad():
        for perm in orders:
            if stop is not None and stop.is_set():
                return
            for start in range(0, len(perm), batch_size):
                idx = torch.from_numpy(perm[start : start + batch_size])
                xb, yb = xt[idx], yt[idx]
                gz = torch.addmm(bias, xb, weight.T, out=logits[: len(xb)])
                gz.sigmoid_().sub_(yb).div_(len(xb))  # d(mean of summed BCE)/d(logits)
                torch.mm(gz.T, xb, out=weight.grad)
                torch.sum(gz, dim=0, out=bias.grad)
                opt.step()
            for group in opt.param_groups:
                group["lr"] *= lr_decay


def _adam(params: list[Any], **kwargs: Any) -> Any:
    """`torch.optim.Adam`, fused into one kernel per step where this torch supports it.

    The fused and the reference implementations compute the same update (PyTorch's Adam with
    L2 weight decay); fusing avoids a dozen passes over the weights per sample, which is what
    made per-sample updates slow on large catalogues.
    """
    import torch

    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # older torch: no fused CPU Adam
        return torch.optim.Adam(params, foreach=False, **kwargs)


class DTDRL(ToolRetriever):
    """Dynamic Tool Dependency Retrieval, linear variant (DTDR-L).

    Args:
        history: How the call history enters the classifier. "text" (the paper): the
            embedding of the query concatenated with the call names, encoded at every step.
            "structured": the query embedding (encoded once per query) joined with
            order-aware features of the calls (the description embeddings of the last
            `history_length` calls and the mean of all calls), so steps after the first need no
            encoder call. "none": the query only.
        history_length: Calls used ("text": None = all; "structured": positions, default 3).
        epochs: Training epochs (paper: 10).
        lr: Adam learning rate. None: the paper's 1e-3 for "text" and "none"; 1e-2 for
            "structured" (measured on the demo data: it matches per-sample updates' accuracy
            with mini-batches).
        lr_decay: Learning-rate decay per epoch (paper: 0.9).
        weight_decay: Adam weight decay (paper: 1e-5).
        batch_size: Samples per update. None: 1 for "text" and "none" (Algorithm 5 updates
            the classifier at every step), 32 for "structured".
        encoder: Encoder spec or object (see `get_encoder`).
        ood_quantile: Fall back to all tools when the classifier input's Mahalanobis distance
            exceeds this quantile of held-out demonstrations; None disables it.
        min_confidence: Also fall back when the top probability is below this; None disables.
        prior_weight: Weight of the query-similarity prior for tools added after fit.
        seed: Seed of initialisation and shuffling.
    """

    retriever_id: ClassVar[str] = "dtdr-l"
    bench_default: ClassVar[bool] = True
    variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {"dtdr-l-s": {"history": "structured"}}
    """`dtdr-l-s`: the query is encoded once and the history represented structurally."""
    bench_variants: ClassVar[tuple[str, ...]] = ("dtdr-l-s",)
    per_query_targets: ClassVar[bool] = False

    history: HistoryMode = "text"
    history_length: int | None = None
    epochs: int = 10
    lr: float | None = None
    lr_decay: float = 0.9
    weight_decay: float = 1e-05
    batch_size: int | None = None
    encoder: str | Encoder | None = "default"
    ood_quantile: float | None = 0.99
    min_confidence: float | None = None
    prior_weight: float = 0.1
    seed: int = 0

    # ------------------------------------------------------------------------------ features
    @property
    def _positions(self) -> int:
        return 3 if self.history_length is None else self.history_length

    def _structured(self, qvecs: np.ndarray, histories: Sequence[Sequence[str]]) -> np.ndarray:
        """[query | last call | 2nd last | ... | mean of calls | empty flags | length]."""
        dim = qvecs.shape[1]
        p = self._positions
        feats = np.zeros((len(histories), dim * (p + 2) + p + 1), dtype=np.float32)
        feats[:, :dim] = qvecs
        zero = np.zeros(dim, dtype=np.float32)
        for row, hist in enumerate(histories):
            vecs = [v if (v := self.tool_embedding(h)) is not None else zero for h in hist]
            for pos in range(p):
                if pos < len(vecs):
                    feats[row, dim * (pos + 1) : dim * (pos + 2)] = vecs[-1 - pos]
                else:
                    feats[row, dim * (p + 2) + pos] = 1.0
            if vecs:
                feats[row, dim * (p + 1) : dim * (p + 2)] = np.mean(vecs, axis=0)
            feats[row, -1] = np.log1p(len(hist))
        return feats

    def _features(self, queries: Sequence[str], histories: Sequence[Sequence[str]]) -> np.ndarray:
        assert self.encoder_ is not None
        if self.history == "text":
            texts = history_texts(
                queries, histories, self.history_length, token_limit(self.encoder_)
            )
            return self.encoder_.encode(texts)
        qvecs = self.encoder_.encode(list(queries))
        if self.history == "none":
            return qvecs
        return self._structured(qvecs, histories)

    def _training_set(
        self, demos: list[Demonstration]
    ) -> tuple[list[str], list[tuple[str, ...]], np.ndarray]:
        queries: list[str] = []
        histories: list[tuple[str, ...]] = []
        rows: list[list[int]] = []
        for demo in demos:
            if self.per_query_targets:
                queries.append(demo.query)
                histories.append(())
                rows.append([self._label_index[c] for c in {*demo.calls, END_OF_PLAN}])
                continue
            for step in demo.steps():
                queries.append(demo.query)
                histories.append(step.history)
                rows.append([self._label_index[c] for c in step.acceptable])
        y = np.zeros((len(rows), len(self.labels_)), dtype=np.float32)
        for i, cols in enumerate(rows):
            y[i, cols] = 1.0
        return queries, histories, y

    # ------------------------------------------------------------------------------ fitting
    def _check_params(self) -> None:
        super()._check_params()
        if self.history not in ("text", "structured", "none"):
            raise ValueError(
                f"history must be 'text', 'structured' or 'none', got {self.history!r}"
            )
        check_number(
            self.history_length,
            "history_length",
            low=0,
            high=MAX_HISTORY_LENGTH,
            integer=True,
            optional=True,
        )
        check_number(self.epochs, "epochs", low=1, integer=True)
        check_number(self.lr, "lr", low=0.0, low_open=True, optional=True)
        check_number(self.lr_decay, "lr_decay", low=0.0, high=1.0, low_open=True)
        check_number(self.weight_decay, "weight_decay", low=0.0)
        check_number(self.batch_size, "batch_size", low=1, integer=True, optional=True)
        check_quantile(self.ood_quantile)
        check_probability(self.min_confidence, "min_confidence", optional=True)

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        structured = self.history == "structured"
        batch_size = self.batch_size if self.batch_size is not None else (32 if structured else 1)
        lr = self.lr if self.lr is not None else (1e-2 if structured else 1e-3)
        queries, histories, y = self._training_set(demos)
        x = self._features(queries, histories)
        self.weight_, self.bias_ = train_linear(
            x,
            y,
            epochs=self.epochs,
            lr=lr,
            lr_decay=self.lr_decay,
            weight_decay=self.weight_decay,
            batch_size=batch_size,
            seed=self.seed,
        )
        # The request decides whether we are out of distribution: statistics of query embeddings.
        assert self.encoder_ is not None
        self._fit_ood(self.encoder_.encode(list(dict.fromkeys(d.query for d in demos))))
        self.vocab_check_ = VocabularyCheck.for_encoder(
            self.encoder_, [d.query for d in demos], [t.text() for t in tools], self.ood_quantile
        )

    def _fit_ood(self, feats: np.ndarray) -> None:
        """Mahalanobis OOD detector: covariance on 80% of inputs, threshold on the other 20%."""
        self.ood_mean_: np.ndarray | None = None
        self.ood_precision_: np.ndarray | None = None
        self.ood_threshold_: float | None = None
        feats = np.unique(feats.astype(np.float64), axis=0)
        if self.ood_quantile is None or len(feats) < 10:
            return
        from sklearn.covariance import LedoitWolf

        rng = np.random.default_rng(self.seed)
        perm = rng.permutation(len(feats))
        cut = max(1, int(0.8 * len(feats)))
        fit_part, held = feats[perm[:cut]], feats[perm[cut:]]
        lw = LedoitWolf().fit(fit_part)
        self.ood_mean_ = lw.location_
        self.ood_precision_ = lw.precision_
        self.ood_threshold_ = float(np.quantile(self._mahalanobis(held), self.ood_quantile))

    def _mahalanobis(self, feats: np.ndarray) -> np.ndarray:
        assert self.ood_mean_ is not None and self.ood_precision_ is not None
        d = np.atleast_2d(feats) - self.ood_mean_
        out: np.ndarray = np.sqrt(
            np.maximum(np.einsum("ij,jk,ik->i", d, self.ood_precision_, d), 0.0)
        )
        return out

    def _ood_reason(self, query: str) -> str | None:
        vocab_check: VocabularyCheck | None = getattr(self, "vocab_check_", None)
        if vocab_check is not None and (reason := vocab_check.reason(self.encoder_, query)):
            return reason
        if self.ood_threshold_ is None:
            return None
        dist = float(self._mahalanobis(self._query_vector(query))[0])
        if dist <= self.ood_threshold_:
            return None
        return (
            f"the request's Mahalanobis distance {dist:.1f} is beyond the "
            f"{self.ood_quantile:.0%} quantile of held-out demonstrations "
            f"({self.ood_threshold_:.1f})"
        )

    # ------------------------------------------------------------------------------ scoring
    def warm(self, steps: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Encode the requests, and with ``history="text"`` every step's text, in batches."""
        super().warm(steps)
        if self.encoder_ is not None and self.history == "text" and steps:
            queries = [q for q, _ in steps]
            histories = [tuple(h) if self.uses_history else () for _, h in steps]
            texts = history_texts(
                queries, histories, self.history_length, token_limit(self.encoder_)
            )
            self.encoder_.encode(list(dict.fromkeys(texts)))

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        x = self._features([query], [history if self.uses_history else ()])[0]
        logits = self.weight_ @ x + self.bias_
        probs = softmax(logits)
        ood = self._memo(query, "ood", self._ood_reason)
        if self.min_confidence is not None and probs.max() < self.min_confidence:
            ood = f"top probability {probs.max():.3f} is below min_confidence {self.min_confidence}"

        def why(i: int) -> str:
            return f"logit={float(logits[i]):+.2f}"

        return Scores(probs, {"input": self.history}, ood, tool_why=why)

    # -------------------------------------------------------------------------- persistence
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays = {"weight": self.weight_, "bias": self.bias_}
        if self.ood_mean_ is not None and self.ood_precision_ is not None:
            arrays["ood_mean"] = self.ood_mean_
            arrays["ood_precision"] = self.ood_precision_
        vocab = None if self.vocab_check_ is None else self.vocab_check_.threshold
        return {"ood_threshold": self.ood_threshold_, "vocab_threshold": vocab}, arrays

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        try:
            self.weight_ = np.asarray(arrays["weight"], dtype=np.float32)
            self.bias_ = np.asarray(arrays["bias"], dtype=np.float32)
            thr = state["ood_threshold"]
        except KeyError as exc:
            raise ModelLoadError(f"corrupt DTDR-L state: missing {exc}") from exc
        if self.weight_.ndim != 2 or self.weight_.shape[0] != len(self.labels_):
            raise ModelArrayError("weight", "does not match the catalogue (one row per label)")
        if self.bias_.shape != (len(self.labels_),):
            raise ModelArrayError("bias", f"must have shape ({len(self.labels_)},)")
        self.ood_threshold_ = None if thr is None else float(thr)
        vocab = state.get("vocab_threshold")
        self.vocab_check_ = None if vocab is None else VocabularyCheck(float(vocab))
        self.ood_mean_ = np.asarray(arrays["ood_mean"]) if "ood_mean" in arrays else None
        self.ood_precision_ = (
            np.asarray(arrays["ood_precision"]) if "ood_precision" in arrays else None
        )
        if self.ood_threshold_ is not None and self.ood_mean_ is None:
            raise ModelLoadError("corrupt DTDR-L state: OOD threshold without its statistics")
        self._check_state(thr, vocab)

    def _check_state(self, thr: Any, vocab: Any) -> None:
        """Saved shapes and ranges match the parameters (for `_set_state`)."""
        check_threshold(thr, "ood_threshold", upper=None)
        check_threshold(vocab, "vocab_threshold", upper=1.0)
        if self.history not in ("text", "structured", "none") or not (
            self.history_length is None
            or (
                isinstance(self.history_length, int)
                and 0 <= self.history_length <= MAX_HISTORY_LENGTH
            )
        ):
            raise ModelLoadError("corrupt DTDR-L state: bad 'history' or 'history_length'")
        dim = self.encoder_.dim if self.encoder_ is not None else self.weight_.shape[-1]
        p = self._positions
        n_in = dim * (p + 2) + p + 1 if self.history == "structured" else dim
        if self.weight_.shape != (len(self.labels_), n_in):
            raise ModelArrayError(
                "weight", f"has shape {self.weight_.shape}, not ({len(self.labels_)}, {n_in})"
            )
        if self.ood_mean_ is not None and self.ood_mean_.shape != (dim,):
            raise ModelArrayError("ood_mean", "does not match the encoder")
        if self.ood_mean_ is not None:
            _check_precision(self.ood_precision_, dim)


def _check_precision(precision: np.ndarray | None, dim: int) -> None:
    """The OOD precision matrix is (dim, dim), symmetric and positive semi-definite.

    Otherwise a distance could come out negative, and every request would look in
    distribution.
    """
    if precision is None or precision.shape != (dim, dim):
        raise ModelArrayError("ood_precision", f"must be a ({dim}, {dim}) matrix")
    scale = float(np.abs(precision).max(initial=0.0)) or 1.0
    if not np.allclose(precision, precision.T, rtol=1e-5, atol=1e-8 * scale):
        raise ModelArrayError("ood_precision", "must be symmetric")
    lowest = float(np.linalg.eigvalsh(precision.astype(np.float64)).min(initial=0.0))
    if lowest < -1e-6 * scale:
        raise ModelArrayError(
            "ood_precision", f"must be positive semi-definite (an eigenvalue is {lowest:.3g})"
        )


class StaticLR(DTDRL):
    """Static Learned Retriever (TinyAgent): a linear layer over the query embedding only.

    Trained once per query to predict every tool of the plan (and end-of-plan); it ranks once
    per query, so the history does not change its output.
    """

    retriever_id: ClassVar[str] = "lr"
    bench_default: ClassVar[bool] = True
    uses_history: ClassVar[bool] = False
    predicts_end: ClassVar[bool] = False
    per_query_targets: ClassVar[bool] = True

    history: HistoryMode = "none"
