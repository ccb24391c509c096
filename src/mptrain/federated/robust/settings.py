"""``--aggregator``, ``--malicious-fraction`` and ``--attack`` for one run, checked against
each other and the sample size: the rule resolved (``rules``), the attack parsed
(``spec``) and the malicious clients drawn from the seed (``attacks``). A pure function of
the settings, so every process that resolves them gets the same."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from .attacks import malicious_clients
from .rules import RobustRule
from .spec import AttackSpec, parse_aggregator, parse_attack


@dataclass(frozen=True)
class RobustSettings:
    """The run's rule (``mean`` by default), its attack (None: nobody attacks) and the
    malicious clients."""

    rule: RobustRule
    attack: AttackSpec | None
    malicious: frozenset[int]

    @property
    def active(self) -> bool:
        """Whether the server goes through this module: a rule other than the mean, or an
        attack. Otherwise FedAvg's own server runs, untouched."""
        return self.rule.name != "mean" or self.attack is not None

    @property
    def needs_table(self) -> bool:
        """Whether the round's individual updates must sit in one shared table: for every
        rule but the mean, and for every attack (the attacker writes what it sends into
        its row; ALIE reads the honest rows)."""
        return self.active


def robust_settings(aggregator: str, malicious_fraction: float, attack: str | None,
                    clients: int, clients_per_round: int, seed: int) -> RobustSettings:
    """Parse and check the three settings against each other and the sample size."""
    spec = parse_aggregator(aggregator)
    rule = RobustRule(spec, clients_per_round)
    if not 0 <= malicious_fraction < 1:
        raise UserError(f"{named('malicious_fraction')} is the share of clients that "
                        f"attack: give 0 <= P < 1, got {malicious_fraction:g}")
    parsed = parse_attack(attack) if attack is not None else None
    if parsed is not None and not malicious_fraction:
        raise UserError(f"{named('attack')} {attack} needs attackers: add "
                        f"{named('malicious_fraction')} P (e.g. 0.2)")
    if parsed is None and malicious_fraction:
        raise UserError(f"{named('malicious_fraction')} needs {named('attack')} NAME: what "
                        "the malicious clients send (sign-flip, gaussian, scaling:LAMBDA, "
                        "label-flip, alie)")
    malicious = frozenset(malicious_clients(clients, malicious_fraction, seed)) \
        if parsed is not None else frozenset()
    return RobustSettings(rule, parsed, malicious)
