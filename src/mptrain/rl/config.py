"""Settings of a reinforcement-learning run: one frozen, validated dataclass.

It also carries the few fields the shared launch and report code reads from any run's
settings (``strategy``, ``workers``, ``threads_per_worker``, ``start_method``, ``device``,
``sharing_strategy``, ``worker_timeout``, ``checkpoint_every``, ``max_restarts``,
``units``/``unit``, ``target_accuracy``, ``quiet``, ``as_dict``), so the layout, supervisor,
restarts, progress board, recorder and checkpoint keeper serve RL runs unchanged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from ..config import (MAX_SEED, MAX_WORKER_TIMEOUT_S, PER_INVOCATION, START_METHODS,
                      check_choice, check_kind, check_number, check_positive_ints,
                      refuse_unknown)
from ..errors import UserError, did_you_mean, setting_name
from ..strategies.registry import ALGOS, strategy_class


@dataclass(frozen=True)
class RLConfig:
    env: str = "CartPole-v1"
    algo: str = ALGOS[0]
    workers: int = 2
    steps: int = 200_000          # environment steps in total, over all actors
    round_steps: int = 10_000     # environment steps per round (a metrics row, a checkpoint)
    seed: int = 0
    lr: float | None = None       # None: the algorithm's (``default_lr`` of its strategy)
    gamma: float | None = None    # None: the algorithm's (``ALGO_DEFAULTS``), as below
    hidden: int | None = None     # None: the algorithm's (``default_hidden`` of its strategy)
    net: str | None = None        # module:make(obs_dim, n_actions)
    # Greedy evaluations: every eval_every rounds and at the end, eval_episodes episodes
    # each; the best one's policy is kept (``best``). The defaults cost at most 5% of a
    # CartPole run's environment steps: ``evaluation_share``.
    eval_episodes: int = 2
    eval_every: int | None = 2    # rounds; 0 (or None): only at the end
    # a policy that would be kept as the best first plays this many episodes more, and is
    # kept on the mean of all its episodes (``rl.base.GreedyEvaluation``): two episodes are
    # a small sample. dqn 20 (worst case 0.8% of a CartPole run's time), a3c and ppo 0:
    # they train 7-11 times faster a step, where confirming would cost 8-10%
    # (``benchmarks/rl_eval_cost.py``, docs/rl.md)
    confirm_episodes: int | None = None
    target_return: float | None = None   # stop at the first evaluation that reaches it
    keep: str = "best"            # the policy model.pt and fit() hand back: "best" or "final"
    # -- a3c and ppo -------------------------------------------------------------------------
    n_steps: int | None = None    # rollout length (per environment) per update
    gae_lambda: float | None = None   # a3c 1: plain n-step advantages, as in the A3C paper
    entropy_coef: float | None = None
    value_coef: float = 0.5
    max_grad_norm: float | None = None
    # -- ppo ---------------------------------------------------------------------------------
    envs_per_actor: int = 8       # environments in each actor's gymnasium.vector env (ppo)
    update_epochs: int | None = None   # passes over a rollout batch per update
    clip_coef: float = 0.2        # the surrogate's clip range: ratios within 1 +- clip_coef
    clip_value: bool = False      # clip the value loss too (CleanRL's clip_vloss)
    normalize_advantages: bool = True   # per minibatch, as CleanRL and stable-baselines3
    anneal_lr: bool | None = None       # learning rate falls linearly to 0 over --steps
    target_kl: float | None = None      # stop an update's epochs once approx KL exceeds it
    # -- dqn (and ppo's minibatch) -----------------------------------------------------------
    buffer_size: int = 100_000
    batch_size: int | None = None  # transitions per gradient step
    learning_starts: int = 1_000
    train_every: int = 2          # environment steps (all actors) per learner update
    # rl-baselines3-zoo's tuned DQN for CartPole-v1 (its train_freq 256 / gradient_steps 128
    # are policy_every / train_every here; its target update every 10 env steps between
    # bursts of 128 updates is a copy per 128 updates), measured in docs/rl.md, but with a
    # copy every 512 updates, 3-step returns and the learning rate annealed: what held
    # CartPole once solved (docs/rl.md, "Holding what dqn learned").
    target_every: int = 512       # learner updates between target-network updates
    # each target update: target <- tau * online + (1 - tau) * target; 1 is a copy,
    # stable-baselines3's ``tau`` (its Polyak averaging: a small tau, every update)
    target_tau: float = 1.0
    # n-step returns: rewards summed before the target bootstraps (Rainbow's 3); 1 is
    # one-step DQN. ``rl/dqn_targets.py``
    return_steps: int = 3
    # advantage learning's alpha (Bellemare et al. 2016): a non-greedy action's target is
    # lowered by alpha times its gap to the greedy one; 0 is plain (double) DQN
    advantage_learning: float = 0.0
    # a dueling head (Wang et al. 2016) on the built-in network: Q = V + A - mean(A);
    # ``nets.DuelingQNetwork``. Not with ``net``, a network of the user's own.
    dueling: bool = False
    policy_every: int = 256       # environment steps between renewals of the actors' network
    eps_start: float = 1.0
    eps_end: float = 0.04
    eps_steps: int = 8_000
    # -- processes ---------------------------------------------------------------------------
    threads_per_worker: int | None = 1   # small networks: more threads only add overhead
    start_method: str | None = None
    worker_timeout: float = 300.0
    checkpoint_every: int | None = None  # rounds
    max_restarts: int = 0
    quiet: bool = False
    overwrite: bool = False              # replace another run's outputs in --out
    # -- where a resumed run takes up its rounds (not settings: ``resumed_at``) -------------
    resumed_round: int = 0        # rounds done when the run was last resumed ...
    resumed_step: int = 0         # ... and the environment steps they held

    device = "cpu"              # class attributes: what the shared launch code asks
    sharing_strategy = "auto"
    target_accuracy = None
    unit = "round"

    def __post_init__(self):
        check_rl_setting("algo", self.algo)
        for name, value in algo_defaults(self.algo).items():
            if getattr(self, name) is None:   # frozen: filled in once, here
                object.__setattr__(self, name, value)
        for name in rl_setting_names():
            check_rl_setting(name, getattr(self, name))
        if self.round_steps < self.workers:
            raise UserError(f"{setting_name('round_steps')} must be at least "
                            f"{setting_name('workers')} (steps per actor)")
        strategy_class(self.algo).check_config(self)   # what only one algorithm needs

    @property
    def strategy(self) -> str:
        return self.algo

    @property
    def units(self) -> int:
        """Rounds in the run: those done when it was resumed, then rounds of
        ``round_steps`` up to ``steps`` (the last one shorter)."""
        return self.resumed_round + math.ceil(max(0, self.steps - self.resumed_step)
                                              / self.round_steps)

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else strategy_class(self.algo).default_lr

    @property
    def network_width(self) -> int:
        """Width of the built-in network's hidden layers."""
        return self.hidden if self.hidden is not None else \
            strategy_class(self.algo).default_hidden

    def round_end(self, index: int) -> int:
        """Total environment steps at the end of round ``index`` (0-based)."""
        return round_end({name: getattr(self, name) for name in
                          ("steps", "round_steps", "resumed_round", "resumed_step")}, index)

    def round_size(self, index: int) -> int:
        """Environment steps in round ``index``, over all actors."""
        return self.round_end(index) - (self.round_end(index - 1) if index else 0)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict, resumed_at: tuple[int, int] | None = None
                  ) -> "RLConfig":
        """The config of ``values`` (``None``: not said; an ``as_dict()`` too); an unknown
        name is refused in one line listing the known ones -- a silently ignored typo would
        run the defaults. ``resumed_at``: the rounds and steps a resumed run starts from
        (:func:`resumed_at`; None: those in ``values``, if any)."""
        said = {k: v for k, v in values.items() if v is not None}
        held = tuple(said.pop(name, 0) for name in ("resumed_round", "resumed_step"))
        refuse_unknown(said, rl_setting_names())
        refuse_unused(said)
        refuse_built_in_with_own_net(said)
        start = held if resumed_at is None else resumed_at
        return cls(**said, resumed_round=start[0], resumed_step=start[1])


def round_end(config: dict, index: int) -> int:
    """Total environment steps at the end of round ``index`` (0-based) of the run whose
    settings are ``config`` (an ``RLConfig.as_dict()``, a checkpoint's): rounds of
    ``round_steps`` from where it was last resumed (the start: 0 rounds, 0 steps) up to
    ``steps``. A run resumed after a short last round (a 6,000-step run in rounds of 10,000,
    resumed to 9,000) goes on from the steps that round held, not from a multiple of
    ``round_steps``; the rounds before its resume are not asked for again."""
    rounds, steps = config.get("resumed_round", 0), config.get("resumed_step", 0)
    if index + 1 <= rounds:
        return steps if index + 1 == rounds else min(steps, (index + 1) * config["round_steps"])
    return min(config["steps"], steps + (index + 1 - rounds) * config["round_steps"])


def resumed_at(checkpoint) -> tuple[int, int]:
    """The rounds a checkpoint's run had done and the environment steps they held: where
    a run resumed from it takes up its rounds."""
    if checkpoint is None or checkpoint.epoch == 0:
        return (0, 0)
    counts = {"resumed_round": 0, "resumed_step": 0, **{
        k: v for k, v in checkpoint.config.items()
        if k in ("steps", "round_steps", "resumed_round", "resumed_step")}}
    # Read from the file before its settings are checked: a damaged count is said here.
    if len(counts) != 4 or counts["round_steps"] == 0 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for v in counts.values()):
        raise UserError(f"{checkpoint.source or 'the checkpoint'} is damaged (its steps and "
                        "rounds are not counts); use another checkpoint")
    return (checkpoint.epoch, round_end(counts, checkpoint.epoch - 1))


#: What ``keep`` may name: the policy of the best evaluation, or the last one.
KEEP_CHOICES = ("best", "final")


def evaluation_share(config, longest_episode: int) -> float:
    """The most the periodic evaluations cost, in environment steps, as a share of the
    training steps between them: ``eval_episodes`` episodes of at most ``longest_episode``
    steps every ``eval_every`` rounds of ``round_steps``. The defaults on CartPole-v1
    (episodes of at most 500 steps): 2 x 500 = 1,000 steps per 2 x 10,000 = 20,000, 5%; a
    100,000-step dqn run evaluates 5 times (at 20k, 40k, ..., 100k: 5,000 steps, 5%). An
    evaluation step costs less time than a training step (no learning, one forward pass for
    all the episodes side by side), so the share of the time is smaller still."""
    if not config.eval_every:
        return 0.0
    return config.eval_episodes * longest_episode / (config.eval_every * config.round_steps)


#: Settings whose default depends on the algorithm: name -> (the default, {algo: its own}).
#: a3c's and dqn's are what they always were; ppo's are discussed in docs/rl.md ("ppo").
ALGO_DEFAULTS = {
    "gamma": (0.99, {}),
    "n_steps": (20, {"ppo": 32}),
    "gae_lambda": (1.0, {"ppo": 0.95}),
    "entropy_coef": (0.01, {"ppo": 0.0}),
    "max_grad_norm": (40.0, {"ppo": 0.5}),
    "update_epochs": (None, {"ppo": 10}),
    "anneal_lr": (None, {"ppo": True, "dqn": True}),
    "batch_size": (64, {"ppo": 256}),
    "confirm_episodes": (20, {"a3c": 0, "ppo": 0}),
}


#: Settings only some algorithms read: name -> those algorithms.
ALGO_SETTINGS = {
    **dict.fromkeys(("n_steps", "gae_lambda", "entropy_coef", "value_coef", "max_grad_norm"),
                    ("a3c", "ppo")),
    **dict.fromkeys(("envs_per_actor", "update_epochs", "clip_coef", "clip_value",
                     "normalize_advantages", "target_kl"), ("ppo",)),
    "anneal_lr": ("dqn", "ppo"),
    "batch_size": ("dqn", "ppo"),
    **dict.fromkeys(("buffer_size", "learning_starts", "train_every", "target_every",
                     "target_tau", "return_steps", "advantage_learning", "dueling",
                     "policy_every", "eps_start", "eps_end", "eps_steps"), ("dqn",)),
}


def refuse_unused(said: dict) -> None:
    """Refuse a setting the chosen algorithm never reads (``--buffer-size`` with a3c), as
    ``mptrain run`` refuses a strategy's: ignored, it would run the defaults unsaid. A value
    equal to what the algorithm would take anyway passes, as there (a resumed run hands on
    only its algorithm's settings: :func:`applicable_rl_settings`)."""
    algo = said.get("algo", RLConfig.algo)
    check_rl_setting("algo", algo)
    defaults = {**{f.name: f.default for f in fields(RLConfig)}, **algo_defaults(algo)}
    for name, users in ALGO_SETTINGS.items():
        if name in said and algo not in users and said[name] != defaults[name]:
            raise UserError(f"{setting_name(name)} does nothing with {setting_name('algo')} "
                            f"{algo}; it is a setting of {setting_name('algo')} "
                            f"{' or '.join(users)}")


def refuse_built_in_with_own_net(said: dict) -> None:
    """Refuse what shapes mptrain's own network -- its width (``hidden``), a dueling head --
    asked for on the user's (``net``), which is built as its maker says: it was ignored.
    The width the algorithm takes anyway passes, as :func:`refuse_unused` lets a default
    through (a config file's ``hidden`` beside a ``--net``)."""
    default = strategy_class(said.get("algo", RLConfig.algo)).default_hidden
    if said.get("net") is not None and said.get("hidden") not in (None, default):
        raise UserError(f"{setting_name('hidden')} sizes mptrain's own network; "
                        f"{setting_name('net')} {said['net']!r} is your network: give it the "
                        f"width, or leave {setting_name('hidden')} out")
    if said.get("net") is not None and said.get("dueling"):
        raise UserError(f"{setting_name('dueling')} builds mptrain's own Q-network with a "
                        f"dueling head; {setting_name('net')} {said['net']!r} is your "
                        "network: build the head into it, or leave "
                        f"{setting_name('dueling')} out")


def applicable_rl_settings(config: dict) -> dict:
    """The settings of a complete config (a checkpoint's) that its algorithm reads: what a
    resumed run takes over. The rest were stored at their defaults of the day, and a
    default changed since (ppo's ``envs_per_actor``, 4 then 8) would otherwise trip
    :func:`refuse_unused` and leave the checkpoint unresumable. A setting the config
    predates takes the value its run had (``SETTINGS_OF_BEFORE``), not today's default:
    a dqn run from before ``return_steps`` goes on with one-step returns."""
    algo = config.get("algo", RLConfig.algo)
    names = rl_setting_names()
    taken = {k: v for k, v in config.items() if k in names and k not in PER_INVOCATION
             and (k not in ALGO_SETTINGS or algo in ALGO_SETTINGS[k])}
    if taken.get("net") is not None:   # stored before it was refused beside a net: unread
        taken.pop("hidden", None)
    before = {k: v for k, v in SETTINGS_OF_BEFORE.items() if algo in ALGO_SETTINGS[k]}
    return {**before, **taken}


#: What a run whose config predates a setting did: its value then (the default changed).
SETTINGS_OF_BEFORE = {"return_steps": 1, "dueling": False}


def algo_defaults(algo: str) -> dict:
    """The defaults of the algorithm-dependent settings for ``algo``."""
    return {name: own.get(algo, default) for name, (default, own) in ALGO_DEFAULTS.items()}


#: RLConfig's fields that are no settings: where a resumed run took up its rounds.
RESUME_FIELDS = frozenset({"resumed_round", "resumed_step"})


def rl_setting_names() -> frozenset:
    return frozenset(f.name for f in fields(RLConfig)) - RESUME_FIELDS


# -- each setting on its own: kind first (a config file may hold "0.1"), then range --------
_POSITIVE_INTS = frozenset({"workers", "steps", "round_steps", "hidden", "eval_episodes",
                            "policy_every", "n_steps", "buffer_size", "batch_size",
                            "train_every", "target_every", "threads_per_worker",
                            "checkpoint_every", "envs_per_actor", "update_epochs",
                            "return_steps"})
_COUNTS = frozenset({"learning_starts", "eps_steps", "max_restarts", "eval_every",
                     "confirm_episodes"})  # >= 0
#: name: (low, high, low_open, high_open)
_NUMBERS = {"lr": (0, None, True, False), "gamma": (0, 1, False, False),
            "gae_lambda": (0, 1, False, False), "eps_start": (0, 1, False, False),
            "eps_end": (0, 1, False, False), "target_tau": (0, 1, True, False),
            "advantage_learning": (0, 1, False, True),
            "entropy_coef": (0, None, False, False),
            "value_coef": (0, None, False, False), "max_grad_norm": (0, None, True, False),
            "worker_timeout": (0, MAX_WORKER_TIMEOUT_S, True, False),
            "target_return": (None, None, False, False),
            "clip_coef": (0, None, True, False), "target_kl": (0, None, True, False)}
_OPTIONAL = frozenset({"lr", "net", "eval_every", "target_return", "threads_per_worker",
                       "start_method", "checkpoint_every", "target_kl",
                       # only ppo's defaults give these: None for the others
                       "update_epochs", "anneal_lr"})
_FLAGS = frozenset({"quiet", "overwrite", "clip_value", "normalize_advantages",
                    "anneal_lr", "dueling"})


def check_rl_setting(name: str, value) -> None:
    """Refuse ``value`` for RL setting ``name`` in one line that names it as the caller wrote
    it (``errors.spelled``). Names without a check here pass: the algorithm checks its own."""
    if value is None and name in _OPTIONAL:
        return
    if name == "algo":
        check_kind(name, value, "a name")
        if value not in ALGOS:
            raise UserError(f"unknown {setting_name(name)} {value!r}"
                            f"{did_you_mean(value, ALGOS)}; choose one of: {', '.join(ALGOS)}")
    elif name in ("env", "net"):
        check_kind(name, value, "a name")
        if not value:
            raise UserError(f"{setting_name(name)} must not be empty")
    elif name in _POSITIVE_INTS:
        check_positive_ints(_One(name, value), (name,))
    elif name in _COUNTS:
        check_kind(name, value, "a whole number")
        if value < 0:
            raise UserError(f"{setting_name(name)} must be an integer >= 0, got {value!r}")
    elif name in _NUMBERS:
        check_number(value, name, *_NUMBERS[name])
    elif name == "seed":
        check_kind(name, value, "a whole number")
        if not 0 <= value <= MAX_SEED:
            raise UserError(f"{setting_name(name)} must be an integer from 0 to 2**63-1, "
                            f"got {value!r}")
    elif name == "keep":
        check_kind(name, value, "a name")
        check_choice(value, name, KEEP_CHOICES)
    elif name == "start_method":
        check_kind(name, value, "a name")
        check_choice(value, name, START_METHODS)
    elif name in _FLAGS:
        check_kind(name, value, "true or false")


class _One:
    def __init__(self, name, value):
        setattr(self, name, value)
