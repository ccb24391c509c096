"""fedavg's refusals name the settings as the caller wrote them: ``--clients-per-round`` on
the command line, ``clients_per_round`` from ``fit()`` -- a Python caller told about a flag
must translate it back."""


import pytest

import mptrain
from mptrain.errors import UserError

from fedavg_workload import RUN, make_data, make_model, make_test_data  # noqa: E402
from user_errors import fail  # noqa: E402

WIDE = dict(clients=12, clients_per_round=10)
DP = dict(sampling="poisson", dp_clip=0.5, dp_noise=0.8)

# (fit()'s keywords, what its refusal says; the same as flags, what theirs says)
CASES = {
    "sample-twice": (dict(clients=12, clients_per_round=5, client_fraction=0.5),
                     "give clients_per_round or client_fraction, not both",
                     "give --clients-per-round or --client-fraction, not both"),
    "momentum-with-adam": (dict(WIDE, server_optimizer="adam", server_momentum=0.9),
                           "server_momentum is sgd's; server_optimizer adam has its own "
                           "first moment: set server_betas B1,B2 instead",
                           "--server-momentum is sgd's; --server-optimizer adam"),
    "dp-setting-without-dp": (dict(WIDE, dp_delta=1e-6),
                              "dp_delta is about differential privacy; add dp_noise Z "
                              "(and dp_clip C)",
                              "--dp-delta is about differential privacy; add --dp-noise Z"),
    "robust-rule-with-dp": (dict(WIDE, aggregator="median", **DP),
                            "aggregator median with dp_clip/dp_noise is refused",
                            "--aggregator median with --dp-clip/--dp-noise is refused"),
    "fraction-without-attack": (dict(WIDE, malicious_fraction=0.2),
                                "malicious_fraction needs attack NAME",
                                "--malicious-fraction needs --attack NAME"),
    "krum-f-too-large": (dict(WIDE, aggregator="krum:4"),
                         "give F <= 3 or more clients_per_round",
                         "give F <= 3 or more --clients-per-round"),
    "unknown-attack": (dict(WIDE, malicious_fraction=0.2, attack="sign-flop"),
                       "unknown attack 'sign-flop' (did you mean 'sign-flip'?)",
                       "unknown --attack 'sign-flop' (did you mean 'sign-flip'?)"),
}


def _flags(options: dict) -> list[str]:
    argv = []
    for name, value in options.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_refusals_name_keywords_and_the_command_line_names_flags(case, capsys):
    options, from_python, from_flags = CASES[case]
    with pytest.raises(UserError) as caught:
        mptrain.fit(make_model(), make_data(), make_test_data(),
                    **{**RUN, "workers": 1, **options})
    said = str(caught.value)
    assert from_python in said and "--" not in said and "\n" not in said, said
    shown = fail(["run", "--strategy", "fedavg", "--workers", "1", "--rounds", "1",
                  "--quiet", *_flags(options)], capsys)
    assert from_flags in shown, shown
