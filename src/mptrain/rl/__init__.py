"""Reinforcement learning with parallel actors on Gymnasium environments.

``a3c``: N actor-learner processes apply n-step actor-critic gradients lock-free to one
shared network (Mnih et al. 2016). ``dqn``: N actors feed a replay buffer in shared memory,
one learner trains a double-DQN with a target network (one machine Ape-X). ``ppo``: N actors
step vectorized environments with the current policy, one learner does PPO's clipped
minibatch epochs on the union of their rollouts (Schulman et al. 2017). All run on
mptrain's supervised workers, with its checkpoints, metrics, console and output files.
Gymnasium is optional (``pip install 'mptrain[rl]'``).
"""

from ..imports import lazy_exports

__all__ = ["fit", "RLConfig", "RLResult", "ALGOS"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "fit": ".api", "RLConfig": ".config", "RLResult": ".family", "ALGOS": "..strategies.registry"})
