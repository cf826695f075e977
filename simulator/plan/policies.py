"""K policies of speculative decoding: which draft length K a step uses, given its batch.

plain (K = 0, no draft loaded); fixed (K = fixed_k); dsd (K*(B) of the predicted schedule, as exported);
dsd-adaptive (EWMA of per-position rates from observed accepts, K* re-solved over the ITL grid);
per-request (K*(B) capped per sequence by its own EWMA acceptance: K_i = largest k with
a_i^k >= per_request_min_prob, at least 1); cutoff (fixed_k while B <= cutoff_batch_size, else 0).

Each policy is an object: ``choose_k(dec)`` gives (K of the step, per-sequence K or None) for the
decoding sequences ``dec``; the learning ones update their estimates in ``observe(...)`` after
the step's accepts are known. ``k_table()`` is the K by batch size a policy starts from (what CUDA
graphs it needs). The plan floor owns them because they are read off the goodput grid; the
serving loop only drives them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simulator.errors import PlannerError, did_you_mean
from simulator.specs.acceptance import acceptance_length_prefix
from simulator.plan.grid import compute_grid
from simulator.plan.schedule import schedule_k_index
from simulator.specs.scenario import MAX_K, Scenario, per_scenario

POLICIES = ("plain", "fixed", "dsd", "dsd-adaptive", "per-request", "cutoff")


@dataclass(frozen=True)
class PolicySettings:
    """The knobs policies read. The serving EngineConfig has the same attributes and may stand in."""

    fixed_k: int | None = None  # None: the scenario's fixed_k
    cutoff_batch_size: int | None = None  # None: largest B where fixed K beats plain in the predicted table
    adapt_ewma: float = 0.05
    per_request_ewma: float = 0.3
    per_request_min_prob: float = 0.3


def parse_policy(policy: str) -> tuple[str, int | None]:
    """'dsd' -> ('dsd', None); 'fixed:4' -> ('fixed', 4); 'cutoff:64' -> ('cutoff', 64)."""
    text = str(policy).strip()
    name, _, arg = text.partition(":")
    if name not in POLICIES:
        raise PlannerError(f"unknown policy '{text}'{did_you_mean(name, POLICIES)}")
    if arg:
        if name not in ("fixed", "cutoff"):
            raise PlannerError(f"policy '{text}': only fixed:K and cutoff:B take a number")
        if not arg.isdigit() or (name == "fixed" and int(arg) > MAX_K):
            what = f"a K from 0 to {MAX_K}, e.g. fixed:3" if name == "fixed" else "a batch size, e.g. cutoff:64"
            raise PlannerError(f"policy '{text}': give {what}")
        return name, int(arg)
    return name, None


@dataclass
class PolicyTables:
    """K*(B) of the predicted table and the ITL grid the adaptive policies re-solve over."""

    kstar: np.ndarray  # index B = 0..max_seqs
    itl: np.ndarray  # [B, K] (row 0 unused)
    fits: np.ndarray  # [B, K]
    fixed_beats_plain_upto: int


def policy_tables(sc: Scenario, max_seqs: int, k_max: int) -> PolicyTables:
    b = np.arange(1, max_seqs + 1)
    g = compute_grid(sc, batch_sizes=b, ks=np.arange(k_max + 1))
    # The grid's memory check assumes every sequence at the scenario's context_len; in serving the
    # KV block budget is the memory limit, so every K is allowed. K* is the schedule the engine is
    # given (the fewest-range schedule within the tolerance, on the band's robust score when the
    # scenario has one: plan.schedule), not the raw per-batch argmax.
    every_k = np.ones(g.goodput_per_seq.shape, dtype=bool)
    kstar = np.concatenate([[0], g.ks[g.schedule_within(every_k)]])
    itl = np.vstack([np.full(k_max + 1, np.inf), g.itl_s])
    fits = np.ones_like(itl, dtype=bool)
    fk = min(sc.fixed_k, k_max)
    wins = g.goodput_per_seq[:, fk] >= g.goodput_per_seq[:, 0]
    upto = int(b[wins].max()) if wins.any() and wins[0] else 0
    if wins.any() and not wins.all():
        upto = int(b[np.argmin(wins)] - 1)  # first B where fixed K stops winning
    elif wins.all():
        upto = int(max_seqs)
    return PolicyTables(kstar, itl, fits, upto)


_TABLES: dict = {}  # the last few K* tables (specs.scenario.per_scenario)
_TABLE_SLOTS = 16


def shared_policy_tables(sc: Scenario, max_seqs: int, k_max: int) -> PolicyTables:
    """:func:`policy_tables`, built once per scenario object (and profile) and reused: a load search runs
    the same scenario at several loads and the tables depend on none of them. Policies only read them."""
    return per_scenario(_TABLES, _TABLE_SLOTS, sc, (int(max_seqs), int(k_max)),
                        lambda: policy_tables(sc, max_seqs, k_max))


# --- the policies -------------------------------------------------------------------------------

class Policy:
    """Base: holds the resolved fixed K, the K range the run prices, and (lazily) the K* tables."""

    name = ""
    needs_run_ok = False  # observe() reads run_ok (else the loop passes None: it only builds it when read)
    # choose_k reads the batch size alone and observe learns nothing (the loop may run K = 0 steps as spans)
    k_from_batch_size = False

    def __init__(self, sc: Scenario, max_seqs: int, arg: int | None, settings):
        self.sc, self.max_seqs, self.arg, self.settings = sc, int(max_seqs), arg, settings
        # fixed:K names its K; otherwise [serving] fixed_k, else the scenario's
        self.fixed_k = arg if self.name == "fixed" and arg is not None else (
            settings.fixed_k if settings.fixed_k is not None else sc.fixed_k)
        self.k_max = max(sc.k_max, self.fixed_k)

    @property
    def label(self) -> str:
        return self.name if self.arg is None else f"{self.name}:{self.arg}"

    @property
    def speculative(self) -> bool:
        """Whether a draft is loaded (its weights and KV take memory, K = 0 steps pay DSD overhead)."""
        return True

    @cached_property
    def tables(self) -> PolicyTables:
        return shared_policy_tables(self.sc, self.max_seqs, self.k_max)

    def start(self, n_requests: int) -> None:
        """Reset what the policy learns during a run."""

    def choose_k(self, dec: np.ndarray) -> tuple[int, np.ndarray | None]:
        """(K of the step, per-sequence K or None) for the decoding sequences ``dec`` (non-empty)."""
        raise NotImplementedError

    def observe(self, dec: np.ndarray, k_step: int, k_seq, run_ok: np.ndarray | None, n_acc: np.ndarray) -> None:
        """Accepts of a step with K > 0: n_acc[s] drafts of sequence s accepted; run_ok[s, j] = draft j
        accepted (and all before), None unless the policy sets ``needs_run_ok``."""

    def k_table(self) -> np.ndarray:
        """K for B = 1..max_seqs (the adaptive policies start from dsd's)."""
        return self.tables.kstar[1:].astype(int)


class Plain(Policy):
    name = "plain"
    k_from_batch_size = True

    @property
    def speculative(self) -> bool:
        return False

    def choose_k(self, dec):
        return 0, None

    def k_table(self):
        return np.zeros(self.max_seqs, dtype=int)


class Fixed(Policy):
    name = "fixed"
    k_from_batch_size = True

    def choose_k(self, dec):
        return self.fixed_k, None

    def k_table(self):
        return np.full(self.max_seqs, self.fixed_k, dtype=int)


class Dsd(Policy):
    name = "dsd"
    k_from_batch_size = True

    @cached_property
    def kstar(self) -> list:
        """K*(B) as Python ints (read every step)."""
        return self.tables.kstar.tolist()

    def choose_k(self, dec):
        return int(self.kstar[len(dec)]), None


class Cutoff(Policy):
    name = "cutoff"
    k_from_batch_size = True

    @cached_property
    def cutoff(self) -> int:
        """cutoff:B names it; else [serving] cutoff_batch_size; else where fixed K stops beating plain."""
        if self.arg is not None:
            return self.arg
        if self.settings.cutoff_batch_size is not None:
            return self.settings.cutoff_batch_size
        return self.tables.fixed_beats_plain_upto

    def choose_k(self, dec):
        return (self.fixed_k if len(dec) <= self.cutoff else 0), None

    def k_table(self):
        return np.where(np.arange(1, self.max_seqs + 1) <= self.cutoff, self.fixed_k, 0)


class DsdAdaptive(Dsd):
    """K* re-solved each step from an EWMA of the per-position acceptance rates the run observes."""

    name = "dsd-adaptive"
    needs_run_ok = True
    k_from_batch_size = False  # K follows the acceptance it has observed

    def start(self, n_requests):
        self.rate_hat = self.sc.acceptance.rates_upto(max(self.k_max, 1)).copy()
        self.ks_axis = np.arange(self.k_max + 1)
        self._rows: dict = {}  # B -> its (fits, itl) rows as Python lists

    def choose_k(self, dec):
        # scalar Python over the K + 1 entries: the same operations in the same order as
        # argmax(where(fits, acceptance_length_prefix(rate_hat) / itl, -inf)), at a fraction of the cost
        n_dec = len(dec)
        rows = self._rows.get(n_dec)
        if rows is None:
            t = self.tables
            rows = self._rows[n_dec] = (t.fits[n_dec].tolist(), t.itl[n_dec].tolist())
        fits, itl = rows
        best_i, best = 0, (1.0 / itl[0] if fits[0] else -np.inf)
        prod = total = 0.0
        for i, a in enumerate(self.rate_hat[:self.k_max].tolist(), start=1):
            prod = a if i == 1 else prod * a  # cumprod
            total = prod if i == 1 else total + prod  # cumsum
            if best != best:  # NaN wins (argmax picks the first NaN)
                break
            good = (1.0 + total) / itl[i] if fits[i] else -np.inf
            if good > best or good != good:
                best_i, best = i, good
        return int(self.ks_axis[best_i]), None

    def choose_k_vectorized(self, dec):
        """The reference of choose_k (tests compare them)."""
        n_dec, t = len(dec), self.tables
        al = acceptance_length_prefix(self.rate_hat[:self.k_max])
        good = np.where(t.fits[n_dec], al / t.itl[n_dec], -np.inf)
        return int(self.ks_axis[np.argmax(good)]), None

    def observe(self, dec, k_step, k_seq, run_ok, n_acc):
        # position j is observed for a sequence that drafted it and accepted every draft before it
        k_i = np.full(len(dec), k_step) if k_seq is None else k_seq
        cols = np.arange(k_step)[None, :]
        reached = (n_acc[:, None] >= cols) & (cols < k_i[:, None])
        r_cnt = reached.sum(axis=0)
        seen = r_cnt > 0
        obs = run_ok.sum(axis=0)[seen] / r_cnt[seen]
        rate_hat = self.rate_hat[:k_step]
        rate_hat[seen] += self.settings.adapt_ewma * (obs - rate_hat[seen])


class PerRequest(Dsd):
    """K*(B) capped per sequence by an EWMA of that request's own acceptance."""

    name = "per-request"
    k_from_batch_size = False

    def start(self, n_requests):
        prior = float(np.mean(self.sc.acceptance.rates_upto(max(self.fixed_k, 1))))
        self.acc_ewma = np.full(n_requests, prior)

    def choose_k(self, dec):
        kb = int(self.tables.kstar[len(dec)])
        if kb == 0:
            return 0, None
        a = np.clip(self.acc_ewma[dec], 1e-6, 0.999)
        kk = np.floor(np.log(self.settings.per_request_min_prob) / np.log(a) + 1e-9).astype(np.int64)
        k_seq = np.clip(kk, 1, kb)
        return int(k_seq.max()), k_seq

    def observe(self, dec, k_step, k_seq, run_ok, n_acc):
        trials = np.minimum(n_acc + 1, k_seq)
        self.acc_ewma[dec] += self.settings.per_request_ewma * (n_acc / trials - self.acc_ewma[dec])


_CLASSES = {c.name: c for c in (Plain, Fixed, Dsd, DsdAdaptive, PerRequest, Cutoff)}


def make_policy(sc: Scenario, policy: str, max_seqs: int, settings=None) -> Policy:
    """The policy object for 'dsd', 'fixed:4', ...; ``settings``: PolicySettings or an EngineConfig.

    Cheap: the K* tables are computed on first use.
    """
    name, arg = parse_policy(policy)
    return _CLASSES[name](sc, max_seqs, arg, settings if settings is not None else PolicySettings())


def policy_k_table(sc: Scenario, policy: str, max_seqs: int, settings=None) -> np.ndarray:
    """K for B = 1..max_seqs of a table policy (plain, fixed, dsd, cutoff); adaptive ones start from dsd's."""
    return make_policy(sc, policy, max_seqs, settings).k_table()
